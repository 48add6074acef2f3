package poller

import (
	"testing"
	"time"
)

// The stored poll and heartbeat times are rewritten once they are
// StatusRefresh old, not sooner, while a failure is written at once: an
// old time in `molecule-relay status` says "nothing changed", never hides
// a failed heartbeat or poll.
func TestStatusTimesRefreshedEveryStatusRefresh(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	prev := statusRecord{LastPollAt: t0, LastHeartbeatAt: t0, HeartbeatStatus: "ok"}
	cases := []struct {
		name  string
		set   func(*statusRecord)
		write bool
	}{
		{"a heartbeat within StatusRefresh", func(r *statusRecord) { r.LastHeartbeatAt = t0.Add(StatusRefresh - time.Second) }, false},
		{"a poll within StatusRefresh", func(r *statusRecord) { r.LastPollAt = t0.Add(StatusRefresh - time.Second) }, false},
		{"a heartbeat StatusRefresh later", func(r *statusRecord) { r.LastHeartbeatAt = t0.Add(StatusRefresh) }, true},
		{"a poll StatusRefresh later", func(r *statusRecord) { r.LastPollAt = t0.Add(StatusRefresh) }, true},
		{"a failed heartbeat a second later", func(r *statusRecord) {
			r.LastHeartbeatAt, r.HeartbeatStatus, r.HeartbeatError = t0.Add(time.Second), "", "503"
		}, true},
		{"a failed poll a second later", func(r *statusRecord) { r.LastPollAt, r.LastPollError = t0.Add(time.Second), "timeout" }, true},
	}
	for _, c := range cases {
		next := prev
		c.set(&next)
		if write := !sameStatus(&prev, &next); write != c.write {
			t.Errorf("%s: written %v, want %v", c.name, write, c.write)
		}
	}
}
