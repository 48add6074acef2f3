package memory_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A read of a conversation the Store holds, once its entry is stale,
// drops what the stream dropped from the front meanwhile (MaxAge expiry,
// a purge by other means than `history forget`), as a full read would,
// and still sees what was written since and what `history forget` did.
func TestStaleReadDropsWhatTheStreamNoLongerHolds(t *testing.T) {
	t.Parallel()
	w, rp, reader, writer := staleReadWorld(t)
	ctx := pipelinetest.Ctx(t)
	subject := events.MemorySubject(ws, "canvas")
	stream, err := w.Obs.JS.Stream(ctx, events.StreamMemory)
	if err != nil {
		t.Fatal(err)
	}
	load, record := canvasOf(t, ctx, reader, writer)
	record("a1", "one")
	record("a2", "two")
	record("a3", "three")
	load("user:one", "user:two", "user:three")

	oldest, err := stream.GetMsg(ctx, 0, jetstream.WithGetMsgSubject(subject))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctx, oldest.Sequence); err != nil { // as MaxAge expiry would
		t.Fatal(err)
	}
	load("user:two", "user:three")
	record("a4", "four")
	load("user:two", "user:three", "user:four")

	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
		t.Fatal(err)
	}
	load()
	record("a5", "five")
	load("user:five")

	// After `history forget` the oldest message is its marker, which the
	// entry holds: a stale read with nothing new is two answers (none
	// after the last, the oldest), not a read in full.
	if _, err := memory.Forget(ctx, w.Obs.JS, w.Obs.Topo, ws, "canvas"); err != nil {
		t.Fatal(err)
	}
	load()
	record("a6", "six")
	load("user:six")
	if n := answers(rp, func() { load("user:six") }); n != 2 {
		t.Fatalf("a stale read after a forget, nothing new: %d answers, want 2", n)
	}
}

// A stale read asks only for what is new and for the oldest message: with
// one message written since, three answers reach the reader (that message,
// the end of its batch, the oldest), not the conversation read again.
func TestStaleReadAsksOnlyForNewAndOldestMessage(t *testing.T) {
	t.Parallel()
	_, rp, reader, writer := staleReadWorld(t)
	load, record := canvasOf(t, pipelinetest.Ctx(t), reader, writer)
	var want []string
	for i := range 10 {
		record(fmt.Sprint("a", i), fmt.Sprint(i))
		want = append(want, fmt.Sprint("user:", i))
	}
	load(want...)
	record("new", "new")
	want = append(want, "user:new")
	if n := answers(rp, func() { load(want...) }); n != 3 {
		t.Fatalf("a stale read received %d messages, want 3 (a full read: 12)", n)
	}
}

// staleReadWorld is a world with a reader Store whose every read after
// the first is stale, and a writer Store of another process.
func staleReadWorld(t *testing.T) (w *pipelinetest.World, rp *pipelinetest.Proc, reader, writer *memory.Store) {
	w = pipelinetest.New(t, pipelinetest.Options{})
	rp = w.Proc()
	reader, writer = memoryOn(t, rp, memory.Config{Turns: 20}), memoryOn(t, w.Proc(), memory.Config{Turns: 20})
	memory.SetReadCacheFor(reader, 0)
	return w, rp, reader, writer
}

// Past its bound on conversations the cache forgets those read longest
// ago, not all of them: the conversations read last are still read from
// their last message on (one answer: nothing new), the first one in full
// again.
func TestReadCacheForgetsTheConversationsReadLongestAgo(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	ctx := pipelinetest.Ctx(t)
	rp := w.Proc()
	reader := memoryOn(t, rp, memory.Config{Turns: 20})
	n := memory.MaxCachedConversations + 1
	conv := func(i int) string { return fmt.Sprint("c", i) }
	pub := w.Obs.JS
	for i := range n {
		if _, err := pub.PublishAsync(events.MemorySubject(ws, conv(i)), []byte(`[{"role":"user","text":"x"}]`)); err != nil {
			t.Fatal(err)
		}
		if i%1000 == 999 || i == n-1 { // within nats.go's bound on unacknowledged async publishes (4,000)
			select {
			case <-pub.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
	}
	for i := range n {
		if _, err := reader.Load(ctx, ws, conv(i)); err != nil {
			t.Fatal(err)
		}
	}
	loadOne := func(c string) func() {
		return func() {
			if got, err := reader.Load(ctx, ws, c); err != nil || len(got) != 1 {
				t.Fatalf("Load %s: %d turns, %v", c, len(got), err)
			}
		}
	}
	for _, i := range []int{n - 2, n - 1} {
		if got := answers(rp, loadOne(conv(i))); got != 1 {
			t.Errorf("conversation %d of %d, read last: %d answers, want 1 (still held)", i+1, n, got)
		}
	}
	if got := answers(rp, loadOne(conv(0))); got != 2 {
		t.Errorf("the conversation read first: %d answers, want 2 (read in full again)", got)
	}
}
