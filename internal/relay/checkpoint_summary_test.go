package relay_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// The checkpoint row connect --once leaves on the feed is shown in the
// canvas Activity tab ("all" filter) as a LOG row; its summary explains
// itself to the person reading it: who wrote it, up to when every message
// is answered, that it is no message and needs nothing. Before, it read
// "molecule-relay checkpoint".
func TestCheckpointRowSummaryExplainsItself(t *testing.T) {
	t.Parallel()
	plat := moleculetest.NewServer()
	t.Cleanup(plat.Close)
	ws := plat.CreateWorkspace("ci-agent")
	if rep := freshOnce(t, plat, ws, nil); !rep.OK() {
		t.Fatalf("first run: %+v", rep)
	}
	if code, _, err := plat.SendCanvas(t.Context(), ws.ID, "hello"); err != nil || code != 200 {
		t.Fatalf("send: %d %v", code, err)
	}
	if rep := freshOnce(t, plat, ws, nil); !rep.OK() || rep.Replied != 1 {
		t.Fatalf("second run: %+v", rep)
	}
	var summaries []string
	for _, raw := range plat.Rows(ws.ID) {
		var r struct {
			ActivityType string `json:"activity_type"`
			Method       string `json:"method"`
			Summary      string `json:"summary"`
		}
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatal(err)
		}
		if r.ActivityType == "agent_log" && r.Method == "molecule-relay/checkpoint" {
			summaries = append(summaries, r.Summary)
		}
	}
	if len(summaries) == 0 {
		t.Fatal("no checkpoint row on the feed")
	}
	last := summaries[len(summaries)-1]
	for _, want := range []string{"Molecule Relay", "every message up to", " UTC", "is answered", "Not a message, nothing to do"} {
		if !strings.Contains(last, want) {
			t.Errorf("checkpoint summary %q lacks %q", last, want)
		}
	}
}
