package poller

import (
	"testing"
	"time"
)

// Follow-ups coalesce: a burst of activity brings one set, and steady
// traffic at most two quick re-reads a second, each reaching back to the
// oldest activity it covers.
func TestFollowUpsCoalesceUnderSteadyTraffic(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	var f followUps
	for i := range 10 { // a burst: 10 polls that published, 10 ms apart
		f.schedule(t0.Add(time.Duration(i)*10*time.Millisecond), DefaultOverlapFollowUps)
	}
	if len(f.pending) != 3 {
		t.Fatalf("a burst scheduled %d follow-ups, want 3", len(f.pending))
	}
	if w := f.take(t0.Add(250 * time.Millisecond)); w != 250*time.Millisecond+followUpSlack {
		t.Fatalf("first follow-up window %s, want the activity's 250ms plus the slack", w)
	}

	// Steady traffic: a poll that published every 30 ms for 10 s, the
	// due follow-ups taken as the loop would.
	var g followUps
	runs := 0
	for ms := 0; ms < 10_000; ms += 30 {
		now := t0.Add(time.Duration(ms) * time.Millisecond)
		if g.take(now) > 0 {
			runs++
		}
		g.schedule(now, DefaultOverlapFollowUps)
	}
	t.Logf("%d quick re-reads in 10 s of steady traffic", runs)
	if runs > 21 {
		t.Fatalf("%d quick re-reads in 10 s of steady traffic, want at most about 2 a second", runs)
	}
	if runs < 9 {
		t.Fatalf("only %d quick re-reads in 10 s of steady traffic: late rows would wait", runs)
	}
}
