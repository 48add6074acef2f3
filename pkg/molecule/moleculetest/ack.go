package moleculetest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"time"
)

// The 2026-08 acked delivery (enteros-core aeec8e47): POST
// /workspaces/:id/activity/ack records the highest seq the workspace's
// poller has handled (handlers/activity.go:991-1031, router.go:538), and
// the retention sweep prunes a row older than 7 days only when its seq is
// at most that, every row older than 30 days regardless
// (db/retention.go:40-58, cmd/server/main.go:244-248). The 2026-05 sweep
// prunes every row older than 7 days (eaf7dbb cmd/server/main.go:123).

// Retention periods of the platform's defaults (ACTIVITY_RETENTION_DAYS,
// ACTIVITY_HARD_RETENTION_DAYS).
const (
	retentionSoft = 7 * 24 * time.Hour
	retentionHard = 30 * 24 * time.Hour
)

// handleAck answers the ack of an authenticated workspace: 400 "acked_seq
// is required" for a body that does not decode into {"acked_seq": int64}
// or lacks it, 400 "acked_seq must be >= 0", else 200 {"last_acked_seq":
// m}, m the greatest seq ever acked (GREATEST: an ack never moves it
// back). An admin's ack of an unknown workspace fails its foreign key:
// 500.
func (s *Server) handleAck(w http.ResponseWriter, id string, body []byte) {
	var p struct {
		AckedSeq *int64 `json:"acked_seq"`
	}
	// gin's ShouldBindJSON: json.Decoder.Decode of the first value.
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&p); err != nil || p.AckedSeq == nil {
		writeError(w, http.StatusBadRequest, "acked_seq is required")
		return
	}
	if *p.AckedSeq < 0 {
		writeError(w, http.StatusBadRequest, "acked_seq must be >= 0")
		return
	}
	s.mu.Lock()
	ws := s.workspaces[id]
	var stored int64
	if ws != nil {
		ws.ackedSeq = max(ws.ackedSeq, *p.AckedSeq)
		stored = ws.ackedSeq
	}
	s.mu.Unlock()
	if ws == nil {
		writeError(w, http.StatusInternalServerError, "failed to record ack")
		return
	}
	writeJSON(w, http.StatusOK, map[string]int64{"last_acked_seq": stored})
}

// AckedSeq returns the workspace's last_acked_seq (0: nothing acked).
func (s *Server) AckedSeq(id string) int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if w := s.workspaces[id]; w != nil {
		return w.ackedSeq
	}
	return 0
}

// Prunable returns the ids of the visible rows of a workspace's feed that
// the platform's retention sweep would delete if it ran at now, oldest
// first: on 2026-08 those older than 7 days with a seq at most the
// workspace's last_acked_seq and every one older than 30 days; before,
// every one older than 7 days.
func (s *Server) Prunable(id string, now time.Time) []string {
	f := s.feedOf(id)
	if f == nil {
		return nil
	}
	keep := s.retention(id, now)
	f.mu.RLock()
	defer f.mu.RUnlock()
	var out []string
	for _, r := range f.rows {
		if !keep(r) {
			out = append(out, r.id)
		}
	}
	return out
}

// retention returns the sweep's predicate at now: true keeps the row.
func (s *Server) retention(id string, now time.Time) func(*row) bool {
	soft, hard := now.Add(-retentionSoft), now.Add(-retentionHard)
	if s.gen < Gen2026_08 {
		return func(r *row) bool { return !r.createdAt.Before(soft) }
	}
	acked := s.AckedSeq(id)
	return func(r *row) bool {
		return !(r.createdAt.Before(soft) && r.seq <= acked || r.createdAt.Before(hard))
	}
}
