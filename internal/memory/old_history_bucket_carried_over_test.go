package memory_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A relay upgraded in place: an earlier version left its conversations in
// the molecule_history bucket (one JSON list per key). The first read of
// a conversation returns them and carries them over to the stream, where
// the turns recorded next follow them; history show lists and reads both
// kinds, and forget erases both.
func TestOldHistoryBucketIsReadThroughAndCarriedOver(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	ctx := pipelinetest.Ctx(t)
	// The bucket as the earlier version's EnsureTopology created it.
	old, err := events.EnsureBucket(ctx, w.Obs.JS, jetstream.KeyValueConfig{Bucket: events.BucketHistory, TTL: 7 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	put := func(conv string, turns ...handler.Turn) {
		t.Helper()
		data, err := json.Marshal(turns)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := old.Put(ctx, events.HistoryKey(ws, conv), data); err != nil {
			t.Fatal(err)
		}
	}
	put(events.ConversationCanvas, turn("o1", handler.RoleUser, "old question"), turn("o1", handler.RoleAgent, "old answer"))
	put("peer-p1", turn("o2", handler.RoleUser, "old peer message"))

	// The upgraded process binds the bucket (EnsureTopology no longer
	// creates it).
	p := w.Proc()
	if p.Topo.History == nil {
		t.Fatal("the upgraded topology did not bind the old history bucket")
	}
	s := memoryOn(t, p, memory.Config{Turns: 20})
	got, err := s.Load(ctx, ws, events.ConversationCanvas)
	if want := []string{"user:old question", "agent:old answer"}; err != nil || !equal(texts(got), want) {
		t.Fatalf("first read %q, %v; want the bucket's %q", texts(got), err, want)
	}
	if _, err := s.Record(ctx, ws, events.ConversationCanvas, turn("n1", handler.RoleUser, "new question"), turn("n1", handler.RoleAgent, "new answer")); err != nil {
		t.Fatal(err)
	}
	want := []string{"user:old question", "agent:old answer", "user:new question", "agent:new answer"}
	if got, err := s.Load(ctx, ws, events.ConversationCanvas); err != nil || !equal(texts(got), want) {
		t.Errorf("after a new turn %q, %v; want %q", texts(got), err, want)
	}
	// Carried over: the stream holds it even once the bucket is gone.
	if n := w.StreamMsgs(p.Topo.Memory); n != 2 {
		t.Errorf("the memory stream holds %d messages, want the carried-over list and the new pair", n)
	}

	convs, err := memory.Conversations(ctx, p.JS, p.Topo, ws)
	if want := []string{events.ConversationCanvas, "peer-p1"}; err != nil || !equal(convs, want) {
		t.Errorf("conversations %q, %v; want %q", convs, err, want)
	}
	if turns, ok, err := memory.Read(ctx, p.JS, p.Topo, ws, "peer-p1"); err != nil || !ok || len(turns) != 1 {
		t.Errorf("read of a conversation only the bucket holds: %v %v %v", turns, ok, err)
	}
	done, err := memory.Forget(ctx, p.JS, p.Topo, ws, "")
	if err != nil || len(done) != 2 {
		t.Fatalf("forget all: %q, %v", done, err)
	}
	if convs, err := memory.Conversations(ctx, p.JS, p.Topo, ws); err != nil || len(convs) != 0 {
		t.Errorf("after forget: %q, %v", convs, err)
	}
	if got, err := s.Load(ctx, ws, events.ConversationCanvas); err != nil || len(got) != 0 {
		t.Errorf("after forget the canvas reads %q, %v", texts(got), err)
	}
}
