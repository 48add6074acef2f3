package poller

import (
	"testing"
	"time"
)

// The poll's, the heartbeat's and the last event's times, each refreshed
// every StatusRefresh, go out together: the write one of them makes
// carries the others' times not written yet, so an idle workspace costs
// one status write per StatusRefresh, not three (docs/fleet.md).
func TestStatusRefreshesShareOneWrite(t *testing.T) {
	ctx, p, _ := statusTestPoller(t)
	const ws = "ws-1"
	set := func(f func(*statusRecord)) {
		t.Helper()
		if _, err := p.updateStatus(ctx, ws, f); err != nil {
			t.Fatal(err)
		}
	}
	rev := func() uint64 {
		t.Helper()
		e, err := p.topo.Status.Get(ctx, ws)
		if err != nil {
			t.Fatal(err)
		}
		return e.Revision()
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	set(func(r *statusRecord) { r.LastPollAt, r.LastHeartbeatAt, r.LastEventAt = t0, t0, t0 })
	first := rev()

	set(func(r *statusRecord) { r.LastHeartbeatAt = at(3 * time.Minute) })
	set(func(r *statusRecord) { r.LastEventAt = at(4 * time.Minute) })
	set(func(r *statusRecord) { r.LastPollAt = at(StatusRefresh + time.Second) }) // due: written
	set(func(r *statusRecord) { r.LastHeartbeatAt = at(StatusRefresh + 10*time.Second) })
	set(func(r *statusRecord) { r.LastEventAt = at(StatusRefresh + 20*time.Second) })
	if n := rev() - first; n != 1 {
		t.Errorf("%d status writes for three refreshes in a row, want 1", n)
	}
	got, _, err := loadStatus(ctx, p.topo.Status, ws)
	if err != nil {
		t.Fatal(err)
	}
	if !got.LastHeartbeatAt.Equal(at(3*time.Minute)) || !got.LastEventAt.Equal(at(4*time.Minute)) {
		t.Errorf("stored heartbeat %s and event %s: want the times known at the poll's write (3m and 4m after %s)", got.LastHeartbeatAt, got.LastEventAt, t0)
	}
}
