package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// freshOnce is one connect --once on a runner with an empty store (a new
// NATS server), against plat; stop, when set, cancels the run the moment
// it returns true (a crash: nothing after it runs).
func freshOnce(t *testing.T, plat *moleculetest.Server, ws moleculetest.Workspace, stop func() bool) *relay.OnceReport {
	t.Helper()
	cfg, err := config.Load(nil, []string{"MOLECULE_PLATFORM_URL=" + plat.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID,
		"MOLECULE_WORKSPACE_TOKEN=" + ws.Token, "MOLECULE_HANDLER=echo", "NATS_URL=" + natstest.Start(t).ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(pipelinetest.Ctx(t))
	defer cancel()
	rt, err := relay.Open(ctx, cfg, pipelinetest.Logger())
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if stop != nil {
		go func() {
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for ctx.Err() == nil && !stop() {
				<-tick.C
			}
			cancel()
		}()
	}
	rep, err := rt.Once(ctx, relay.All, 200*time.Millisecond)
	if err != nil && stop == nil {
		t.Fatal(err)
	}
	return rep
}

// A checkpointed one-shot run answers and checkpoints in batches of
// CheckpointBatch rows, so a run that crashes part-way repeats, on the
// next fresh runner, at most one batch of replies; every message is
// answered.
func TestCrashedOneShotRepeatsAtMostOneBatch(t *testing.T) {
	t.Parallel()
	plat := moleculetest.NewServer()
	t.Cleanup(plat.Close)
	ws := plat.CreateWorkspace("ci-agent")
	if rep := freshOnce(t, plat, ws, nil); !rep.OK() {
		t.Fatalf("first run: %+v", rep)
	}
	const n = 3*relay.CheckpointBatch + 5
	for i := range n {
		if code, _, err := plat.SendCanvas(context.Background(), ws.ID, fmt.Sprintf("m%02d", i)); err != nil || code != 200 {
			t.Fatalf("send: %d %v", code, err)
		}
	}
	crashAt := relay.CheckpointBatch + relay.CheckpointBatch/2
	freshOnce(t, plat, ws, func() bool { return len(plat.Notifications(ws.ID)) >= crashAt })
	if rep := freshOnce(t, plat, ws, nil); !rep.OK() {
		t.Fatalf("run after the crash: %+v", rep)
	}
	got := map[string]int{}
	for _, m := range plat.Notifications(ws.ID) {
		got[m.Message]++
	}
	repeated := 0
	for i := range n {
		c := got[fmt.Sprintf("echo: m%02d", i)]
		if c == 0 {
			t.Fatalf("m%02d never answered", i)
		}
		repeated += c - 1
	}
	if repeated > relay.CheckpointBatch {
		t.Fatalf("%d replies repeated after the crash, want at most %d", repeated, relay.CheckpointBatch)
	}
	t.Logf("%d replies repeated after a crash at %d replies", repeated, crashAt)
}
