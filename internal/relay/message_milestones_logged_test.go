package relay_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// At the default level a message leaves one info line per milestone: the
// dispatcher received it, handled it (in how many ms), the replier posted
// its reply (on its route: notify or a2a). Ids and sizes only: neither the
// message's text nor the reply's, nor the token. MOLECULE_LOG_MESSAGES=false
// turns them off. Before, nothing was logged per message at info.
func TestMessageMilestonesLoggedAtInfo(t *testing.T) {
	t.Parallel()
	const text, answer = "the secret plan is blue", "echo: the secret plan is blue"
	for _, on := range []bool{true, false} {
		w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
		var logs pipelinetest.LogBuffer
		environ := []string{"MOLECULE_PLATFORM_URL=" + w.Plat.URL(), "MOLECULE_WORKSPACE_ID=" + w.Agent.ID, "MOLECULE_WORKSPACE_TOKEN=" + w.Agent.Token,
			"MOLECULE_HANDLER=echo", "NATS_URL=" + w.NATSURL()}
		if !on {
			environ = append(environ, "MOLECULE_LOG_MESSAGES=false")
		}
		rt := openRelay(t, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})), environ...)
		if rep, err := rt.Once(pipelinetest.Ctx(t), relay.All, 200*time.Millisecond); err != nil || !rep.OK() {
			t.Fatalf("first Once (registers, seeds the cursor): %v %+v", err, rep)
		}
		w.SendCanvas(text)
		w.SendPeer(0, text)
		if rep, err := rt.Once(pipelinetest.Ctx(t), relay.All, 200*time.Millisecond); err != nil || !rep.OK() || rep.Replied != 2 {
			t.Fatalf("Once: %v %+v", err, rep)
		}
		l := logs.String()
		for _, want := range []string{`msg="dispatcher: message received"`, "from=canvas_user", "from=peer_agent", "text_bytes=23",
			`msg="dispatcher: message handled"`, "outcome=replied", "handler_ms=", "took_ms=", "reply_bytes=29",
			`msg="replier: reply posted"`, "route=notify", "route=a2a", "post_ms="} {
			if strings.Contains(l, want) != on {
				t.Errorf("MOLECULE_LOG_MESSAGES=%v: %q logged: %v, want %v", on, want, !on, on)
			}
		}
		for _, secret := range []string{text, answer, w.Agent.Token} {
			if strings.Contains(l, secret) {
				t.Errorf("a message's text or the token logged at info:\n%s", l)
			}
		}
	}
}
