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

func render(t *testing.T, h string, set ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", "rel", "../helm/molecule-relay", "--namespace", "molecule-relay"}
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
		{"defaults", nil, map[string]int{"Deployment": 2, "CronJob": 1}},
		{"keda and a long-running poller", []string{"keda.enabled=true", "poller.mode=deployment"},
			map[string]int{"Deployment": 3, "ScaledObject": 2}},
		{"image digest, replier off", []string{"image.digest=sha256:" + strings.Repeat("ab", 32), "replier.enabled=false", "keda.enabled=true"},
			map[string]int{"Deployment": 1, "CronJob": 1, "ScaledObject": 1}},
		{"workspaces on two tenants", []string{"platform.workspaceIds={" + tenantIDs + "}", "platform.urls={https://acme.moleculesai.app,https://globex.moleculesai.app}", "platform.orgIds={acme-org,globex-org}"},
			map[string]int{"Deployment": 2, "CronJob": 1}},
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
	if _, err := render(t, h, "image.tag=latest"); err == nil || !strings.Contains(err.Error(), "not latest") {
		t.Errorf("image.tag=latest rendered (err %v), want the chart to refuse it", err)
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
	so := "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec:\n  scaleTargetRef: {name: x}\n  minReplicas: 1\n  triggers: []\n"
	if _, err := Decode("scaledobject", strings.NewReader(so)); err == nil {
		t.Error("a ScaledObject with minReplicas (KEDA's field is minReplicaCount) decoded without error")
	}
}
