package poller

import (
	"context"
	"time"
)

// Event-stream health, as the status record keeps it for the console's
// overview and the status command (issue 40). The state changes when a
// stream opens, proves itself with its first event, or ends, which is
// rare (a reconnect waits 250 ms doubling up to 30 s), so it is written at
// once; the last event's time moves with every event (every heartbeat's
// echo) and is refreshed like the last poll, every StatusRefresh.

// States of Config.SSE's event stream in WorkspaceStatus.EventStream.
const (
	// StreamDisabled: the poller holds no event stream for the workspace
	// (Config.SSE off, or a push workspace): it polls every PollInterval.
	StreamDisabled = "disabled"
	// StreamConnecting: a stream was asked for and has delivered no event
	// yet (the platform echoes every heartbeat, so a healthy one does
	// within a heartbeat).
	StreamConnecting = "connecting"
	// StreamConnected: the current stream delivered an event.
	StreamConnected = "connected"
	// StreamReconnecting: the stream ended (or could not be opened) and
	// the poller opens another after a backoff; EventStreamError says why.
	StreamReconnecting = "reconnecting"
)

// noteStream records w's stream state from at (and why, for
// StreamReconnecting); a state it already has keeps its start. A failed
// write is left to the next change or refresh: the stream goes on.
func (p *Poller) noteStream(ctx context.Context, w *workspace, state string, at time.Time, why error) {
	_, err := p.updateStatus(ctx, w.id, func(r *statusRecord) {
		if r.EventStream != state {
			r.EventStream, r.EventStreamSince = state, at.UTC()
		}
		r.EventStreamError = ""
		if why != nil {
			r.EventStreamError = why.Error()
		}
		if state == StreamConnected && at.After(r.LastEventAt) {
			r.LastEventAt = at.UTC()
		}
	})
	if err != nil && ctx.Err() == nil {
		w.log.DebugContext(ctx, "poller: could not record the event stream's state", "state", state, "error", err)
	}
}
