package console_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/console"
	"github.com/molecule-ai/molecule-relay/internal/registry"
	"github.com/molecule-ai/molecule-relay/internal/testkit/clustertest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A console served by a relay whose NATS user is a stage user of
// infra/nats/accounts.conf (the poller's, which may read and watch the
// registry, never write it) lists the registry, says at once that
// changes need the admin credentials and how to give them, offers no
// change and refuses one with the same words; NATS is not asked to store
// anything. The same console on the admin user may change it, and its
// check of that wrote nothing to the bucket.
func TestConsoleUnderAStageUserSaysWritesNeedTheAdmin(t *testing.T) {
	for _, kv := range clustertest.PasswordEnv() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	accounts, err := os.ReadFile(filepath.Join("..", "..", "infra", "nats", "accounts.conf"))
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "server.conf")
	if err := os.WriteFile(filepath.Join(dir, "accounts.conf"), accounts, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte("jetstream { store_dir: \""+filepath.Join(dir, "data")+"\" }\ninclude \"accounts.conf\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fileOpts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	ns := natstest.StartEdited(t, func(o *server.Options) {
		fileOpts.Host, fileOpts.Port, fileOpts.NoLog, fileOpts.NoSigs = "127.0.0.1", -1, true, true
		*o = *fileOpts
	})
	connect := func(user string) jetstream.JetStream {
		nc, err := nats.Connect(ns.ClientURL(), nats.UserInfo(user, clustertest.Password(user)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	ctx := pipelinetest.Ctx(t)
	adminJS, pollerJS := connect(clustertest.UserAdmin), connect(clustertest.UserPoller)
	topo, err := events.EnsureTopology(ctx, adminJS, events.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	key, _, err := registry.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	admin, err := registry.Open(ctx, adminJS, key, true, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Put(ctx, registry.Entry{ID: "ws-a", PlatformURL: "https://acme.example", Token: wsToken}); err != nil {
		t.Fatal(err)
	}
	serve := func(js jetstream.JetStream) *fixture {
		reg, err := registry.Open(ctx, js, key, false, 1) // as a stage opens it: no create
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Start(ctx, nil, nil); err != nil { // and follows it
			t.Fatal(err)
		}
		c, err := console.New(js, topo, console.Options{Registry: reg, Logger: pipelinetest.Logger()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		srv := httptest.NewServer(c)
		t.Cleanup(srv.Close)
		return &fixture{srv: srv, url: srv.URL}
	}

	f := serve(pollerJS)
	c := browserClient(t)
	csrf := f.csrf(t, c)
	t0 := time.Now()
	resp, body := f.do(t, c, "GET", "/api/workspaces", "")
	took := time.Since(t0)
	how := []string{"may read the workspace registry but not change it", "only the admin user writes molecule_workspaces", "infra/nats/accounts.conf", "NATS_USER=admin", "molecule-relay workspaces add"}
	if resp.StatusCode != http.StatusOK || !contains(body, `"id":"ws-a"`, `"writable":false`) || !contains(body, how...) {
		t.Errorf("view under the poller user: %d %s, want ws-a listed, not writable, and why", resp.StatusCode, body)
	}
	t.Logf("the view under the poller user answered in %s", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("the view took %s: the write check waited for a timeout", took)
	}
	for _, path := range []string{"/api/workspaces/add", "/api/workspaces/pause", "/api/workspaces/remove"} {
		b := `{"id":"ws-a"}`
		if strings.HasSuffix(path, "add") {
			b = `{"id":"ws-b","platform_url":"https://acme.example","token":"` + wsToken + `"}`
		}
		if resp, body := f.do(t, c, "POST", path, b, "X-CSRF-Token", csrf); resp.StatusCode != http.StatusForbidden || !contains(body, how...) || strings.Contains(body, wsToken) {
			t.Errorf("%s under the poller user: %d %s, want 403 saying writes need the admin", path, resp.StatusCode, body)
		}
	}
	if all, err := admin.List(ctx); err != nil || len(all) != 1 || all[0].Paused {
		t.Errorf("registry after the refused changes: %v %v, want ws-a only, active", all, err)
	}

	g := serve(adminJS)
	if _, body := g.do(t, c, "GET", "/api/workspaces", ""); !contains(body, `"id":"ws-a"`, `"writable":true`) || strings.Contains(body, "write_note") {
		t.Errorf("view under the admin user: %s, want it writable", body)
	}
	info, err := adminJS.Stream(ctx, "KV_"+registry.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if st := info.CachedInfo().State; st.Msgs != 1 || st.LastSeq != 1 {
		t.Errorf("bucket after the write checks: %d messages, last sequence %d, want only ws-a's one put", st.Msgs, st.LastSeq)
	}
}
