package poller

import (
	"testing"
	"time"
)

// A heartbeat or an event that changes only a time of the status record
// (most of them, at an idle fleet's 40,000 a minute) is kept in memory
// for the next write without allocating: a new copy of the cached entry
// for each was a quarter of the idle relay's allocations at 10,000
// workspaces. The time still reaches the next write.
func TestStatusUpdateOfATimeAloneAllocatesNothing(t *testing.T) {
	ctx, p, _ := statusTestPoller(t)
	const ws = "ws-1"
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := p.updateStatus(ctx, ws, func(r *statusRecord) { r.LastHeartbeatAt, r.LastEventAt = t0, t0 }); err != nil {
		t.Fatal(err)
	}
	at := t0
	beat := func(r *statusRecord) { r.LastHeartbeatAt = at }
	allocs := testing.AllocsPerRun(100, func() {
		at = at.Add(time.Second)
		if _, err := p.updateStatus(ctx, ws, beat); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Errorf("a heartbeat's time alone allocated %.0f times", allocs)
	}
	last := at
	at = t0.Add(StatusRefresh + time.Hour) // due: written, with the event's time
	if _, err := p.updateStatus(ctx, ws, func(r *statusRecord) { r.LastEventAt = at }); err != nil {
		t.Fatal(err)
	}
	got, _, err := loadStatus(ctx, p.topo.Status, ws)
	if err != nil {
		t.Fatal(err)
	}
	if !got.LastHeartbeatAt.Equal(last) {
		t.Errorf("stored heartbeat time %s, want the last one kept in memory, %s", got.LastHeartbeatAt, last)
	}
}
