package replier_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/stage/crashpoint"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// fillFeed writes n canvas rows to A's feed (8 senders at once). A must
// be registered in poll mode (pollMode).
func (e *env) fillFeed(n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				if code, _, err := e.plat.SendCanvas(context.Background(), e.a.ID, fmt.Sprintf("busy %d", i)); err != nil || code != http.StatusOK {
					errs <- fmt.Errorf("send %d: %d %v", i, code, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// pastWindow waits until the reconciliation window of activity's crashed
// post (its flight, widened by skew) has ended, so that rows sent from
// then on fall after it however quickly the crashed replier stopped.
func (e *env) pastWindow(t *testing.T, activity string, skew time.Duration) {
	t.Helper()
	rec, ok := e.record(t, activity)
	if !ok {
		t.Fatalf("no reply record of %s", activity)
	}
	wait := time.Until(flightEnd(rec, 0).Add(skew + 10*time.Millisecond))
	if wait > 10*time.Second {
		t.Fatalf("the post's window ends in %s", wait)
	}
	time.Sleep(wait) // the clock passing the window is the point, not an event
}

// pollMode registers A in poll mode, so canvas messages to it are queued
// as rows on its feed.
func (e *env) pollMode(t *testing.T) {
	t.Helper()
	if _, err := e.clients[e.a.ID].Register(fixture(t), molecule.RegisterRequest{}); err != nil {
		t.Fatalf("register A: %v", err)
	}
}

// feedReads counts the GET /activity requests of A that bounded their
// window with before_ts (reconciliation's reads), and how many of them
// failed.
func (e *env) feedReads() (reads, failed int) {
	for _, rq := range e.plat.Requests() {
		if rq.Method == http.MethodGet && rq.Path == "/workspaces/"+e.a.ID+"/activity" && strings.Contains(rq.Query, "before_ts=") {
			reads++
			if rq.Status != http.StatusOK {
				failed++
			}
		}
	}
	return reads, failed
}

func (e *env) runUntilAcked(t *testing.T, cfg replier.Config, within time.Duration) replier.Stats {
	t.Helper()
	_, js, topo := e.conn(t)
	r := e.replier(t, js, topo, cfg)
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	waitFor(t, within, "the reply to be acked", func() bool { return e.replyLeft(t) == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return r.Stats()
}

// A replier dies after the platform accepted a notify and before the
// "sent" record; 6,000 canvas rows then arrive before the reply is
// redelivered, and a third of the feed reads fail. Reconciliation reads
// only the post's window, so it settles ("delivered") in a few pages
// whatever came after, and retries the failing pages within the check.
// The previous search (since_secs from now, at most 10 pages of 500)
// could never settle here.
func TestReconcileBusyFeedSettles(t *testing.T) {
	t.Parallel()
	e := newEnv(t, moleculetest.WithRateLimit(0, 0), moleculetest.WithRequestLogLimit(0))
	e.pollMode(t)
	e.publish(t, e.canvasReply("act-1", "answer once"))
	e.crashedStage(t, func(kill func() error) *crashpoint.Replier {
		return &crashpoint.Replier{AfterPost: func(context.Context, *events.Reply) error { return kill() }}
	})
	const skew = 50 * time.Millisecond
	e.pastWindow(t, "act-1", skew)
	if err := e.fillFeed(6000); err != nil {
		t.Fatal(err)
	}
	e.plat.InjectFault(moleculetest.Fault{Method: http.MethodGet, PathPrefix: "/workspaces/" + e.a.ID + "/activity",
		Status: 500, Body: `{"error":"internal"}`, Rate: 0.35})

	st := e.runUntilAcked(t, replier.Config{ReconcileSkew: skew}, 30*time.Second)
	if n := len(e.plat.Notifications(e.a.ID)); n != 1 {
		t.Fatalf("notifications = %d, want 1", n)
	}
	if st.Reconciled != 1 || st.Posts != 0 || st.DeadLettered != 0 {
		t.Fatalf("stats = %+v, want the notify found on the feed, no post, no dead letter", st)
	}
	reads, failed := e.feedReads()
	if ok := reads - failed; ok != 1 {
		t.Fatalf("successful window reads = %d (of %d), want 1: the window holds one page whatever came after", ok, reads)
	}
	t.Logf("window reads: %d, of which %d failed and were retried within the check", reads, failed)
}

// The window is paged until exhausted: thousands of canvas rows inside the
// post's window (a post that stayed in flight while they arrived) are read
// page by page, and a notify that is not there is posted again, once.
func TestReconcilePagesWholeWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, moleculetest.WithRateLimit(0, 0), moleculetest.WithRequestLogLimit(0))
	e.pollMode(t)
	e.publish(t, e.canvasReply("act-1", "answer once"))
	// The posting record is written, then the process dies before the
	// POST; the window is the post's whole NotifyTimeout (8 s here), which
	// the busy feed fills.
	var once sync.Once
	var fillErr error
	e.crashedStageWith(t, replier.Config{NotifyTimeout: 8 * time.Second}, func(kill func() error) *crashpoint.Replier {
		return &crashpoint.Replier{BeforePost: func(context.Context, *events.Reply) error {
			once.Do(func() { fillErr = e.fillFeed(2600) })
			return kill()
		}}
	})
	if fillErr != nil {
		t.Fatal(fillErr)
	}
	// The fill races the post's window on a loaded machine, so the pages
	// owed are counted from the rows that did land in it (500 a page);
	// counted now, before the repost replaces the posting record.
	inWindow := e.rowsInPostWindow(t, "act-1", 8*time.Second, 50*time.Millisecond)
	e.plat.InjectFault(moleculetest.Fault{Method: http.MethodGet, PathPrefix: "/workspaces/" + e.a.ID + "/activity",
		Status: 500, Body: `{"error":"internal"}`, Rate: 0.3})
	st := e.runUntilAcked(t, replier.Config{ReconcileSkew: 50 * time.Millisecond, NotifyTimeout: 8 * time.Second}, 60*time.Second)
	if n := len(e.plat.Notifications(e.a.ID)); n != 1 {
		t.Fatalf("notifications = %d, want 1", n)
	}
	if st.Reposted != 1 || st.Notified != 1 || st.DeadLettered != 0 {
		t.Fatalf("stats = %+v, want one post after the window proved none arrived", st)
	}
	reads, failed := e.feedReads()
	if ok, want := reads-failed, inWindow/molecule.MaxActivityLimit+1; ok < want {
		t.Fatalf("successful window reads = %d, want the %d rows of the window paged through (>= %d pages)", ok, inWindow, want)
	}
	t.Logf("%d of the 2,600 rows landed in the post's window; %d pages read", inWindow, reads-failed)
}

// flightEnd is when rec's post stopped being in flight, as the replier's
// reconciliation reckons it: answered, else its deadline, else
// notifyTimeout after posting.
func flightEnd(rec events.ReplyRecord, notifyTimeout time.Duration) time.Time {
	switch {
	case !rec.AnsweredAt.IsZero():
		return rec.AnsweredAt
	case !rec.Deadline.IsZero():
		return rec.Deadline
	}
	return rec.PostingAt.Add(notifyTimeout)
}

// rowsInPostWindow counts the workspace's feed rows created inside the
// window of activity's post (from its posting record to the end of its
// flight: answered, deadline, or notifyTimeout after posting), widened by
// skew on both sides, as reconciliation searches it.
func (e *env) rowsInPostWindow(t *testing.T, activity string, notifyTimeout, skew time.Duration) int {
	t.Helper()
	rec, ok := e.record(t, activity)
	if !ok {
		t.Fatalf("no reply record of %s", activity)
	}
	lo, hi := rec.PostingAt.Add(-skew), flightEnd(rec, notifyTimeout).Add(skew)
	n := 0
	for _, raw := range e.plat.Rows(e.a.ID) {
		var row struct {
			CreatedAt time.Time `json:"created_at"`
		}
		if json.Unmarshal(raw, &row) == nil && !row.CreatedAt.Before(lo) && !row.CreatedAt.After(hi) {
			n++
		}
	}
	return n
}

// A 500 is the platform's own answer: the post is over, so settling needs
// no wait for the post's timeout, and spends no delivery. A 500 after the
// platform wrote the notify row settles as delivered; a 500 before it, as
// not delivered (posted once more).
func TestReconcileAfter500NeedsNoWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		after     bool
		wantPosts uint64
	}{
		{"row written, then 500", true, 1},
		{"500, nothing written", false, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.plat.InjectFault(moleculetest.Fault{Method: http.MethodPost, PathPrefix: "/workspaces/" + e.a.ID + "/notify",
				Status: 500, Body: `{"error":"internal"}`, AfterHandler: tc.after, Count: 1})
			e.publish(t, e.canvasReply("act-1", "answer once"))
			start := time.Now()
			// NotifyTimeout 30 s: any wait for it would fail the deadline.
			st := e.runUntilAcked(t, replier.Config{NotifyTimeout: 30 * time.Second, ReconcileSkew: 50 * time.Millisecond}, 10*time.Second)
			if n := len(e.plat.Notifications(e.a.ID)); n != 1 {
				t.Fatalf("notifications = %d, want 1", n)
			}
			if st.Posts != tc.wantPosts || st.DeadLettered != 0 {
				t.Fatalf("stats = %+v, want %d posts", st, tc.wantPosts)
			}
			if tc.after && (st.Reconciled != 1 || st.Received != 1) {
				t.Fatalf("stats = %+v, want settled as delivered on the first delivery", st)
			}
			t.Logf("settled in %s", time.Since(start).Round(time.Millisecond))
		})
	}
}

// An ambiguous dead letter only when the feed itself cannot be read for
// the whole retry budget; the dead letter says so.
func TestReconcileUnreadableFeedDeadLetters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.plat.InjectFault(moleculetest.Fault{Method: http.MethodPost, PathPrefix: "/workspaces/" + e.a.ID + "/notify",
		Status: 500, Body: `{"error":"internal"}`, Count: 1})
	e.plat.InjectFault(moleculetest.Fault{Method: http.MethodGet, PathPrefix: "/workspaces/" + e.a.ID + "/activity",
		Status: 500, Body: `{"error":"internal"}`})
	e.publish(t, e.canvasReply("act-1", "answer once"))
	_, js, topo := e.conn(t)
	r := e.replier(t, js, topo, replier.Config{Config: stage.Config{RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond}, ReconcileTimeout: 200 * time.Millisecond})
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	waitFor(t, 60*time.Second, "the reply to be dead-lettered", func() bool { return e.replyLeft(t) == 0 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	dls, err := dlq.List(fixture(t), e.js, dlq.Filter{Stage: events.StageReplier})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].DeadLetter.Reason != events.ReasonAmbiguous || !strings.Contains(dls[0].DeadLetter.Error, "feed could not be read") {
		t.Fatalf("dead letters = %+v, want one ambiguous_delivery saying the feed could not be read", dls)
	}
	if st := r.Stats(); st.Posts != 1 {
		t.Fatalf("stats = %+v, want no second post while the outcome is unknown", st)
	}
}
