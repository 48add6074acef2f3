// The workspace's event stream (SSE): wake-ups and the stream's health.

package poller

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
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

// activityEvent is the part of an ACTIVITY_LOGGED event's data we read.
type activityEvent struct {
	ActivityType string `json:"activity_type"`
	Method       string `json:"method"`
}

// wakeOn reports whether an SSE event announces a row worth polling for now.
func wakeOn(ev molecule.Event) bool {
	if ev.Type != "ACTIVITY_LOGGED" {
		return false
	}
	var d activityEvent
	if json.Unmarshal(ev.Data, &d) != nil {
		return false
	}
	return d.ActivityType == activityType && d.Method != "notify" && d.Method != "chat_upload_receive"
}

// sseLoop holds the workspace's event stream and wakes the poll loop on an
// inbound ACTIVITY_LOGGED (bursts coalesce in the one-slot channel). It
// reconnects with exponential backoff; each connect costs one request of
// the rate budget, so it paces like a fetch.
func (p *Poller) sseLoop(ctx context.Context, w *workspace, l *pollLoop) {
	eb := backoff.NewExponentialBackOff()
	eb.InitialInterval = 250 * time.Millisecond
	eb.MaxInterval = 30 * time.Second
	eb.MaxElapsedTime = 0 // until ctx ends
	b := backoff.WithContext(eb, ctx)
	var state string // as recorded (eventstream.go)
	for {
		if err := p.pace(ctx, w); err != nil {
			return
		}
		connected := time.Now()
		if state != StreamReconnecting { // a reconnect is still reconnecting until an event
			state = StreamConnecting
			p.noteStream(ctx, w, state, connected, nil)
		}
		sctx, reopen := context.WithCancel(ctx)
		w.cad.streamOpening(connected, reopen)
		err := w.c.StreamEvents(sctx, func(ev molecule.Event) {
			now := time.Now()
			w.cad.noteEvent(now)
			// After the wake-up below; no write unless the state changed
			// or StatusRefresh passed.
			defer func() { state = StreamConnected; p.noteStream(ctx, w, state, now, nil) }()
			switch ev.Type {
			case sessionResetEvent:
				p.resetSession(ctx, w) // before the new session's first message
				return
			case broadcastEvent:
				// Not a message to this workspace: the cadence stays, the
				// next cycle reads the broadcasts (broadcast.go).
				w.broadcastTexts.note(ev.Data, now)
				w.broadcastAsked.Store(true)
				l.wake()
				return
			}
			// A wake-up already pending covers this event: skip its parse.
			if l.wakePending() {
				return
			}
			// A removal is acted on at once too: the cycle's state read then
			// meets the dead token's 401 and stops the workspace, rather
			// than the next safety-net poll doing so minutes later.
			if wakeOn(ev) || ev.Type == "WORKSPACE_REMOVED" {
				w.cad.noteActivity(now)
				l.wakeByEvent()
			}
		})
		w.cad.streamClosed()
		silent := sctx.Err() != nil
		reopen()
		if ctx.Err() != nil {
			return
		}
		if silent {
			err = errors.New("the stream delivered nothing since a heartbeat the platform echoes; reopened")
		}
		state = StreamReconnecting
		p.noteStream(ctx, w, state, time.Now(), err)
		// A connection that lived a while was healthy: start over.
		if time.Since(connected) > time.Minute {
			b.Reset()
		}
		d := b.NextBackOff()
		if d == backoff.Stop {
			return
		}
		w.log.DebugContext(ctx, "poller: event stream ended; reconnecting", "error", err, "wait", d)
		// Polls continue on the timer meanwhile, every poll interval (the
		// stream is not healthy); poll once now in case it missed an event.
		l.wake()
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
