package moleculetest_test

import (
	"context"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// TestActivityAckAnswers: POST /workspaces/:id/activity/ack (enteros-core
// aeec8e47 workspace-server/internal/router/router.go:538, behind
// WorkspaceAuth; handlers/activity.go:991-1031) takes {"acked_seq": n},
// refuses a body without an integer acked_seq or with a negative one, and
// answers the stored last_acked_seq, which only moves forward (GREATEST).
func TestActivityAckAnswers(t *testing.T) {
	s := newServer(t)
	a, b := s.CreateWorkspace("ext-A"), s.CreateWorkspace("ext-B")
	p := "/workspaces/" + a.ID + "/activity/ack"
	auth := bearerH(a.Token)
	required := `{"error":"acked_seq is required"}`
	steps := []struct {
		name   string
		h      map[string][]string
		body   string
		status int
		want   string
	}{
		{"no bearer", nil, `{"acked_seq":1}`, 401, `{"error":"missing workspace auth token"}`},
		{"B's token", bearerH(b.Token), `{"acked_seq":1}`, 401, `{"error":"invalid workspace auth token"}`},
		{"empty body", auth, "", 400, required},
		{"not JSON", auth, "ack", 400, required},
		{"no acked_seq", auth, `{"seq":3}`, 400, required},
		{"null", auth, `{"acked_seq":null}`, 400, required},
		{"a string", auth, `{"acked_seq":"3"}`, 400, required},
		{"a fraction", auth, `{"acked_seq":2.5}`, 400, required},
		{"negative", auth, `{"acked_seq":-1}`, 400, `{"error":"acked_seq must be >= 0"}`},
		{"zero", auth, `{"acked_seq":0}`, 200, `{"last_acked_seq":0}`},
		{"forward", auth, `{"acked_seq":42}`, 200, `{"last_acked_seq":42}`},
		{"back is a no-op", auth, `{"acked_seq":7}`, 200, `{"last_acked_seq":42}`},
		{"admin", bearerH(s.AdminToken()), `{"acked_seq":50}`, 200, `{"last_acked_seq":50}`},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			expect(t, call(t, s, "POST", p, st.h, st.body), st.status, st.want)
		})
	}
	if got := s.AckedSeq(a.ID); got != 50 {
		t.Errorf("AckedSeq %d, want 50", got)
	}
	if got := s.AckedSeq(b.ID); got != 0 {
		t.Errorf("B's AckedSeq %d, want 0", got)
	}
}

// TestActivityAckAbsentBefore2026_08: the 2026-05 platform has no ack
// route (inbox_delivery_state is migration 20260630000000): 404.
func TestActivityAckAbsentBefore2026_08(t *testing.T) {
	s := newServer(t, moleculetest.WithGeneration(moleculetest.Gen2026_05))
	a := s.CreateWorkspace("ext-A")
	r := call(t, s, "POST", "/workspaces/"+a.ID+"/activity/ack", bearerH(a.Token), `{"acked_seq":1}`)
	if r.status != 404 {
		t.Errorf("status %d, want 404", r.status)
	}
}

// TestRetentionPrunesAckedRowsAfter7Days: the 2026-08 sweep
// (db/retention.go:40-58, defaults cmd/server/main.go:244-248) deletes a
// row older than 7 days only when its seq is at most last_acked_seq, and
// every row older than 30 days; the 2026-05 sweep (eaf7dbb
// cmd/server/main.go:123) every row older than 7 days.
func TestRetentionPrunesAckedRowsAfter7Days(t *testing.T) {
	for _, gen := range []moleculetest.Generation{moleculetest.Gen2026_08, moleculetest.Gen2026_05} {
		t.Run(gen.String(), func(t *testing.T) {
			s := newServer(t, moleculetest.WithGeneration(gen))
			a := s.CreateWorkspace("ext-A")
			registerPoll(t, s, a)
			for _, text := range []string{"one", "two", "three"} {
				if code, _, err := s.SendCanvas(context.Background(), a.ID, text); err != nil || code != 200 {
					t.Fatal(code, err)
				}
			}
			rows := call(t, s, "GET", "/workspaces/"+a.ID+"/activity", bearerH(a.Token), "").array(t) // newest first
			now := time.Now()
			if n := len(s.Prunable(a.ID, now.Add(6*24*time.Hour))); n != 0 {
				t.Errorf("%d rows prunable at 6 days, want 0", n)
			}
			at8 := now.Add(8 * 24 * time.Hour)
			if gen == moleculetest.Gen2026_05 {
				if n := len(s.Prunable(a.ID, at8)); n != 3 {
					t.Errorf("%d rows prunable at 8 days, want 3", n)
				}
				return
			}
			if n := len(s.Prunable(a.ID, at8)); n != 0 {
				t.Errorf("%d unacked rows prunable at 8 days, want 0", n)
			}
			acked := int64(rows[1]["seq"].(float64)) // the middle row
			expect(t, call(t, s, "POST", "/workspaces/"+a.ID+"/activity/ack", bearerH(a.Token), `{"acked_seq":`+mustJSON(acked)+`}`), 200, "")
			got := s.Prunable(a.ID, at8)
			if len(got) != 2 || got[0] != rows[2]["id"] || got[1] != rows[1]["id"] {
				t.Errorf("prunable at 8 days %v, want the two rows up to the acked seq", got)
			}
			if n := len(s.Prunable(a.ID, now.Add(31*24*time.Hour))); n != 3 {
				t.Errorf("%d rows prunable at 31 days, want 3", n)
			}
		})
	}
}
