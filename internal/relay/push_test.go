package relay_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/ingress"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return port
}

// Push mode from configuration, on both platform generations: Run serves
// the push ingress, the poller registers the workspace with its secret URL
// and never fetches the feed, each message the double pushes is handled
// and answered exactly once through /notify, the workspace heartbeats and
// its state keeps being checked, and a wrong secret path is 404.
func TestE2EPushModeConnect(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		gen  moleculetest.Generation
	}{{"old", moleculetest.Gen2026_04}, {"new", moleculetest.Gen2026_05}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := pipelinetest.New(t, pipelinetest.Options{Platform: []moleculetest.Option{moleculetest.WithGeneration(tc.gen)}})
			port := freePort(t)
			base := "http://localhost:" + strconv.Itoa(port) // the double refuses loopback IP literals, not the name
			cfg, err := config.Load(nil, []string{
				"MOLECULE_PLATFORM_URL=" + w.Plat.URL(),
				"MOLECULE_WORKSPACE_ID=" + w.Agent.ID,
				"MOLECULE_WORKSPACE_TOKEN=" + w.Agent.Token,
				"MOLECULE_HANDLER=echo",
				"MOLECULE_POLL_INTERVAL=100ms",
				"NATS_URL=" + w.NATSURL(),
				"MOLECULE_PUSH_LISTEN=127.0.0.1:" + strconv.Itoa(port),
				"MOLECULE_PUSH_URL=" + base,
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := cfg.Validate(config.NeedPlatform | config.NeedHandler); err != nil {
				t.Fatal(err)
			}
			rt, err := relay.Open(pipelinetest.Ctx(t), cfg, pipelinetest.Logger())
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer rt.Close()
			run := pipelinetest.Start(t, func(ctx context.Context) error { return rt.Run(ctx, relay.All) })

			pushURL := ingress.URL(base, ingress.SecretFromToken(w.Agent.Token))
			pipelinetest.Eventually(t, 15*time.Second, "workspace registered in push mode with the ingress URL", func() bool {
				st := w.Plat.Status(w.Agent.ID)
				return st.URL == pushURL && st.DeliveryMode == "push"
			})
			pipelinetest.Eventually(t, 15*time.Second, "a heartbeat", func() bool { return w.Plat.Status(w.Agent.ID).Heartbeats > 0 })
			states := w.Requests(http.MethodGet, "/state", 0)

			const n = 3
			for i := range n {
				code, body, err := w.Plat.SendCanvas(pipelinetest.Ctx(t), w.Agent.ID, fmt.Sprintf("pushed %d", i))
				if err != nil || code != http.StatusOK || !strings.Contains(string(body), `"submitted"`) {
					t.Fatalf("send %d: %d %s %v", i, code, body, err)
				}
			}
			pipelinetest.Eventually(t, 20*time.Second, "every reply", func() bool { return len(w.Plat.Notifications(w.Agent.ID)) >= n })
			pipelinetest.Eventually(t, 10*time.Second, "queues drained", func() bool { in, rep := w.Queued(); return in == 0 && rep == 0 })
			got := map[string]int{}
			for _, m := range w.Plat.Notifications(w.Agent.ID) {
				got[m.Message]++
			}
			for i := range n {
				if want := fmt.Sprintf("echo: pushed %d", i); got[want] != 1 {
					t.Errorf("%q notified %d times, want 1 (all: %v)", want, got[want], got)
				}
			}
			if len(got) != n {
				t.Errorf("notifications %v, want %d distinct", got, n)
			}
			if dl := w.DeadLetters(); len(dl) != 0 {
				t.Errorf("%d dead letters", len(dl))
			}

			// The lifecycle goes on: state is still checked; the feed is
			// never fetched (the generation probe at most).
			pipelinetest.Eventually(t, 10*time.Second, "further state checks", func() bool { return w.Requests(http.MethodGet, "/state", 0) > states })
			if got := w.Requests(http.MethodGet, "/activity", 0); got > 1 {
				t.Errorf("%d activity requests, want at most the generation probe", got)
			}
			if got := w.Plat.Status(w.Agent.ID).Registrations; got != 1 {
				t.Errorf("%d registrations, want 1", got)
			}

			// Only the exact secret path is served.
			local := "http://127.0.0.1:" + strconv.Itoa(port)
			for _, path := range []string{ingress.PathPrefix + ingress.SecretFromToken("another token"), "/", ingress.PathPrefix, ingress.PathPrefix + ingress.SecretFromToken(w.Agent.Token) + "/x"} {
				resp, err := http.Post(local+path, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","parts":[{"kind":"text","text":"x"}]}}}`))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					t.Errorf("POST to a wrong path: %d, want 404", resp.StatusCode)
				}
			}

			if err := run.Stop(); err != nil {
				t.Errorf("Run after cancel: %v, want nil", err)
			}
			if _, err := http.Post(local+"/", "application/json", nil); err == nil {
				t.Error("the push ingress still listens after Run returned")
			}
		})
	}
}

// Without push configuration an OLD platform still stops the relay with
// the clear poll-mode refusal that points at push ingress.
func TestE2EOldPlatformWithoutPushConfigFails(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Platform: []moleculetest.Option{moleculetest.WithGeneration(moleculetest.Gen2026_04)}})
	cfg, err := config.Load(nil, []string{
		"MOLECULE_PLATFORM_URL=" + w.Plat.URL(), "MOLECULE_WORKSPACE_ID=" + w.Agent.ID,
		"MOLECULE_WORKSPACE_TOKEN=" + w.Agent.Token, "NATS_URL=" + w.NATSURL(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(config.NeedPlatform | config.NeedHandler); err != nil {
		t.Fatal(err)
	}
	rt, err := relay.Open(pipelinetest.Ctx(t), cfg, pipelinetest.Logger())
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = rt.Run(ctx, relay.All)
	if !errors.Is(err, molecule.ErrOldPlatform) || !strings.Contains(err.Error(), "push ingress") || ctx.Err() != nil {
		t.Fatalf("Run: %v (ctx %v), want ErrOldPlatform pointing at push ingress", err, ctx.Err())
	}
}
