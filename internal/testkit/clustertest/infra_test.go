package clustertest_test

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/molecule-ai/molecule-relay/internal/testkit/clustertest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/samtemplate"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// infraDocs parses every YAML file under infra/ and returns its documents by
// path relative to infra/.
func infraDocs(t *testing.T) map[string][]map[string]any {
	t.Helper()
	root := filepath.Dir(clustertest.ConfDir(t))
	out := map[string][]map[string]any{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == "templates" && strings.Contains(path, string(filepath.Separator)+"helm"+string(filepath.Separator)) {
			return fs.SkipDir // Helm templates are not YAML until rendered (infra/validate checks the rendered output)
		}
		if err != nil || d.IsDir() || !(strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			return err
		}
		docs, err := samtemplate.Load(path)
		if err != nil {
			t.Errorf("%s: %v", path, err)
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		for i, d := range docs {
			m, ok := d.(map[string]any)
			if !ok {
				t.Errorf("%s: document %d is not a mapping", rel, i)
				continue
			}
			out[rel] = append(out[rel], m)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func path(v any, keys ...string) any {
	got, _ := samtemplate.Path(v, keys...)
	return got
}

// k8sObjects returns the Kubernetes objects under infra/k8s by kind and
// name.
func k8sObjects(docs map[string][]map[string]any) map[string]map[string]any {
	objs := map[string]map[string]any{}
	for file, ds := range docs {
		if !strings.HasPrefix(file, "k8s"+string(filepath.Separator)) {
			continue
		}
		for _, d := range ds {
			if kind, ok := d["kind"].(string); ok {
				name, _ := path(d, "metadata", "name").(string)
				objs[kind+"/"+name] = d
			}
		}
	}
	return objs
}

func TestInfraYAML(t *testing.T) {
	docs := infraDocs(t)
	for _, want := range []string{
		"compose/docker-compose.yml", "k8s/dispatcher.yaml", "k8s/replier.yaml", "k8s/poller-cronjob.yaml",
		"k8s/keda-scaledobject.yaml", "k8s/nats-helm-values.yaml",
	} {
		if _, ok := docs[filepath.FromSlash(want)]; !ok {
			t.Errorf("infra/%s missing or unparsable", want)
		}
	}
	objs := k8sObjects(docs)
	var topo events.TopologyConfig
	topo.SetDefaults()

	t.Run("worker deployments", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			user    string
			ackWait time.Duration
		}{
			{"molecule-dispatcher", clustertest.UserDispatcher, topo.DispatcherAckWait},
			{"molecule-replier", clustertest.UserReplier, topo.ReplierAckWait},
		} {
			d := objs["Deployment/"+tc.name]
			if d == nil {
				t.Errorf("no Deployment %s", tc.name)
				continue
			}
			spec := path(d, "spec", "template", "spec")
			c := path(spec, "containers", "0")
			// The pod's SIGKILL comes after the relay's own graceful stop
			// (MOLECULE_STOP_GRACE: finish the handlers, post the replies),
			// and never before a held message could be handed back.
			grace, _ := path(spec, "terminationGracePeriodSeconds").(int)
			kill := time.Duration(grace) * time.Second
			stopGrace, err := time.ParseDuration(fmt.Sprint(containerEnv(c)["MOLECULE_STOP_GRACE"]))
			if err != nil || kill <= stopGrace || kill < tc.ackWait {
				t.Errorf("%s: terminationGracePeriodSeconds %d, want above MOLECULE_STOP_GRACE (%v) and >= the ack wait %s", tc.name, grace, containerEnv(c)["MOLECULE_STOP_GRACE"], tc.ackWait)
			}
			if p := path(c, "readinessProbe", "httpGet", "path"); p != "/healthz" {
				t.Errorf("%s: readiness probe path %v, want /healthz (NATS connected)", tc.name, p)
			}
			if port := path(c, "readinessProbe", "httpGet", "port"); port != 8080 {
				t.Errorf("%s: readiness probe port %v, want 8080", tc.name, port)
			}
			if path(c, "livenessProbe") == nil {
				t.Errorf("%s: no liveness probe", tc.name)
			}
			env := containerEnv(c)
			if env["MOLECULE_TOPOLOGY"] != "lookup" {
				t.Errorf("%s: MOLECULE_TOPOLOGY %v, want lookup (its user may not create the topology)", tc.name, env["MOLECULE_TOPOLOGY"])
			}
			if env["NATS_USER"] != tc.user {
				t.Errorf("%s: NATS_USER %v, want its own user %s", tc.name, env["NATS_USER"], tc.user)
			}
			if path(env["NATS_PASSWORD"], "valueFrom", "secretKeyRef") == nil {
				t.Errorf("%s: NATS_PASSWORD not from a Secret", tc.name)
			}
		}
	})

	t.Run("poller cronjob", func(t *testing.T) {
		cj := objs["CronJob/molecule-poller"]
		if cj == nil {
			t.Fatal("no CronJob molecule-poller")
		}
		if p := path(cj, "spec", "concurrencyPolicy"); p != "Forbid" {
			t.Errorf("concurrencyPolicy %v, want Forbid", p)
		}
		c := path(cj, "spec", "jobTemplate", "spec", "template", "spec", "containers", "0")
		args, _ := path(c, "args").([]any)
		if !slices.Contains(args, any("--once")) {
			t.Errorf("poller args %v lack --once", args)
		}
		if env := containerEnv(c); env["NATS_USER"] != clustertest.UserPoller || env["MOLECULE_TOPOLOGY"] != "lookup" {
			t.Errorf("poller NATS_USER %v, MOLECULE_TOPOLOGY %v", env["NATS_USER"], env["MOLECULE_TOPOLOGY"])
		}
	})

	t.Run("keda", func(t *testing.T) {
		pairs := map[string]string{events.StreamInbound: events.ConsumerDispatcher, events.StreamReply: events.ConsumerReplier}
		foundDispatcher := false
		for key, o := range objs {
			if !strings.HasPrefix(key, "ScaledObject/") {
				continue
			}
			target, _ := path(o, "spec", "scaleTargetRef", "name").(string)
			if objs["Deployment/"+target] == nil {
				t.Errorf("%s scales unknown Deployment %q", key, target)
			}
			triggers, _ := path(o, "spec", "triggers").([]any)
			for _, tr := range triggers {
				if path(tr, "type") != "nats-jetstream" {
					continue
				}
				md := path(tr, "metadata")
				stream, _ := path(md, "stream").(string)
				consumer, _ := path(md, "consumer").(string)
				if pairs[stream] != consumer || consumer == "" {
					t.Errorf("%s: stream %q consumer %q is not one of the internal/events pairs %v", key, stream, consumer, pairs)
				}
				if path(md, "account") != "RELAY" {
					t.Errorf("%s: account %v, want RELAY", key, path(md, "account"))
				}
				if ep, _ := path(md, "natsServerMonitoringEndpoint").(string); !strings.HasSuffix(ep, ":8222") {
					t.Errorf("%s: monitoring endpoint %q", key, ep)
				}
				if _, ok := path(md, "lagThreshold").(string); !ok {
					t.Errorf("%s: lagThreshold must be a string", key)
				}
				if stream == events.StreamInbound && consumer == events.ConsumerDispatcher && target == "molecule-dispatcher" {
					foundDispatcher = true
				}
			}
		}
		if !foundDispatcher {
			t.Error("no nats-jetstream ScaledObject on the dispatcher's durable consumer scaling molecule-dispatcher")
		}
	})

	t.Run("helm values match accounts.conf", func(t *testing.T) {
		v := docs[filepath.FromSlash("k8s/nats-helm-values.yaml")][0]
		if path(v, "config", "cluster", "replicas") != 3 || path(v, "config", "jetstream", "fileStore", "enabled") != true {
			t.Errorf("helm values: cluster replicas %v, file store %v", path(v, "config", "cluster", "replicas"), path(v, "config", "jetstream", "fileStore", "enabled"))
		}
		confUsers := accountsConfUsers(t)
		users, _ := path(v, "config", "merge", "accounts", "RELAY", "users").([]any)
		seen := map[string]bool{}
		for _, u := range users {
			name, _ := path(u, "user").(string)
			seen[name] = true
			want, ok := confUsers[name]
			if !ok {
				t.Errorf("helm user %s not in accounts.conf", name)
				continue
			}
			got := [4][]string{
				strings_(path(u, "permissions", "publish", "allow")), strings_(path(u, "permissions", "publish", "deny")),
				strings_(path(u, "permissions", "subscribe", "allow")), strings_(path(u, "permissions", "subscribe", "deny")),
			}
			for i := range got {
				slices.Sort(got[i])
				if !slices.Equal(got[i], want[i]) {
					t.Errorf("helm user %s permissions[%d] = %v, accounts.conf has %v", name, i, got[i], want[i])
				}
			}
		}
		for name := range confUsers {
			if !seen[name] {
				t.Errorf("accounts.conf user %s missing from the helm values", name)
			}
		}
	})

	t.Run("compose", func(t *testing.T) {
		c := docs[filepath.FromSlash("compose/docker-compose.yml")][0]
		for _, n := range clustertest.NodeNames {
			cmd, _ := path(c, "services", n, "command").([]any)
			if !slices.Contains(cmd, any("/etc/nats/"+n+".conf")) {
				t.Errorf("service %s does not run %s.conf: %v", n, n, cmd)
			}
		}
		for svc, user := range map[string]string{"dispatcher": clustertest.UserDispatcher, "replier": clustertest.UserReplier, "poller": clustertest.UserPoller, "topology": clustertest.UserAdmin} {
			if u := path(c, "services", svc, "environment", "NATS_USER"); u != user {
				t.Errorf("compose %s runs as %v, want %s", svc, u, user)
			}
			want := "lookup"
			if user == clustertest.UserAdmin {
				want = "ensure"
			}
			if m := path(c, "services", svc, "environment", "MOLECULE_TOPOLOGY"); m != want {
				t.Errorf("compose %s MOLECULE_TOPOLOGY %v, want %s", svc, m, want)
			}
		}
		if r, _ := path(c, "services", "dispatcher", "deploy", "replicas").(int); r < 2 {
			t.Errorf("compose dispatcher replicas %d, want >= 2", r)
		}
	})
}

func strings_(v any) []string {
	l, _ := v.([]any)
	out := []string{}
	for _, e := range l {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func containerEnv(c any) map[string]any {
	env := map[string]any{}
	l, _ := path(c, "env").([]any)
	for _, e := range l {
		name, _ := path(e, "name").(string)
		if v, ok := path(e, "value").(string); ok {
			env[name] = v
		} else {
			env[name] = e
		}
	}
	return env
}

// accountsConfUsers parses n1.conf (which includes accounts.conf) with the
// server's parser and returns each RELAY user's publish allow/deny and
// subscribe allow/deny lists, sorted.
func accountsConfUsers(t *testing.T) map[string][4][]string {
	t.Helper()
	for _, kv := range clustertest.PasswordEnv() {
		k, v, _ := cut(kv)
		t.Setenv(k, v)
	}
	o, err := server.ProcessConfigFile(filepath.Join(clustertest.ConfDir(t), "n1.conf"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][4][]string{}
	for _, u := range o.Users {
		if u.Account == nil || u.Account.Name != "RELAY" {
			continue
		}
		var p [4][]string
		for i := range p {
			p[i] = []string{}
		}
		if u.Permissions != nil {
			if pub := u.Permissions.Publish; pub != nil {
				p[0], p[1] = append(p[0], pub.Allow...), append(p[1], pub.Deny...)
			}
			if sub := u.Permissions.Subscribe; sub != nil {
				p[2], p[3] = append(p[2], sub.Allow...), append(p[3], sub.Deny...)
			}
		}
		for i := range p {
			slices.Sort(p[i])
		}
		out[u.Username] = p
	}
	return out
}
