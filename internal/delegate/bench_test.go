package delegate_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// BenchmarkDelegationRoundTrip measures an awaited delegation between two
// relays on the platform double (loopback, each relay its own NATS): the
// time from A's handler calling Ask to the answer in its hands (B's poller
// fetching the question, B's handler, B's replier posting the answer, A's
// poller fetching it, A's dispatcher routing it, A's watch), and the time
// from the canvas message to A's final answer at the platform. One
// question at a time; it reports the medians.
//
//	go test ./internal/delegate -run '^$' -bench DelegationRoundTrip -benchtime 20x -count 3
func BenchmarkDelegationRoundTrip(b *testing.B) {
	w := pipelinetest.New(b, pipelinetest.Options{Peers: 1})
	peer := w.Peers[0]
	w.StartPeerRelay(0, peerAgent(make(chan string)))
	procA := w.Proc()
	timed, asks := timedAsking(b, w, procA, peer.ID)
	// Both pollers poll at once on the platform's SSE wake-up, as
	// `molecule-relay connect` does (MOLECULE_SSE).
	pl := w.StartPipeline(pipelinetest.PipelineConfig{NoDispatcher: true, Poller: poller.Config{SSE: true}})
	defer pl.Stop(b)
	pipelinetest.Start(b, w.NewDispatcher(procA, timed, dispatcher.Config{}).Run)
	w.WaitSeeded(w.Agent.ID)

	var trips []time.Duration
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		w.SendCanvas(fmt.Sprintf("%squestion %d", askPrefix, i))
		pipelinetest.Eventually(b, 20*time.Second, "the answer", func() bool { return len(notifies(w)) > i })
		trips = append(trips, time.Since(start))
	}
	b.StopTimer()
	if got := notifies(w); got[len(got)-1] != fmt.Sprintf("peer says: B: question %d", b.N-1) {
		b.Fatalf("last answer %q", got[len(got)-1])
	}
	b.ReportMetric(median(asks()).Seconds()*1000, "ask-ms-p50")
	b.ReportMetric(median(trips).Seconds()*1000, "canvas-ms-p50")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
