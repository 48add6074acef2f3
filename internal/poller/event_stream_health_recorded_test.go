package poller_test

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// The status record says how each workspace's event stream is: a stream
// the platform refuses is reconnecting, with why; the next one, proven by
// the platform's echo of a heartbeat, is connected, since when, with its
// last event's time. Without the event stream it says disabled.
func TestEventStreamHealthRecorded(t *testing.T) {
	t.Run("refused, then connected", func(t *testing.T) {
		e := newEnv(t, moleculetest.WithRateLimit(0, 0))
		e.plat.InjectFault(moleculetest.Fault{Method: "GET", PathPrefix: "/workspaces/" + e.ws.ID + "/events/stream", Status: 503, Body: `{"error":"unavailable"}`, Count: 1})
		seen := watchStreamStates(t, e)
		start := time.Now()
		run(t, e.poller(poller.Config{SSE: true, PollInterval: 50 * time.Millisecond, HeartbeatInterval: 200 * time.Millisecond}))
		var st poller.WorkspaceStatus
		waitFor(t, 15*time.Second, "the stream recorded connected", func() bool {
			all, err := poller.ReadStatus(ctx(t), e.topo, e.ws.ID)
			st = all[0]
			return err == nil && st.EventStream == poller.StreamConnected
		})
		if st.EventStreamSince.Before(start) || st.LastEventAt.Before(st.EventStreamSince) || st.EventStreamError != "" {
			t.Errorf("connected: since %s, last event %s, error %q; want both after the start, no error", st.EventStreamSince, st.LastEventAt, st.EventStreamError)
		}
		states := seen()
		if len(states) < 3 || states[0] != poller.StreamConnecting || !strings.HasPrefix(states[1], poller.StreamReconnecting+": ") || !strings.Contains(states[1], "503") {
			t.Errorf("states recorded: %q, want connecting, reconnecting with the platform's refusal, then connected", states)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		e := newEnv(t, moleculetest.WithRateLimit(0, 0))
		run(t, e.poller(poller.Config{PollInterval: 50 * time.Millisecond}))
		waitFor(t, 10*time.Second, "the stream recorded disabled", func() bool {
			all, err := poller.ReadStatus(ctx(t), e.topo, e.ws.ID)
			return err == nil && all[0].EventStream == poller.StreamDisabled && !all[0].EventStreamSince.IsZero()
		})
	})
}

// watchStreamStates records each event-stream state the status record of
// e's workspace takes ("state: error" when it has one), in order.
func watchStreamStates(t *testing.T, e *env) func() []string {
	t.Helper()
	w, err := e.topo.Status.Watch(ctx(t), e.ws.ID, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
	var mu sync.Mutex
	var states []string
	go func() {
		for en := range w.Updates() {
			var r struct {
				State string `json:"event_stream"`
				Error string `json:"event_stream_error"`
			}
			if en == nil || json.Unmarshal(en.Value(), &r) != nil || r.State == "" {
				continue
			}
			s := r.State
			if r.Error != "" {
				s += ": " + r.Error
			}
			mu.Lock()
			if len(states) == 0 || states[len(states)-1] != s {
				states = append(states, s)
			}
			mu.Unlock()
		}
	}()
	return func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), states...) }
}
