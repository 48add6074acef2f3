package moleculetest

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// sseBuffer is the platform's per-subscriber buffer; events beyond it are
// dropped.
const sseBuffer = 64

type subscriber struct {
	ch   chan []byte
	done chan struct{}
}

// bus is the in-process broadcaster: per-workspace subscribers, non-blocking
// sends.
type bus struct {
	mu     sync.RWMutex
	subs   map[string]map[*subscriber]struct{}
	closed bool
	// muted workspaces' events are dropped (MuteEvents).
	muted map[string]bool
}

// MuteEvents drops (muted) or delivers again (!muted) every event of
// workspace id to its open and future event streams, which stay open: a
// stream that went silent (a dead path, a buffering proxy), or, for a
// moment, events the platform dropped.
func (s *Server) MuteEvents(id string, muted bool) {
	s.bus.mu.Lock()
	defer s.bus.mu.Unlock()
	if s.bus.muted == nil {
		s.bus.muted = map[string]bool{}
	}
	if muted {
		s.bus.muted[id] = true
	} else {
		delete(s.bus.muted, id)
	}
}

func (b *bus) subscribe(id string) *subscriber {
	sub := &subscriber{ch: make(chan []byte, sseBuffer), done: make(chan struct{})}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		close(sub.done)
		return sub
	}
	m := b.subs[id]
	if m == nil {
		m = map[*subscriber]struct{}{}
		b.subs[id] = m
	}
	m[sub] = struct{}{}
	return sub
}

func (b *bus) unsubscribe(id string, sub *subscriber) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if m := b.subs[id]; m != nil {
		delete(m, sub)
		if len(m) == 0 {
			delete(b.subs, id)
		}
	}
}

func (b *bus) closeAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	for _, m := range b.subs {
		for sub := range m {
			close(sub.done)
		}
	}
	b.subs = map[string]map[*subscriber]struct{}{}
}

func (b *bus) has(id string) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.subs[id]) > 0 && !b.muted[id]
}

// publish broadcasts an event to workspace id's SSE subscribers. data is
// a map (keys come out sorted, as on the platform) or pre-encoded JSON.
func (s *Server) publish(id, typ string, data any) {
	if !s.bus.has(id) {
		return
	}
	var raw []byte
	switch d := data.(type) {
	case []byte:
		raw = d
	default:
		raw, _ = json.Marshal(d)
	}
	frame := make([]byte, 0, len(raw)+80)
	frame = append(frame, `data: {"type":`...)
	frame = quoteJSON(frame, typ)
	frame = append(frame, `,"timestamp":`...)
	frame = strconv.AppendInt(frame, time.Now().UnixMilli(), 10)
	frame = append(frame, `,"data":`...)
	frame = append(frame, raw...)
	frame = append(frame, "}\n\n"...)

	s.bus.mu.RLock()
	defer s.bus.mu.RUnlock()
	if s.bus.muted[id] {
		return
	}
	for sub := range s.bus.subs[id] {
		select {
		case sub.ch <- frame:
		default: // full: dropped, as on the platform
		}
	}
}

// activityEvent is the ACTIVITY_LOGGED data of a row.
func (s *Server) activityEvent(r *row) []byte {
	b := make([]byte, 0, 200+len(r.requestBody)+len(r.responseBody))
	b = append(b, `{"activity_type":`...)
	b = quoteJSON(b, r.activityType)
	b = append(b, `,"duration_ms":`...)
	b = appendDuration(b, r)
	b = append(b, `,"method":`...)
	b = appendMethod(b, r)
	if s.gen >= Gen2026_05 {
		b = appendBodies(b, r)
	}
	b = append(b, `,"source_id":`...)
	b = appendNullString(b, r.sourceID)
	b = append(b, `,"status":`...)
	b = quoteJSON(b, r.status)
	b = append(b, `,"summary":`...)
	b = quoteJSON(b, r.summary)
	b = append(b, `,"target_id":`...)
	b = appendNullString(b, r.targetID)
	return append(b, '}')
}

func (s *Server) handleSSE(w http.ResponseWriter, r *http.Request, id string) {
	s.mu.RLock()
	exists := s.workspaces[id] != nil
	s.mu.RUnlock()
	if !exists {
		writeError(w, http.StatusNotFound, "workspace not found")
		return
	}
	sub := s.bus.subscribe(id)
	defer s.bus.unsubscribe(id, sub)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if _, err := io.WriteString(w, ": ping\n\n"); err != nil {
		return
	}
	_ = rc.Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-sub.done:
			return
		case <-s.ctx.Done():
			return
		case f := <-sub.ch:
			if _, err := w.Write(f); err != nil {
				return
			}
			// Write whatever else is buffered before one flush.
			for more := true; more; {
				select {
				case f := <-sub.ch:
					if _, err := w.Write(f); err != nil {
						return
					}
				default:
					more = false
				}
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
}
