package relay_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/relay"
)

// A second relay answering the same workspace is noticed: a reply on the
// feed that this relay did not post makes it warn, once, naming the
// likely cause; its own replies never do. Its heartbeats carry its
// instance id. Before, two relays with separate stores answered 191 of 200
// messages twice without a word.
func TestSecondInstanceNoticed(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	var logs pipelinetest.LogBuffer
	rt := openRelay(t, slog.New(slog.NewTextHandler(&logs, nil)),
		"MOLECULE_PLATFORM_URL="+w.Plat.URL(), "MOLECULE_WORKSPACE_ID="+w.Agent.ID, "MOLECULE_WORKSPACE_TOKEN="+w.Agent.Token,
		"MOLECULE_HANDLER=echo", "MOLECULE_POLL_INTERVAL=100ms", "NATS_URL="+w.NATSURL())
	run := pipelinetest.Start(t, func(ctx context.Context) error { return rt.Run(ctx, relay.All) })
	w.WaitSeeded(w.Agent.ID)

	const warning = "was not posted by this relay"
	w.SendMixed("own", 4)
	w.WaitReplies(4, 10*time.Second)
	// Two more polls read the feed past our own replies: no warning.
	polls := func() int { return w.Requests("GET", "/workspaces/"+w.Agent.ID+"/activity", 200) }
	after := polls()
	pipelinetest.Eventually(t, 10*time.Second, "two polls past our replies", func() bool { return polls() >= after+2 })
	if strings.Contains(logs.String(), warning) {
		t.Fatalf("warned about our own replies:\n%s", logs.String())
	}
	other := w.Client(w.Agent) // another relay with the same token
	for i := range 2 {
		if _, err := other.Notify(pipelinetest.Ctx(t), "an answer from elsewhere "+string(rune('0'+i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	pipelinetest.Eventually(t, 10*time.Second, "the second-instance warning", func() bool {
		return strings.Contains(logs.String(), warning)
	})
	if err := run.Stop(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), warning); n != 1 {
		t.Fatalf("warned %d times, want once:\n%s", n, logs.String())
	}
	found := false
	for _, r := range w.Plat.Requests() {
		if r.Method == "POST" && r.Path == "/registry/heartbeat" && strings.Contains(string(r.Body), `"relay_instance":"`+rt.InstanceID()+`"`) {
			found = true
		}
	}
	if !found {
		t.Fatal("no heartbeat carried runtime_metadata.relay_instance")
	}
}
