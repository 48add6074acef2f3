package console_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/console"
	"github.com/molecule-ai/molecule-relay/internal/kvlease"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// The MCP view lists the instance holding a workspace's channel and,
// after it, the ones waiting for it; a waiting entry that expired (its
// session died without deleting it) is left out.
func TestMCPViewShowsWhoHoldsAndWhoWaits(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Options{})
	ctx := pipelinetest.Ctx(t)
	lease, err := kvlease.Acquire(ctx, f.js, []string{"ws-1"}, kvlease.Config{Bucket: events.BucketMCPLeases, Instance: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lease.Release)
	kv, err := f.js.KeyValue(ctx, events.BucketMCPLeases)
	if err != nil {
		t.Fatal(err)
	}
	dead, _ := json.Marshal(kvlease.Waiting{Instance: "died", Expires: time.Now().Add(-time.Minute)})
	if _, err := kv.Put(ctx, kvlease.WaitingKey("ws-1", "died"), dead); err != nil {
		t.Fatal(err)
	}
	stop, err := kvlease.MarkWaiting(ctx, kv, []string{"ws-1"}, "waiter")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)

	_, body := f.do(t, browserClient(t), "GET", "/api/mcp", "")
	var got []struct {
		WorkspaceID string `json:"workspace_id"`
		Instance    string
		Role        string
		PID         int
		Since       time.Time
		Live        bool
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	if len(got) != 2 || got[0].Instance != "holder" || got[0].Role != "holds" || !got[0].Live ||
		got[1].Instance != "waiter" || got[1].Role != "waits" || got[1].WorkspaceID != "ws-1" || got[1].PID == 0 || got[1].Since.IsZero() {
		t.Fatalf("MCP sessions %s: want the holder of ws-1, then its live waiter with its pid and since when (not the expired one)", body)
	}
}
