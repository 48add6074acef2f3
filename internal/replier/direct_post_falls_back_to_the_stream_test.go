package replier_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// postDirect is a dispatcher's direct post of r through rp, bounded so a
// post that waited (for the budget, for a flight) fails the test instead
// of hanging it. A canvas reply carries the posting mark of its handled
// record, as the dispatcher's does; the direct post must leave the reply
// to the stream (publish) whenever it does not ack it.
func postDirect(t *testing.T, rp *replier.Replier, r events.Reply) stage.Outcome {
	t.Helper()
	data, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var mark events.PostingMark
	if r.Source != events.SourcePeerAgent {
		now := time.Now().UTC()
		mark = events.PostingMark{At: now, Deadline: rp.DirectPostDeadline(now)}
	}
	type result struct {
		o       stage.Outcome
		publish bool
	}
	got := make(chan result, 1)
	go func() {
		o, publish := rp.PostDirect(context.Background(), data, mark, func() {})
		got <- result{o, publish}
	}()
	select {
	case res := <-got:
		if res.publish == (res.o.Acked() || res.o.Abandoned()) {
			t.Errorf("outcome %v with publish %v: a reply not acked must be published, an acked one not", res.o, res.publish)
		}
		return res.o
	case <-time.After(10 * time.Second):
		t.Fatal("PostDirect held the caller for 10 s: a direct post must not wait")
		return stage.Outcome{}
	}
}

// A direct post the platform accepts is recorded sent and counted as a
// notify and as direct: the caller acks without publishing.
func TestDirectPostPostsAndRecordsSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rp := e.replier(t, e.js, e.topo, replier.Config{})
	if o := postDirect(t, rp, e.canvasReply("act-1", "hello")); !o.Acked() {
		t.Fatalf("outcome %v, want ack", o)
	}
	if o := postDirect(t, rp, e.peerReply("act-2", "hello peer")); !o.Acked() {
		t.Fatalf("peer reply: outcome %v, want ack", o)
	}
	if got := len(e.plat.Notifications(e.a.ID)); got != 1 {
		t.Errorf("notified %d times, want 1", got)
	}
	if got := len(e.plat.A2ACalls(e.b.ID)); got != 1 {
		t.Errorf("a2a posts to B: %d, want 1", got)
	}
	for _, act := range []string{"act-1", "act-2"} {
		if rec, ok := e.record(t, act); !ok || rec.State != events.StateSent {
			t.Errorf("%s: record %+v, %v; want sent", act, rec, ok)
		}
	}
	if st := rp.Stats(); st.Direct != 2 || st.DirectFallbacks != 0 || st.Notified != 1 || st.SentA2A != 1 || st.Posts != 2 {
		t.Errorf("stats %+v, want 2 direct (1 notify, 1 a2a), 2 posts, no fallback", st)
	}
	if n := e.replyLeft(t); n != 0 {
		t.Errorf("reply stream holds %d messages, want none", n)
	}
}

// Every outcome a direct post does not finish leaves the reply to the
// stream: the dispatcher publishes it, and the stage's delivery follows
// whatever record the direct post left, as it follows a redelivery's.
// The end is the same as without the direct post: posted once.
func TestDirectPostFallsBackToTheStream(t *testing.T) {
	t.Parallel()
	notify := func(e *env) string { return "/workspaces/" + e.a.ID + "/notify" }
	for _, tc := range []struct {
		name  string
		fault func(e *env) moleculetest.Fault
		// record is the reply record the direct post must leave: "" none
		// (the platform refused it, so the stream posts at once).
		record string
		// reconciled: the stream found the direct post's notify on the
		// feed instead of posting it again.
		reconciled bool
	}{
		{"rate limited (429): the posting record is forgotten", func(e *env) moleculetest.Fault {
			return moleculetest.Fault{Method: http.MethodPost, PathPrefix: notify(e), Status: http.StatusTooManyRequests, Count: 1,
				Header: http.Header{"Retry-After": {"0"}}}
		}, "", false},
		{"refused for now (410): the posting record is forgotten, the stream's deliveries retry it", func(e *env) moleculetest.Fault {
			return moleculetest.Fault{Method: http.MethodPost, PathPrefix: notify(e), Status: http.StatusGone, Count: 1}
		}, "", false},
		{"gateway error, not processed: the stream waits out the flight, finds nothing, posts", func(e *env) moleculetest.Fault {
			return moleculetest.Fault{Method: http.MethodPost, PathPrefix: notify(e), Status: http.StatusBadGateway, Count: 1}
		}, events.StatePosting, false},
		{"error after the platform wrote the row: the stream finds it on the feed", func(e *env) moleculetest.Fault {
			return moleculetest.Fault{Method: http.MethodPost, PathPrefix: notify(e), Status: http.StatusInternalServerError, Count: 1, AfterHandler: true}
		}, events.StatePosting, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.pollMode(t)
			e.plat.InjectFault(tc.fault(e))
			rp := e.replier(t, e.js, e.topo, replier.Config{})
			reply := e.canvasReply("act-1", "answer once")
			o := postDirect(t, rp, reply)
			if o.Acked() || o.Abandoned() {
				t.Fatalf("outcome %v, want one that leaves the reply to the stream", o)
			}
			rec, ok := e.record(t, "act-1")
			if got := map[bool]string{true: rec.State}[ok]; got != tc.record {
				t.Fatalf("record after the direct post: %q (%+v), want %q", got, rec, tc.record)
			}
			if st := rp.Stats(); st.Direct != 0 || st.DirectFallbacks != 1 {
				t.Errorf("stats %+v, want one fallback and no direct", st)
			}
			e.publish(t, reply) // as the dispatcher does
			st := e.runUntilAcked(t, replier.Config{}, 15*time.Second)
			if got := len(e.plat.Notifications(e.a.ID)); got != 1 {
				t.Fatalf("notified %d times, want exactly 1", got)
			}
			if rec, ok := e.record(t, "act-1"); !ok || rec.State != events.StateSent {
				t.Errorf("record %+v, %v; want sent", rec, ok)
			}
			if (st.Reconciled == 1) != tc.reconciled {
				t.Errorf("stream stats %+v, want reconciled %v", st, tc.reconciled)
			}
		})
	}
}

// A direct post never waits for the rate budget: at the reserve it hands
// the reply to the stream at once, having posted nothing and written no
// record, and the stage's delivery waits for the window instead.
func TestDirectPostDoesNotWaitForTheRateBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, moleculetest.WithRateLimit(5, time.Minute))
	rp := e.replier(t, e.js, e.topo, replier.Config{})
	// Two posts bring the window's remaining requests to the reserve (3).
	for _, act := range []string{"act-1", "act-2"} {
		if o := postDirect(t, rp, e.canvasReply(act, "within budget")); !o.Acked() {
			t.Fatalf("%s: outcome %v, want ack", act, o)
		}
	}
	if o := postDirect(t, rp, e.canvasReply("act-3", "at the reserve")); o.String() != "defer" {
		t.Fatalf("outcome %v, want defer: the stream waits for the window, not the dispatcher", o)
	}
	if _, ok := e.record(t, "act-3"); ok {
		t.Error("a posting record was written for a reply that was not posted")
	}
	if got := len(e.plat.Notifications(e.a.ID)); got != 2 {
		t.Errorf("notified %d times, want 2", got)
	}
}

// A direct post without a posting mark writes its posting record first,
// so a reply whose record exists is never posted by it: it hands the
// reply to the stream, whose delivery follows the record. (The dispatcher
// marks every reply it posts directly; an unmarked direct post is the
// replier's API without one.)
func TestDirectPostLeavesARecordedReplyToTheStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	now := time.Now().UTC()
	e.putRecord(t, "act-1", events.ReplyRecord{State: events.StatePosting, Route: events.RouteNotify, PostingAt: now, Deadline: now.Add(time.Minute), Attempts: 1})
	rp := e.replier(t, e.js, e.topo, replier.Config{})
	if o, publish := postDirectMarked(t, rp, e.canvasReply("act-1", "maybe delivered"), events.PostingMark{}); o.Acked() || o.Abandoned() || !publish {
		t.Fatalf("outcome %v, publish %v; want one that leaves the reply to the stream", o, publish)
	}
	if got := len(e.plat.Notifications(e.a.ID)); got != 0 {
		t.Errorf("notified %d times, want 0", got)
	}
}

// A marked direct post reads no record before its POST: the only record
// that can be there is the posting record a redelivery of the inbound
// message wrote from the same mark (the dispatcher's duplicate). The
// POST ends by the mark's deadline, which that record's delivery waits
// out before it looks at the feed, so the post happens once: the direct
// post records it sent over the posting record, and the stream's delivery
// of the republished reply finds it sent.
func TestMarkedDirectPostOverTheRecordOfItsMark(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rp := e.replier(t, e.js, e.topo, replier.Config{})
	now := time.Now().UTC()
	mark := events.PostingMark{At: now, Deadline: rp.DirectPostDeadline(now)}
	e.putRecord(t, "act-1", mark.Record())
	reply := e.canvasReply("act-1", "answer once")
	if o, publish := postDirectMarked(t, rp, reply, mark); !o.Acked() || publish {
		t.Fatalf("outcome %v, publish %v; want ack", o, publish)
	}
	if rec, ok := e.record(t, "act-1"); !ok || rec.State != events.StateSent {
		t.Fatalf("record %+v, %v; want sent", rec, ok)
	}
	e.publish(t, reply) // as the redelivery's duplicate did
	if st := e.runUntilAcked(t, replier.Config{}, 15*time.Second); st.Duplicates != 1 {
		t.Errorf("stream stats %+v, want the reply acked as sent", st)
	}
	if got := len(e.plat.Notifications(e.a.ID)); got != 1 {
		t.Errorf("notified %d times, want exactly 1", got)
	}
}

// A marked direct post writes one record: the sent record, created; its
// posting record is the handled record's mark.
func TestMarkedDirectPostWritesOnlyTheSentRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rp := e.replier(t, e.js, e.topo, replier.Config{})
	watch, err := e.topo.Replies.WatchAll(fixture(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Stop() }()
	if u := <-watch.Updates(); u != nil {
		t.Fatalf("replies bucket not empty: %s", u.Key())
	}
	if o := postDirect(t, rp, e.canvasReply("act-1", "hello")); !o.Acked() {
		t.Fatalf("outcome %v, want ack", o)
	}
	select {
	case u := <-watch.Updates():
		var rec events.ReplyRecord
		if err := json.Unmarshal(u.Value(), &rec); err != nil || u.Revision() != 1 || rec.State != events.StateSent || rec.Attempts != 1 {
			t.Fatalf("first write %s rev %d: %+v (%v); want the sent record, created", u.Key(), u.Revision(), rec, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no record written")
	}
	select {
	case u := <-watch.Updates():
		t.Errorf("a second write: %s rev %d %s", u.Key(), u.Revision(), u.Value())
	case <-time.After(200 * time.Millisecond):
	}
}

// A marked direct post whose record cannot be written after a POST that
// may have reached the platform (the sent record after an accepted post;
// the posting record after an unknown outcome) is not handed to the
// stream: published, the reply would meet no record and be posted blind.
// PostDirect says not to publish, and the dispatcher retries its inbound
// message, whose redelivery writes the posting record from the mark.
func TestMarkedDirectPostNotRecordedIsNotPublished(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault func(e *env) *moleculetest.Fault
		// notified: notifies the platform processed.
		notified int
	}{
		{"accepted, sent record not written", func(*env) *moleculetest.Fault { return nil }, 1},
		{"unknown outcome (502), posting record not written", func(e *env) *moleculetest.Fault {
			return &moleculetest.Fault{Method: http.MethodPost, PathPrefix: "/workspaces/" + e.a.ID + "/notify", Status: http.StatusBadGateway, Count: 1}
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			if f := tc.fault(e); f != nil {
				e.plat.InjectFault(*f)
			}
			cfg := replier.Config{}
			cfg.StoreTimeout = time.Second
			rp := e.replier(t, e.js, e.topo, cfg)
			if err := e.js.DeleteKeyValue(fixture(t), events.BucketReplies); err != nil {
				t.Fatal(err)
			}
			now := time.Now().UTC()
			mark := events.PostingMark{At: now, Deadline: rp.DirectPostDeadline(now)}
			o, publish := postDirectMarked(t, rp, e.canvasReply("act-1", "maybe delivered"), mark)
			if o.Acked() || o.Abandoned() || publish {
				t.Fatalf("outcome %v, publish %v; want a retry of the inbound message, not a publish", o, publish)
			}
			if got := len(e.plat.Notifications(e.a.ID)); got != tc.notified {
				t.Errorf("notified %d times, want %d", got, tc.notified)
			}
		})
	}
}

// A marked direct post whose mark has less than half the notify timeout
// left (the handled record's create was slow) does not post: a POST cut
// by the mark's deadline would leave its outcome unknown. Nothing is
// posted or written, and the stream posts the reply.
func TestMarkedDirectPostWithoutTimeLeftIsLeftToTheStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rp := e.replier(t, e.js, e.topo, replier.Config{NotifyTimeout: 10 * time.Second})
	at := time.Now().UTC().Add(-6 * time.Second)
	mark := events.PostingMark{At: at, Deadline: rp.DirectPostDeadline(at)}
	if o, publish := postDirectMarked(t, rp, e.canvasReply("act-1", "late"), mark); o.String() != "defer" || !publish {
		t.Fatalf("outcome %v, publish %v; want defer, published", o, publish)
	}
	if got := len(e.plat.Notifications(e.a.ID)); got != 0 {
		t.Errorf("notified %d times, want 0", got)
	}
	if _, ok := e.record(t, "act-1"); ok {
		t.Error("a reply record was written for a reply that was not posted")
	}
}

// postDirectMarked posts reply directly through rp with the posting mark
// the test chose, and returns what PostDirect returns.
func postDirectMarked(t *testing.T, rp *replier.Replier, reply events.Reply, mark events.PostingMark) (stage.Outcome, bool) {
	t.Helper()
	data, err := reply.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return rp.PostDirect(context.Background(), data, mark, func() {})
}
