package relay_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
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

// Two relays with identical handlers on one workspace (separate stores)
// answer every message twice with identical texts; each notices within
// seconds of the first duplicate, although the texts match its own: the
// feed holds the text twice, and it posted it once. Before, 5 of 5
// duplicated messages brought 0 warnings (the ledger keyed on the text).
// A third relay with MOLECULE_SINGLETON=refuse then stops instead. (It
// may see the others' reply before it posts its own and stop without
// answering, which is why it is not one of the two twins: the twins must
// both answer for each to see the other's reply.)
func TestTwinRelaysWithIdenticalHandlersEachWarn(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	const warning = "was not posted by this relay"
	type twin struct {
		logs pipelinetest.LogBuffer
		rt   *relay.Runtime
		run  *pipelinetest.Running
	}
	start := func(natsURL string, extra ...string) *twin {
		tw := &twin{}
		tw.rt = openRelay(t, slog.New(slog.NewTextHandler(&tw.logs, nil)), append([]string{
			"MOLECULE_PLATFORM_URL=" + w.Plat.URL(), "MOLECULE_WORKSPACE_ID=" + w.Agent.ID, "MOLECULE_WORKSPACE_TOKEN=" + w.Agent.Token,
			"MOLECULE_HANDLER=echo", "NATS_URL=" + natsURL}, extra...)...)
		tw.run = pipelinetest.Start(t, func(ctx context.Context) error { return tw.rt.Run(ctx, relay.All) })
		return tw
	}
	seeded := func(tw *twin) bool {
		_, err := tw.rt.Topo.Cursors.Get(pipelinetest.Ctx(t), w.Agent.ID)
		return err == nil
	}
	a := start(w.NATSURL())
	w.WaitSeeded(w.Agent.ID)
	b := start(natstest.Start(t).ClientURL())
	// Both relays hold a cursor before the message, so both answer it.
	pipelinetest.Eventually(t, 15*time.Second, "both relays seeded", func() bool { return seeded(a) && seeded(b) })

	w.SendCanvas("answered twice")
	pipelinetest.Eventually(t, 10*time.Second, "two identical replies", func() bool { return len(w.Plat.Notifications(w.Agent.ID)) == 2 })
	second := w.Plat.Notifications(w.Agent.ID)[1].At
	for name, tw := range map[string]*twin{"a": a, "b": b} {
		pipelinetest.Eventually(t, 10*time.Second, name+" relay's warning", func() bool { return strings.Contains(tw.logs.String(), warning) })
		t.Logf("relay %s warned %s after the duplicate reply", name, time.Since(second).Round(time.Millisecond))
	}

	c := start(natstest.Start(t).ClientURL(), "MOLECULE_SINGLETON=refuse")
	pipelinetest.Eventually(t, 15*time.Second, "the refusing relay seeded", func() bool { return seeded(c) })
	w.SendCanvas("answered by three")
	select {
	case <-c.run.Done():
		if err := c.run.Err(); err == nil || !strings.Contains(err.Error(), "MOLECULE_SINGLETON=refuse") {
			t.Fatalf("the refusing relay ended with %v, want ErrSecondRelay", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("MOLECULE_SINGLETON=refuse: the relay did not stop")
	}
	for _, tw := range []*twin{a, b} {
		if err := tw.run.Stop(); err != nil {
			t.Fatal(err)
		}
	}
}
