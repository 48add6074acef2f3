package replier_test

import (
	"context"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage/crashpoint"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A replier killed after the platform wrote its notify leaves a posting
// record whose post may still be in flight for the notify timeout (30 s
// here, the default). The redelivery finds the notify on the feed and
// settles at once, instead of waiting out that timeout before looking
// (make chaos-cluster: a canvas reply whose replier was SIGKILLed mid-post
// waited the whole 30 s).
func TestKilledAfterPostSettlesWithoutWaitingOutTheNotifyTimeout(t *testing.T) {
	t.Parallel()
	const notifyTimeout = 30 * time.Second
	e := newEnv(t)
	e.publish(t, e.canvasReply("act-1", "exactly once please"))
	e.crashedStageWith(t, replier.Config{NotifyTimeout: notifyTimeout}, func(kill func() error) *crashpoint.Replier {
		return &crashpoint.Replier{AfterPost: func(context.Context, *events.Reply) error { return kill() }}
	})

	_, js, topo := e.conn(t)
	r := e.replier(t, js, topo, replier.Config{NotifyTimeout: notifyTimeout})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	waitFor(t, notifyTimeout/2, "the redelivered reply to be settled and acked", func() bool { return e.replyLeft(t) == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(e.plat.Notifications(e.a.ID)); n != 1 {
		t.Fatalf("delivered %d times, want exactly 1", n)
	}
	if st := r.Stats(); st.Reconciled != 1 || st.Posts != 0 {
		t.Errorf("stats = %+v, want the earlier notify found on the feed and no post", st)
	}
}
