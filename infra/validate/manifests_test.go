package validate

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
)

// notManifests are infra/k8s files that are not Kubernetes objects.
var notManifests = map[string]string{
	"nats-helm-values.yaml": "values for the official NATS chart",
}

func decodeFile(t *testing.T, path string) []Object {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	objs, err := Decode(path, f)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func checkAll(t *testing.T, objs []Object) {
	t.Helper()
	for _, err := range Check(objs) {
		t.Error(err)
	}
	checkStopGrace(t, objs)
}

// checkStopGrace: a long-running stage's MOLECULE_STOP_GRACE ends before
// Kubernetes' SIGKILL (terminationGracePeriodSeconds, default 30 s), so
// the stop it promises is never cut.
func checkStopGrace(t *testing.T, objs []Object) {
	t.Helper()
	for _, o := range objs {
		d, ok := o.Value.(*appsv1.Deployment)
		if !ok {
			continue
		}
		kill := 30 * time.Second
		if p := d.Spec.Template.Spec.TerminationGracePeriodSeconds; p != nil {
			kill = time.Duration(*p) * time.Second
		}
		found := false
		for _, c := range d.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if e.Name != "MOLECULE_STOP_GRACE" {
					continue
				}
				found = true
				g, err := time.ParseDuration(e.Value)
				if err != nil || g >= kill {
					t.Errorf("Deployment %s: MOLECULE_STOP_GRACE %q must be a duration below its terminationGracePeriodSeconds (%s)", d.Name, e.Value, kill)
				}
			}
		}
		if !found {
			t.Errorf("Deployment %s sets no MOLECULE_STOP_GRACE: the relay's default (25s) must then stay below %s", d.Name, kill)
		}
	}
}

// Every manifest in infra/k8s decodes strictly into the k8s.io/api and
// KEDA Go types and follows the rules of Check.
func TestK8sManifestsDecodeStrictly(t *testing.T) {
	paths, err := filepath.Glob("../k8s/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no infra/k8s manifests found (%v)", err)
	}
	var all []Object
	kinds := map[string]int{}
	for _, p := range paths {
		if why, ok := notManifests[filepath.Base(p)]; ok {
			t.Logf("%s: skipped, %s", p, why)
			continue
		}
		for _, o := range decodeFile(t, p) {
			kinds[o.Kind]++
			all = append(all, o)
		}
	}
	checkAll(t, all)
	if kinds["Deployment"] != 2 || kinds["CronJob"] != 1 || kinds["ScaledObject"] != 2 {
		t.Errorf("infra/k8s kinds %v, want 2 Deployments, 1 CronJob, 2 ScaledObjects", kinds)
	}
}

// helm finds the helm binary: $HELM, else helm on PATH.
func helm(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	if h, err := exec.LookPath("helm"); err == nil {
		return h
	}
	t.Skip("helm not found: set HELM or run `make validate-infra`, which builds it")
	return ""
}

// render renders the chart with the required values of
// ci/example-values.yaml and set.
func render(t *testing.T, h string, set ...string) ([]byte, error) {
	t.Helper()
	return renderWith(t, h, []string{"-f", "../helm/molecule-relay/ci/example-values.yaml"}, set...)
}

func renderWith(t *testing.T, h string, extra []string, set ...string) ([]byte, error) {
	t.Helper()
	args := append([]string{"template", "rel", "../helm/molecule-relay", "--namespace", "molecule-relay"}, extra...)
	for _, s := range set {
		args = append(args, "--set", s)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(h, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, errors.New(err.Error() + ": " + stderr.String())
	}
	return out, nil
}

// The chart's output, for its default values and its options, decodes
// strictly and follows the rules of Check.
func TestHelmChartRendersValidManifests(t *testing.T) {
	h := helm(t)
	for _, tc := range []struct {
		name  string
		set   []string
		kinds map[string]int
	}{
		{"defaults", nil, map[string]int{"Deployment": 2, "CronJob": 1, "ServiceAccount": 1, "PodDisruptionBudget": 2}},
		{"keda and a long-running poller", []string{"keda.enabled=true", "poller.mode=deployment"},
			map[string]int{"Deployment": 3, "ScaledObject": 2, "ServiceAccount": 1, "PodDisruptionBudget": 2}},
		{"image digest, replier off", []string{"image.digest=sha256:" + strings.Repeat("ab", 32), "replier.enabled=false", "keda.enabled=true"},
			map[string]int{"Deployment": 1, "CronJob": 1, "ScaledObject": 1, "ServiceAccount": 1, "PodDisruptionBudget": 1}},
		{"workspaces on two tenants", []string{"platform.workspaceIds={" + tenantIDs + "}", "platform.urls={https://acme.moleculesai.app,https://globex.moleculesai.app}", "platform.orgIds={acme-org,globex-org}"},
			map[string]int{"Deployment": 2, "CronJob": 1, "ServiceAccount": 1, "PodDisruptionBudget": 2}},
		{"service monitor, scheduling, an existing account, no PDB", []string{"metrics.serviceMonitor.enabled=true", "poller.mode=deployment",
			"serviceAccount.create=false", "serviceAccount.name=relay-sa", "podDisruptionBudget.enabled=false",
			"nodeSelector.pool=agents", "dispatcher.nodeSelector.pool=gpu", "tolerations[0].key=dedicated", "tolerations[0].operator=Exists",
			"topologySpreadConstraints[0].maxSkew=1", "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
			"topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway"},
			map[string]int{"Deployment": 3, "Service": 3, "ServiceMonitor": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, h, tc.set...)
			if err != nil {
				t.Fatal(err)
			}
			objs, err := Decode("helm template "+tc.name, bytes.NewReader(out))
			if err != nil {
				t.Fatal(err)
			}
			checkAll(t, objs)
			kinds := map[string]int{}
			for _, o := range objs {
				kinds[o.Kind]++
				if d, ok := o.Value.(*appsv1.Deployment); ok && d.Spec.Replicas != nil && slices.Contains(tc.set, "keda.enabled=true") && !strings.HasSuffix(d.Name, "-poller") {
					t.Errorf("Deployment %s sets replicas although KEDA scales it", d.Name)
				}
			}
			if len(kinds) != len(tc.kinds) {
				t.Errorf("kinds %v, want %v", kinds, tc.kinds)
			}
			for k, n := range tc.kinds {
				if kinds[k] != n {
					t.Errorf("kinds %v, want %v", kinds, tc.kinds)
					break
				}
			}
		})
	}
	if _, err := render(t, h, "image.tag=latest"); err == nil {
		t.Errorf("image.tag=latest rendered, want the chart to refuse it")
	}
	// As the relay exits 2 on a count mismatch, the chart refuses to render one.
	if _, err := render(t, h, "platform.urls={https://acme.moleculesai.app,https://globex.moleculesai.app}"); err == nil || !strings.Contains(err.Error(), "pair by position") {
		t.Errorf("2 platform.urls for 1 workspace rendered (err %v), want the chart to refuse it", err)
	}
	out, err := render(t, h, "platform.workspaceIds={"+tenantIDs+"}", "platform.urls={https://acme.moleculesai.app,https://globex.moleculesai.app}", "platform.orgIds={acme-org,}")
	if err != nil || !bytes.Contains(out, []byte(`{name: MOLECULE_PLATFORM_URLS, value: "https://acme.moleculesai.app,https://globex.moleculesai.app"}`)) ||
		!bytes.Contains(out, []byte(`{name: MOLECULE_ORG_IDS, value: "acme-org,"}`)) {
		t.Errorf("several tenants: err %v; MOLECULE_PLATFORM_URLS or MOLECULE_ORG_IDS missing from the poller and replier", err)
	}
}

// tenantIDs are two workspace ids for the several-tenants renders.
const tenantIDs = "11111111-1111-4111-8111-111111111111,22222222-2222-4222-8222-222222222222"

// The check can fail: a misspelt field, a field in the wrong place, an
// unpinned image and a /metrics liveness probe are each reported.
func TestStrictDecodeAndCheckRefuseBadManifests(t *testing.T) {
	good, err := os.ReadFile("../k8s/dispatcher.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, from, to string
		decodeErr      bool
	}{
		{"misspelt field", "livenessProbe:", "livenesProbe:", true},
		{"duplicate field", "terminationGracePeriodSeconds: 30", "terminationGracePeriodSeconds: 30\n      terminationGracePeriodSeconds: 60", true},
		{"liveness on /metrics", "{path: /livez,", "{path: /metrics,", false},
		{"latest image", "molecule-relay:v0.1.0", "molecule-relay:latest", false},
		{"untagged image", "molecule-relay:v0.1.0", "molecule-relay", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := strings.Replace(string(good), tc.from, tc.to, 1)
			if bad == string(good) {
				t.Fatalf("%q not in dispatcher.yaml: the case tests nothing", tc.from)
			}
			objs, err := Decode(tc.name, strings.NewReader(bad))
			if tc.decodeErr {
				if err == nil {
					t.Fatal("decoded without error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if errs := Check(objs); len(errs) == 0 {
				t.Fatal("Check found nothing")
			}
		})
	}
	// Objects beside the Deployment that select nothing of the set, and a
	// pod that mounts its account's token.
	for name, extra := range map[string]string{
		"PDB selecting no pod":          "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\nspec:\n  maxUnavailable: 1\n  selector: {matchLabels: {app.kubernetes.io/component: nobody}}\n",
		"Service selecting no pod":      "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  selector: {app.kubernetes.io/component: nobody}\n  ports: [{name: http, port: 8080}]\n",
		"ServiceMonitor selecting none": "apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec:\n  selector: {matchLabels: {molecule-relay/metrics: \"true\"}}\n  endpoints: [{port: http}]\n",
		"token mounted":                 "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: x}\n",
	} {
		objs, err := Decode(name, strings.NewReader(string(good)+"\n---\n"+extra))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if errs := Check(objs); len(errs) == 0 {
			t.Errorf("%s: Check found nothing", name)
		}
	}
	so := "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec:\n  scaleTargetRef: {name: x}\n  minReplicas: 1\n  triggers: []\n"
	if _, err := Decode("scaledobject", strings.NewReader(so)); err == nil {
		t.Error("a ScaledObject with minReplicas (KEDA's field is minReplicaCount) decoded without error")
	}
}

// A plain install, without the required values, fails naming them rather
// than rendering a placeholder workspace; so does a misspelt value.
func TestHelmChartRefusesMissingRequiredValues(t *testing.T) {
	h := helm(t)
	_, err := renderWith(t, h, nil)
	if err == nil {
		t.Fatal("the chart rendered without platform.url, platform.workspaceIds and secret.name")
	}
	for _, want := range []string{"platform", "url", "workspaceIds", "secret", "name"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not name %q: %v", want, err)
		}
	}
	if _, err := render(t, h, "platform.workspaceIds={00000000-0000-0000-0000-000000000000}"); err == nil {
		t.Error("the zero UUID rendered as a workspace id")
	}
	if _, err := render(t, h, "platfrom.url=https://x.example"); err == nil || !strings.Contains(err.Error(), "platfrom") {
		t.Errorf("a misspelt top-level value rendered (err %v)", err)
	}
}

// The dispatcher gets the platform URL and the workspace tokens while the
// agent API is on (without them it answers 503), and neither when it is
// off.
func TestHelmDispatcherGetsTokensForTheAgentAPI(t *testing.T) {
	h := helm(t)
	envOf := func(set ...string) map[string]bool {
		t.Helper()
		out, err := render(t, h, set...)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := Decode("helm template", bytes.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]bool{}
		for _, o := range objs {
			if d, ok := o.Value.(*appsv1.Deployment); ok && strings.HasSuffix(d.Name, "-dispatcher") {
				for _, e := range d.Spec.Template.Spec.Containers[0].Env {
					names[e.Name] = true
					if e.Name == "MOLECULE_AGENT_API_LISTEN" && e.Value != "off" {
						t.Errorf("MOLECULE_AGENT_API_LISTEN=%q", e.Value)
					}
				}
			}
		}
		return names
	}
	on := envOf()
	if !on["MOLECULE_WORKSPACE_TOKENS"] || !on["MOLECULE_PLATFORM_URL"] || !on["MOLECULE_WORKSPACE_IDS"] || on["MOLECULE_AGENT_API_LISTEN"] {
		t.Errorf("agent API on: dispatcher env %v; want the platform URL, ids and tokens", on)
	}
	off := envOf("dispatcher.agentApi=false")
	if off["MOLECULE_WORKSPACE_TOKENS"] || !off["MOLECULE_AGENT_API_LISTEN"] {
		t.Errorf("agent API off: dispatcher env %v; want no tokens and MOLECULE_AGENT_API_LISTEN=off", off)
	}
}
