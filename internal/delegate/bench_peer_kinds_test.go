package delegate_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// BenchmarkDelegationByPeerKind asks b.N questions, one at a time, of
// each kind of peer on the platform double and reports how many were
// answered and the median time from the handler's Ask to the answer in
// its hands. The stand-ins read their feed every 20 ms (the real clients
// poll every 5 s: add that for a real peer); the relay peer and A poll on
// SSE wake-ups. Each kind runs on the 2026-05 and the 2026-08 platform.
//
//	go test ./internal/delegate -run '^$' -bench DelegationByPeerKind -benchtime 20x
func BenchmarkDelegationByPeerKind(b *testing.B) {
	type kind struct {
		name   string
		answer answerFunc
		want   func(string) string
	}
	kinds := []kind{{"relay", nil, func(q string) string { return "B: " + q }}, {"push agent", nil, func(q string) string { return "B: " + q }}}
	for _, k := range peerKinds {
		kinds = append(kinds, kind{k.name, k.answer, ansOf})
	}
	for _, gen := range []moleculetest.Generation{moleculetest.Gen2026_05, moleculetest.Gen2026_08} {
		for _, k := range kinds {
			b.Run(gen.String()+"/"+strings.ReplaceAll(k.name, " ", "_"), func(b *testing.B) {
				w := pipelinetest.New(b, pipelinetest.Options{Peers: 1, Platform: []moleculetest.Option{moleculetest.WithGeneration(gen)}})
				peer := w.Peers[0]
				switch k.name {
				case "relay":
					w.StartPeerRelay(0, peerAgent(make(chan string)))
				case "push agent":
					peer = w.Plat.CreateWorkspace("push-peer")
					url := pushAgentAnswering(b, make(chan string, b.N+1), func(q string) map[string]any {
						return map[string]any{"kind": "message", "role": "agent", "messageId": newID(), "parts": textPart("B: " + q)}
					})
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					if _, err := w.Client(peer).Register(ctx, molecule.RegisterRequest{Mode: molecule.DeliveryPush, URL: url}); err != nil {
						b.Fatal(err)
					}
				default:
					startStandIn(b, w, peer, k.answer)
				}
				procA := w.Proc()
				timed, asks := timedAsking(b, w, procA, peer.ID)
				pl := w.StartPipeline(pipelinetest.PipelineConfig{NoDispatcher: true, Poller: poller.Config{SSE: true}})
				defer pl.Stop(b)
				pipelinetest.Start(b, w.NewDispatcher(procA, timed, dispatcher.Config{}).Run)
				w.WaitSeeded(w.Agent.ID)
				b.ResetTimer()
				for i := range b.N {
					w.SendCanvas(fmt.Sprintf("%squestion %d", askPrefix, i))
					pipelinetest.Eventually(b, 30*time.Second, "the answer", func() bool { return len(notifies(w)) > i })
				}
				b.StopTimer()
				answered := 0
				for i, n := range notifies(w) {
					if n == fmt.Sprintf("peer says: %s", k.want(fmt.Sprintf("question %d", i))) {
						answered++
					} else {
						b.Logf("question %d answered %q", i, n)
					}
				}
				b.ReportMetric(float64(answered), "answered")
				b.ReportMetric(median(asks()).Seconds()*1000, "ask-ms-p50")
			})
		}
	}
}
