package memory_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// The burst that lost turns with one compare-and-set key per conversation
// (issue 26: 47 of 10,000 replies unrecorded with 64 repliers): 64
// repliers in four processes record the message and reply pairs of one
// conversation at once, each pair twice (a redelivery racing the first
// delivery). Every turn is stored, once, and each message's turn comes
// before its reply's.
func TestSixtyFourConcurrentRepliersLoseNoTurnAndDuplicateNone(t *testing.T) {
	t.Parallel()
	const repliers, procs, each = 64, 4, 6
	w := pipelinetest.New(t, pipelinetest.Options{Topology: events.TopologyConfig{HistoryTurns: 1000}})
	ctx := pipelinetest.Ctx(t)
	var stores []*memory.Store
	for range procs {
		stores = append(stores, memoryOn(t, w.Proc(), memory.Config{Turns: 1000}))
	}
	start := make(chan struct{})
	errs := make(chan error, repliers*each*2)
	var wg sync.WaitGroup
	for r := range repliers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[r%procs]
			<-start
			for i := range each {
				rep := &events.Reply{ActivityID: fmt.Sprintf("r%02d-m%d", r, i), Text: "re: m", InboundText: "m", Conversation: events.ConversationCanvas}
				for range 2 {
					if _, err := s.Record(ctx, ws, rep.Conversation, memory.TurnsOf(rep, time.Now())...); err != nil {
						errs <- err
					}
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("record: %v", err)
	}

	turns, _, err := memory.Read(ctx, w.Obs.JS, w.Obs.Topo, ws, events.ConversationCanvas)
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 2*repliers*each {
		t.Errorf("the conversation holds %d turns, want %d", len(turns), 2*repliers*each)
	}
	pos := map[string]int{}
	for i, tn := range turns {
		k := tn.ActivityID + "/" + tn.Role
		if _, dup := pos[k]; dup {
			t.Errorf("turn %s stored twice", k)
		}
		pos[k] = i
	}
	for r := range repliers {
		for i := range each {
			id := fmt.Sprintf("r%02d-m%d", r, i)
			u, uok := pos[id+"/"+handler.RoleUser]
			a, aok := pos[id+"/"+handler.RoleAgent]
			if !uok || !aok || u > a {
				t.Errorf("%s: user turn at %d (%v), agent turn at %d (%v); want both, user first", id, u, uok, a, aok)
			}
		}
	}
	// The stream holds one message per pair: the redeliveries were
	// dropped by their Nats-Msg-Id, not only hidden by the read.
	if n := w.StreamMsgs(w.Obs.Topo.Memory); n != repliers*each {
		t.Errorf("the memory stream holds %d messages, want %d", n, repliers*each)
	}
}
