package moleculetest_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// TestOneRowPerMessageID: on 2026-08 a message/send's row is keyed by its
// messageId (enteros-core aeec8e47 workspace-server/internal/handlers/
// a2a_proxy.go:838-840 persists it at ingest; activity.go:1148 upserts
// ON CONFLICT (workspace_id, message_id)): the same message sent again
// writes no second row, and the row keeps its id, created_at and seq. On
// 2026-05 every send is a row.
func TestOneRowPerMessageID(t *testing.T) {
	for _, tc := range []struct {
		gen  moleculetest.Generation
		rows int
	}{{moleculetest.Gen2026_08, 1}, {moleculetest.Gen2026_05, 2}} {
		t.Run(tc.gen.String(), func(t *testing.T) {
			s := newServer(t, moleculetest.WithGeneration(tc.gen))
			a := s.CreateWorkspace("ext-A")
			registerPoll(t, s, a)
			queued := `{"delivery_mode":"poll","method":"message/send","status":"queued"}`
			expect(t, call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", s.CanvasHeader(), canvasMsg), 200, queued)
			first := call(t, s, "GET", "/workspaces/"+a.ID+"/activity", bearerH(a.Token), "").array(t)
			expect(t, call(t, s, "POST", "/workspaces/"+a.ID+"/a2a", s.CanvasHeader(), canvasMsg), 200, queued)
			rows := call(t, s, "GET", "/workspaces/"+a.ID+"/activity", bearerH(a.Token), "").array(t)
			if len(rows) != tc.rows {
				t.Fatalf("%d rows after sending one messageId twice, want %d", len(rows), tc.rows)
			}
			if tc.rows == 1 {
				for _, k := range []string{"id", "created_at", "seq"} {
					if rows[0][k] != first[0][k] {
						t.Errorf("%s changed: %v, was %v", k, rows[0][k], first[0][k])
					}
				}
			}
		})
	}
}

// TestPushOutcomeMergedIntoIngestRow: a push-mode message's row is written
// at ingest, before the dispatch, and the agent's answer is stamped onto
// the same row (activity.go:1149-1159: response_body, status, duration_ms;
// the summary stays the ingest one).
func TestPushOutcomeMergedIntoIngestRow(t *testing.T) {
	s := newServer(t)
	var target atomic.Value // the workspace id, once created
	rowsDuringPush := make(chan int, 1)
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rowsDuringPush <- len(s.Rows(target.Load().(string)))
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":"req-1","result":{"kind":"message","parts":[{"kind":"text","text":"pong"}]}}`))
	}))
	defer agent.Close()
	created := call(t, s, "POST", "/workspaces", bearerH(s.AdminToken()), `{"name":"push-A","url":"`+agent.URL+`"}`).json(t)
	id := created["id"].(string)
	target.Store(id)
	expect(t, call(t, s, "POST", "/workspaces/"+id+"/a2a", s.CanvasHeader(), canvasMsg), 200, "")
	select {
	case n := <-rowsDuringPush:
		if n != 1 {
			t.Errorf("%d rows while the agent was answering, want the ingest row", n)
		}
	default:
		t.Fatal("the agent was not called")
	}
	rows := s.Rows(id)
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1", len(rows))
	}
	var row map[string]any
	if err := json.Unmarshal(rows[0], &row); err != nil {
		t.Fatal(err)
	}
	if row["summary"] != "message/send → push-A (ingest)" || row["status"] != "ok" || row["response_body"] == nil || row["duration_ms"] == nil {
		t.Errorf("row %v", row)
	}
}
