package replier_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

func (e *env) putRecord(t *testing.T, act string, rec events.ReplyRecord) {
	t.Helper()
	data, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.topo.Replies.Create(fixture(t), events.ReplyKey(e.a.ID, act), data); err != nil {
		t.Fatal(err)
	}
}

// A first delivery goes straight to the posting record's create-only
// write: no read of the replies bucket on the wire.
func TestFirstDeliveryReadsNoReplyRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nc, _, _ := e.conn(t)
	// A channel subscription is filled by the connection's read loop, so
	// after a flush it holds every read the server routed before it.
	reads := make(chan *nats.Msg, 64)
	sub, err := nc.ChanSubscribe("$JS.API.DIRECT.GET.KV_"+events.BucketReplies+".>", reads)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, act := range []string{"act-1", "act-2", "act-3"} {
		e.publish(t, e.canvasReply(act, "hello "+act))
	}
	st := e.runUntilAcked(t, replier.Config{}, 10*time.Second)
	if got := len(e.plat.Notifications(e.a.ID)); got != 3 {
		t.Fatalf("notified %d times, want 3", got)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := len(reads); n != 0 {
		t.Errorf("replies bucket read %d times, want 0: a first delivery should not read", n)
	}
	if st.Notified != 3 || st.Duplicates != 0 {
		t.Errorf("stats = %+v, want 3 notified and no duplicate", st)
	}
}

// A reply republished after a NATS restart comes back as a first delivery
// although it was sent: the create-only write finds the sent record, and
// the reply is acked, not posted again.
func TestFirstDeliveryOfASentReplyIsAckedNotPosted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := time.Now().UTC()
	e.putRecord(t, "act-1", events.ReplyRecord{State: events.StateSent, Route: events.RouteNotify, PostingAt: now, SentAt: now, Attempts: 1})
	e.publish(t, e.canvasReply("act-1", "already delivered"))
	st := e.runUntilAcked(t, replier.Config{}, 10*time.Second)
	if got := len(e.plat.Notifications(e.a.ID)); got != 0 {
		t.Fatalf("notified %d times, want 0: the record says sent", got)
	}
	if st.Duplicates != 1 || st.Posts != 0 {
		t.Errorf("stats = %+v, want one duplicate and no post", st)
	}
}

// A first delivery that finds a posting record (a replier died mid-post,
// then NATS restarted) is handed back, and its redelivery follows the
// record: the feed is searched, nothing is there, the reply is posted
// once.
func TestFirstDeliveryOfAPostingReplyFollowsTheRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	past := time.Now().UTC().Add(-time.Minute)
	e.putRecord(t, "act-1", events.ReplyRecord{State: events.StatePosting, Route: events.RouteNotify,
		PostingAt: past, Deadline: past.Add(time.Second), Attempts: 1})
	e.publish(t, e.canvasReply("act-1", "maybe delivered"))
	st := e.runUntilAcked(t, replier.Config{}, 10*time.Second)
	if got := len(e.plat.Notifications(e.a.ID)); got != 1 {
		t.Fatalf("notified %d times, want exactly 1", got)
	}
	if rec, ok := e.record(t, "act-1"); !ok || rec.State != events.StateSent || rec.Attempts != 2 {
		t.Errorf("record = %+v, %v; want sent after a second attempt", rec, ok)
	}
	if st.Reposted != 1 {
		t.Errorf("stats = %+v, want one re-post after the feed showed nothing", st)
	}
}
