package poller

import (
	"testing"
	"time"
)

// A quick re-read looks back to where the previous complete one started,
// less the commit lag, on both clocks: since_secs on this process's, the
// page stop on the platform's as the feed showed it.
func TestRereadSpanStartsWhereThePreviousRereadLooked(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var w workspace
	if d, from := w.rereadSpan(t0, 3*time.Second, 2*time.Minute); d != 3*time.Second || !from.IsZero() {
		t.Fatalf("before any re-read: %s from %v, want the follow-up's own 3s and no page stop", d, from)
	}
	// The platform's clock runs 40 s ahead of ours; the feed showed a row
	// created 100 ms before our read of it.
	w.feedClock.note(t0.Add(40*time.Second-100*time.Millisecond), t0)
	started := t0.Add(time.Second)
	w.rereadAt, w.rereadFloor = started, w.feedClock.atLeast(started).Add(-followUpSlack)
	d, from := w.rereadSpan(started.Add(500*time.Millisecond), 3*time.Second, 2*time.Minute)
	if d != 500*time.Millisecond+followUpSlack {
		t.Fatalf("span %s, want the 500ms since the last re-read plus the slack", d)
	}
	if want := t0.Add(41*time.Second - 100*time.Millisecond - followUpSlack); !from.Equal(want) {
		t.Fatalf("page stop %v, want %v (the platform's time at the last re-read, at least, less the slack)", from, want)
	}
	if d, _ := w.rereadSpan(started.Add(time.Hour), 3*time.Second, 2*time.Minute); d != 2*time.Minute {
		t.Fatalf("span after an hour %s, want the overlap window", d)
	}
	// A window's older pages say less of the platform's clock than the
	// newest row read: they do not move the estimate back.
	w.feedClock.note(t0.Add(30*time.Second), t0.Add(2*time.Second))
	if got := w.feedClock.atLeast(t0.Add(2 * time.Second)); !got.Equal(t0.Add(42*time.Second - 100*time.Millisecond)) {
		t.Fatalf("platform clock at least %v after an older row was read", got)
	}
}

// A woken poll that found nothing owes a re-read: at once when none ran
// within followUpGap, else followUpGap after the last; one pending close
// by covers it. So a burst's wake-ups, most of which find their row
// already read by the poll before, cost at most two re-reads a second.
func TestOwedRereadWaitsForTheGapAfterTheLast(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var f followUps
	f.owe(t0)
	if due, ok := f.next(); !ok || !due.Equal(t0) {
		t.Fatalf("first owed re-read due %v, want at once", due)
	}
	if w := f.take(t0); w != wakeRereadWindow {
		t.Fatalf("its window %s, want wakeRereadWindow", w)
	}
	for i := range 20 { // wake-ups every 10 ms that find nothing
		f.owe(t0.Add(time.Duration(i+1) * 10 * time.Millisecond))
	}
	if len(f.pending) != 1 {
		t.Fatalf("%d owed re-reads pending after 20 wake-ups, want 1", len(f.pending))
	}
	if due, _ := f.next(); !due.Equal(t0.Add(followUpGap)) {
		t.Fatalf("owed re-read due %v after the last, want followUpGap after it", due.Sub(t0))
	}
}

// Follow-ups that fell due while a long cycle ran wait followUpGap after
// the last one taken: each re-read reads the commit-lag slack again, so
// two in quick succession would read it twice for nothing.
func TestFollowUpDueDuringALongCycleWaitsForTheGap(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var f followUps
	f.schedule(t0, []time.Duration{250 * time.Millisecond, time.Second})
	if w := f.take(t0.Add(250 * time.Millisecond)); w == 0 {
		t.Fatal("the first follow-up was not taken when due")
	}
	// A follow-up due 500 ms after t0 (scheduled by a poll at 200 ms)
	// finds the loop at 600 ms, 350 ms after the last one.
	f.schedule(t0.Add(200*time.Millisecond), []time.Duration{300 * time.Millisecond})
	if w := f.take(t0.Add(600 * time.Millisecond)); w != 0 {
		t.Fatalf("a follow-up ran 350 ms after the last (window %s), want it to wait for followUpGap", w)
	}
	if due, _ := f.next(); !due.Equal(t0.Add(250*time.Millisecond + followUpGap)) {
		t.Fatalf("next follow-up due %s after t0, want followUpGap after the last", due.Sub(t0))
	}
	if w := f.take(t0.Add(250*time.Millisecond + followUpGap)); w == 0 {
		t.Fatal("the follow-up was not taken once the gap had passed")
	}
}
