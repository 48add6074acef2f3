package molecule_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A self-report lands on the workspace's own feed with source_id forced to
// the workspace (docs/protocol.md §10); an activity type outside
// the platform's list is refused before any request.
func TestReportActivity(t *testing.T) {
	t.Parallel()
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("A")
	c, err := molecule.New(molecule.Config{PlatformURL: srv.URL(), WorkspaceID: ws.ID, Token: ws.Token})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.ReportActivity(ctx, molecule.ActivityReport{ActivityType: "checkpoint"}); !errors.Is(err, molecule.ErrInvalidArgument) {
		t.Fatalf("unknown type: %v, want ErrInvalidArgument", err)
	}
	body := json.RawMessage(`{"k":"v"}`)
	if err := c.ReportActivity(ctx, molecule.ActivityReport{ActivityType: "agent_log", Method: "m", RequestBody: body}); err != nil {
		t.Fatal(err)
	}
	page, err := c.Activity(ctx, molecule.ActivityQuery{Type: "agent_log", Limit: 5})
	if err != nil || len(page.Rows) != 1 {
		t.Fatalf("rows %v, %v", page, err)
	}
	var row struct {
		SourceID    string          `json:"source_id"`
		Method      string          `json:"method"`
		RequestBody json.RawMessage `json:"request_body"`
	}
	if err := json.Unmarshal(page.Rows[0].JSON, &row); err != nil || row.SourceID != ws.ID || row.Method != "m" || string(row.RequestBody) != `{"k":"v"}` {
		t.Fatalf("row %s (%v)", page.Rows[0].JSON, err)
	}
	// The a2a_receive feed the poller reads does not see it.
	if p, err := c.Activity(ctx, molecule.ActivityQuery{Type: "a2a_receive"}); err != nil || len(p.Rows) != 0 {
		t.Fatalf("a2a_receive rows %d, %v", len(p.Rows), err)
	}
}
