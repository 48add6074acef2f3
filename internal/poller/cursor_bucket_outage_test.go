package poller_test

import (
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// New rows are published while the cursor bucket answers nothing, from
// the cursor the poller holds in memory: on a cluster the bucket is a Raft
// group of its own, and while it elects a leader (4 to 9 s after a node
// died) the poller waited with every new row. Here the bucket's stream is
// gone, so every cursor read and write fails; each row is still published
// once (before: none, each cycle waited out the bucket).
func TestNewRowsPublishedWhileTheCursorBucketDoesNotAnswer(t *testing.T) {
	e := newEnv(t)
	p := e.poller(poller.Config{PollInterval: 100 * time.Millisecond})
	run(t, p)
	e.waitSeeded(e.ws.ID)
	e.sendCanvas(e.ws.ID, "before")
	waitFor(t, 10*time.Second, "the first row published", func() bool { return len(e.inbound()) == 1 })

	if err := e.js.DeleteStream(ctx(t), "KV_"+events.BucketCursors); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"during 1", "during 2", "during 3"} {
		e.sendCanvas(e.ws.ID, text)
	}
	waitFor(t, 10*time.Second, "the rows sent while the cursor bucket is gone published", func() bool { return len(e.inbound()) >= 4 })
	assertExactlyOnce(t, e.inbound(), e.messageRowIDs(e.ws.ID))
}
