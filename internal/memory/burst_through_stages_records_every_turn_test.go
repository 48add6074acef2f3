package memory_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// The shape that lost turns, through the real stages: a burst of canvas
// messages (one conversation) answered by a dispatcher and a replier with
// 64 workers each. Every message and every reply is in memory, once, and
// no memory operation failed.
func TestBurstIntoOneConversationThroughSixtyFourRepliersRecordsEveryTurn(t *testing.T) {
	t.Parallel()
	const n = 200
	w := pipelinetest.New(t, pipelinetest.Options{
		Platform: []moleculetest.Option{moleculetest.WithRateLimit(0, 0)},
		Topology: events.TopologyConfig{HistoryTurns: 1000},
	})
	cfg := memory.Config{Turns: 1000}
	w.StartPipeline(pipelinetest.PipelineConfig{NoDispatcher: true, NoReplier: true})
	dp, rp := w.Proc(), w.Proc()
	d := w.NewDispatcher(dp, handler.Echo, dispatcher.Config{Config: stage.Config{Concurrency: 64}, Memory: memoryOn(t, dp, cfg)})
	r := w.NewReplier(rp, nil, replier.Config{Config: stage.Config{Concurrency: 64}, Memory: memoryOn(t, rp, cfg)})
	w.WaitSeeded(w.Agent.ID)
	for i := range n {
		w.SendCanvas(fmt.Sprint("burst ", i))
	}
	pipelinetest.Start(t, d.Run)
	pipelinetest.Start(t, r.Run)
	w.WaitReplies(n, 60*time.Second)

	turns := waitTurns(t, w, events.ConversationCanvas, 2*n)
	seen := map[string]bool{}
	for _, tn := range turns {
		k := tn.ActivityID + "/" + tn.Role
		if seen[k] {
			t.Errorf("turn %s stored twice", k)
		}
		seen[k] = true
	}
	for i := range n {
		id := w.SentText(fmt.Sprint("burst ", i)).ActivityID
		if !seen[id+"/"+handler.RoleUser] || !seen[id+"/"+handler.RoleAgent] {
			t.Errorf("message %d (%s): a turn is missing", i, id)
		}
	}
	if e := d.Stats().MemoryErrors + r.Stats().MemoryErrors; e != 0 {
		t.Errorf("%d memory errors", e)
	}
}
