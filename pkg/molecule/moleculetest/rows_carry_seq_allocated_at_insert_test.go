package moleculetest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// seqOf reads a row's seq (a JSON number), failing without one.
func seqOf(t *testing.T, row map[string]any) int64 {
	t.Helper()
	v, ok := row["seq"].(float64)
	if !ok {
		t.Fatalf("row %v has no seq", row["id"])
	}
	return int64(v)
}

// TestRowsCarrySeqAllocatedAtInsert: 2026-08 rows carry seq
// (enteros-core aeec8e47 workspace-server/internal/handlers/activity.go:456
// projects it, 612 renders it), an identity taken at insert, not at commit
// (migrations/20260604000000_activity_logs_seq.up.sql): a row committed
// late carries a lower seq than a row already visible, and a since_id read
// from that row never returns it (activity.go:528, created_at then seq).
func TestRowsCarrySeqAllocatedAtInsert(t *testing.T) {
	s := newServer(t, moleculetest.WithLateCommit(0.5, 300*time.Millisecond))
	a := s.CreateWorkspace("ext-A")
	registerPoll(t, s, a)
	for _, text := range []string{"first", "late", "third"} {
		if code, _, err := s.SendCanvas(context.Background(), a.ID, text); err != nil || code != 200 {
			t.Fatal(code, err)
		}
	}
	p := "/workspaces/" + a.ID + "/activity?type=a2a_receive"
	visible := call(t, s, "GET", p, bearerH(a.Token), "").array(t) // newest first
	if len(visible) != 2 {
		t.Fatalf("%d rows visible before the late commit, want 2", len(visible))
	}
	third, first := visible[0], visible[1]
	waitFor(t, "the late row", 5*time.Second, func() bool {
		return len(s.Rows(a.ID)) == 3 && len(call(t, s, "GET", p, bearerH(a.Token), "").array(t)) == 3
	})
	all := call(t, s, "GET", p, bearerH(a.Token), "").array(t)
	late := all[1]
	if !(seqOf(t, first) < seqOf(t, late) && seqOf(t, late) < seqOf(t, third)) {
		t.Errorf("seqs first %d, late %d, third %d: want ascending in insert order", seqOf(t, first), seqOf(t, late), seqOf(t, third))
	}
	after := call(t, s, "GET", p+"&since_id="+third["id"].(string), bearerH(a.Token), "").array(t)
	if len(after) != 0 {
		t.Errorf("since_id of the newest visible row returned %d rows, want 0 (the late row is behind it)", len(after))
	}
	fromFirst := call(t, s, "GET", p+"&since_id="+first["id"].(string), bearerH(a.Token), "").array(t)
	if len(fromFirst) != 2 || fromFirst[0]["id"] != late["id"] || fromFirst[1]["id"] != third["id"] {
		t.Errorf("since_id of the first row: %v, want the late row then the third, by (created_at, seq)", fromFirst)
	}
}

// TestRowsHaveNoSeqBefore2026_08: the 2026-05 feed (eaf7dbb) has no seq.
func TestRowsHaveNoSeqBefore2026_08(t *testing.T) {
	s := newServer(t, moleculetest.WithGeneration(moleculetest.Gen2026_05))
	a := s.CreateWorkspace("ext-A")
	registerPoll(t, s, a)
	if code, _, err := s.SendCanvas(context.Background(), a.ID, "hi"); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	row := call(t, s, "GET", "/workspaces/"+a.ID+"/activity", bearerH(a.Token), "").array(t)[0]
	if _, ok := row["seq"]; ok {
		t.Errorf("2026-05 row has seq: %v", row)
	}
}

// TestQueuedRowShape2026_08: a canvas message's row on 2026-08 is the
// ingest row (a2a_proxy.go:838-840, summary "… (ingest)",
// a2a_proxy_helpers.go:1447) that the queued write updates without
// renaming (activity.go:1148-1159), with seq among the keys.
func TestQueuedRowShape2026_08(t *testing.T) {
	s := newServer(t)
	a := s.CreateWorkspace("ext-A")
	registerPoll(t, s, a)
	if code, _, err := s.SendCanvas(context.Background(), a.ID, "hi"); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	row := call(t, s, "GET", "/workspaces/"+a.ID+"/activity", bearerH(a.Token), "").array(t)[0]
	want := "activity_type,created_at,duration_ms,error_detail,id,method,request_body,seq,source_id,status,summary,target_id,workspace_id"
	if got := strings.Join(keys(row), ","); got != want {
		t.Errorf("keys %s, want %s", got, want)
	}
	if row["summary"] != "message/send → ext-A (ingest)" || row["status"] != "ok" {
		t.Errorf("summary %v, status %v", row["summary"], row["status"])
	}
}

// TestCursorBreaksTimestampTiesBySeq: two rows written in one microsecond
// (moleculetest.WithTimestampTies). On 2026-08 "after the cursor" is
// created_at > $t OR (created_at = $t AND seq > $s) (activity.go:528), so
// a since_id of the first returns the second; on 2026-05 it compared
// created_at alone and skips it (the migration's "second, related bug",
// 20260604000000_activity_logs_seq.up.sql).
func TestCursorBreaksTimestampTiesBySeq(t *testing.T) {
	for _, tc := range []struct {
		gen  moleculetest.Generation
		want int
	}{{moleculetest.Gen2026_08, 1}, {moleculetest.Gen2026_05, 0}} {
		t.Run(tc.gen.String(), func(t *testing.T) {
			s := newServer(t, moleculetest.WithGeneration(tc.gen), moleculetest.WithTimestampTies())
			a := s.CreateWorkspace("ext-A")
			registerPoll(t, s, a)
			for _, text := range []string{"one", "two"} {
				if code, _, err := s.SendCanvas(context.Background(), a.ID, text); err != nil || code != 200 {
					t.Fatal(code, err)
				}
			}
			rows := call(t, s, "GET", "/workspaces/"+a.ID+"/activity", bearerH(a.Token), "").array(t) // newest first
			if len(rows) != 2 || rows[0]["created_at"] != rows[1]["created_at"] {
				t.Fatalf("rows %v: want two in one microsecond", rows)
			}
			after := call(t, s, "GET", "/workspaces/"+a.ID+"/activity?since_id="+rows[1]["id"].(string), bearerH(a.Token), "").array(t)
			if len(after) != tc.want {
				t.Errorf("since_id of the first of two tied rows: %d rows, want %d", len(after), tc.want)
			}
		})
	}
}
