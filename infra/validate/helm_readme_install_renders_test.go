package validate

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The Helm install of docs/deploy-cluster.md (the README points there), as
// a user would paste it, is complete: every
// namespace is created before it is used, the relay's chart renders with
// exactly the page's `helm install` arguments (run as `helm template`,
// no cluster), every Secret key the rendered pods and the NATS chart's
// values read is created by the page's `kubectl create secret`, and the
// relay's NATS URL names the NATS release the page installs. The chart's
// own README carries the same steps for the relay.
func TestHelmREADMEInstallRenders(t *testing.T) {
	h := helm(t)
	for _, doc := range []string{"../../docs/deploy-cluster.md", "../helm/molecule-relay/README.md"} {
		t.Run(doc, func(t *testing.T) {
			cmds := helmInstallCommands(t, doc)
			if len(cmds) == 0 {
				t.Fatalf("%s: no shell block with `helm install relay`", doc)
			}
			checkInstallSteps(t, h, doc, cmds)
		})
	}
}

// installState is what the page's commands have created so far.
type installState struct {
	repos      map[string]string          // helm repo name -> URL
	namespaces map[string]bool            // kubectl create namespace
	secretKeys map[string]map[string]bool // "ns/name" -> keys
	natsHost   string                     // <release>.<namespace>.svc of the NATS install
}

func checkInstallSteps(t *testing.T, h, doc string, cmds [][]string) {
	st := installState{repos: map[string]string{}, namespaces: map[string]bool{"default": true}, secretKeys: map[string]map[string]bool{}}
	renderedRelay := false
	for _, c := range cmds {
		line := strings.Join(c, " ")
		switch {
		case len(c) >= 5 && c[0] == "helm" && c[1] == "repo" && c[2] == "add":
			st.repos[c[3]] = c[4]
		case len(c) == 4 && c[0] == "kubectl" && c[1] == "create" && c[2] == "namespace":
			st.namespaces[c[3]] = true
		case len(c) >= 6 && c[0] == "kubectl" && slices.Contains(c, "secret"):
			ns := flagValue(c, "-n")
			st.needNamespace(t, ns, line)
			name := c[slices.Index(c, "generic")+1]
			keys := map[string]bool{}
			for _, a := range c {
				if kv, ok := strings.CutPrefix(a, "--from-literal="); ok {
					k, _, _ := strings.Cut(kv, "=")
					keys[k] = true
				}
			}
			st.secretKeys[ns+"/"+name] = keys
		case len(c) >= 4 && c[0] == "helm" && c[1] == "install" && c[3] == "nats/nats":
			st.checkNATSInstall(t, c, line)
		case len(c) >= 4 && c[0] == "helm" && c[1] == "install" && c[3] == "infra/helm/molecule-relay":
			st.checkRelayInstall(t, h, c, line)
			renderedRelay = true
		}
	}
	if !renderedRelay {
		t.Errorf("%s: no `helm install ... infra/helm/molecule-relay`", doc)
	}
}

func (st installState) needNamespace(t *testing.T, ns, line string) {
	t.Helper()
	if ns == "" || !st.namespaces[ns] {
		t.Errorf("%q: namespace %q is not created before (kubectl create namespace)", line, ns)
	}
}

// checkSecretRef fails unless the page created key in Secret ns/name.
func (st installState) checkSecretRef(t *testing.T, who, ns string, ref *corev1.SecretKeySelector) {
	t.Helper()
	if ref == nil {
		return
	}
	if keys, ok := st.secretKeys[ns+"/"+ref.Name]; !ok || !keys[ref.Key] {
		t.Errorf("%s reads key %q of Secret %s/%s, which the page's kubectl create secret does not create (created: %v)", who, ref.Key, ns, ref.Name, st.secretKeys)
	}
}

func (st *installState) checkNATSInstall(t *testing.T, c []string, line string) {
	release, ns := c[2], flagValue(c, "-n")
	st.needNamespace(t, ns, line)
	if url := st.repos["nats"]; url != "https://nats-io.github.io/k8s/helm/charts/" {
		t.Errorf("%q: the nats repo is %q; add it first (helm repo add nats https://nats-io.github.io/k8s/helm/charts/)", line, url)
	}
	data, err := os.ReadFile("../../" + flagValue(c, "-f"))
	if err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	var values struct {
		Container struct {
			Env map[string]struct {
				ValueFrom corev1.EnvVarSource `json:"valueFrom"`
			} `json:"env"`
		} `json:"container"`
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	if len(values.Container.Env) == 0 {
		t.Fatalf("%q: the NATS values read no Secret", line)
	}
	for name, e := range values.Container.Env {
		st.checkSecretRef(t, "NATS env "+name, ns, e.ValueFrom.SecretKeyRef)
	}
	st.natsHost = release + "." + ns + ".svc"
}

func (st installState) checkRelayInstall(t *testing.T, h string, c []string, line string) {
	ns := flagValue(c, "-n")
	st.needNamespace(t, ns, line)
	args := append([]string{"template"}, c[2:]...)
	cmd := exec.Command(h, args...)
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	objs, err := Decode("README install", bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	checkAll(t, objs)
	pods := 0
	for _, o := range objs {
		var spec corev1.PodSpec
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			spec = v.Spec.Template.Spec
		case *batchv1.CronJob:
			spec = v.Spec.JobTemplate.Spec.Template.Spec
		default:
			continue
		}
		pods++
		for _, ctr := range spec.Containers {
			for _, e := range ctr.Env {
				if e.ValueFrom != nil {
					st.checkSecretRef(t, o.Kind+" "+o.Name+" env "+e.Name, ns, e.ValueFrom.SecretKeyRef)
				}
				if e.Name == "NATS_URL" && st.natsHost != "" && !strings.Contains(e.Value, "//"+st.natsHost+".") && !strings.Contains(e.Value, "//"+st.natsHost+":") {
					t.Errorf("%s %s: NATS_URL %q is not the NATS the README installs (%s)", o.Kind, o.Name, e.Value, st.natsHost)
				}
			}
		}
	}
	if pods != 3 {
		t.Errorf("the README's install renders %d stages, want 3", pods)
	}
}

// helmInstallCommands returns the commands, one word list each, of the
// first shell block of doc that installs the relay's chart.
func helmInstallCommands(t *testing.T, doc string) [][]string {
	t.Helper()
	data, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile("(?s)\n```[a-z]*\n(.*?)\n```").FindAllStringSubmatch(string(data), -1) {
		if !strings.Contains(m[1], "helm install relay ") {
			continue
		}
		var cmds [][]string
		for _, line := range strings.Split(strings.ReplaceAll(m[1], "\\\n", " "), "\n") {
			if w := shellWords(t, line); len(w) > 0 {
				cmds = append(cmds, w)
			}
		}
		return cmds
	}
	return nil
}

// shellWords splits a command line as sh does for the README's lines:
// blanks separate words, quotes group them, # starts a comment.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			w.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '#' && !inWord:
			return words
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		t.Fatalf("unterminated quote in %q", line)
	}
	if inWord {
		words = append(words, w.String())
	}
	return words
}

// flagValue is the word after flag in c ("" when absent).
func flagValue(c []string, flag string) string {
	if i := slices.Index(c, flag); i >= 0 && i+1 < len(c) {
		return c[i+1]
	}
	return ""
}
