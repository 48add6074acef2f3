package moleculetest_test

import (
	"encoding/json"
	"net/http"
	"testing"
)

// A peer's tasks/cancel to a poll-mode workspace is queued like any
// JSON-RPC method: an a2a_receive row whose method is tasks/cancel, whose
// request_body is the request (params.id), and whose summary names the
// method; it carries no messageId, so each cancel is its own row
// (enteros-core aeec8e47 handlers/a2a_proxy.go:869-874,
// a2a_proxy_helpers.go:1303-1356 logA2AReceiveQueued). The dispatcher
// relies on it (internal/dispatcher/cancel.go).
func TestTasksCancelIsQueuedAsARow(t *testing.T) {
	s := newServer(t)
	a, b := s.CreateWorkspace("A"), s.CreateWorkspace("B")
	registerPoll(t, s, a)
	body := `{"jsonrpc":"2.0","id":"1","method":"tasks/cancel","params":{"id":"task-1"}}`
	for range 2 {
		st, resp, err := s.SendRaw(t.Context(), a.ID, hdr("Authorization", "Bearer "+b.Token, "X-Workspace-ID", b.ID), []byte(body))
		if err != nil || st != http.StatusOK {
			t.Fatalf("tasks/cancel: %d %s %v", st, resp, err)
		}
	}
	rows := s.Rows(a.ID)
	if len(rows) != 2 {
		t.Fatalf("%d rows, want one per cancel", len(rows))
	}
	var row struct {
		Type        string `json:"activity_type"`
		Method      string `json:"method"`
		SourceID    string `json:"source_id"`
		Summary     string `json:"summary"`
		RequestBody struct {
			Method string `json:"method"`
			Params struct {
				ID string `json:"id"`
			} `json:"params"`
		} `json:"request_body"`
	}
	if err := json.Unmarshal(rows[0], &row); err != nil {
		t.Fatal(err)
	}
	if row.Type != "a2a_receive" || row.Method != "tasks/cancel" || row.SourceID != b.ID ||
		row.RequestBody.Method != "tasks/cancel" || row.RequestBody.Params.ID != "task-1" || row.Summary != "tasks/cancel → A (queued for poll)" {
		t.Errorf("row %+v", row)
	}
}
