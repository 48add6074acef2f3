package moleculetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// maxAgentResponse caps a push agent's answer, as the platform does.
const maxAgentResponse = 10 << 20

// maxProxyRequestBody is the 2026-08 platform's cap on an /a2a request
// body (enteros-core aeec8e47 handlers/a2a_proxy.go:81).
const maxProxyRequestBody = 16 << 20

func (s *Server) handleA2A(w http.ResponseWriter, r *http.Request, id string, body []byte) {
	if s.gen >= Gen2026_08 {
		s.handleA2A08(w, r, id, body)
		return
	}
	xwid := r.Header.Get("X-Workspace-ID")
	for _, p := range []string{"webhook:", "system:", "test:", "channel:"} {
		if strings.HasPrefix(xwid, p) {
			writeError(w, http.StatusForbidden, "invalid caller ID")
			return
		}
	}
	tok := bearer(r)

	s.mu.RLock()
	target := s.workspaces[id]
	source := ""
	if xwid != "" {
		if xwid != id {
			cw := s.workspaces[xwid]
			if cw != nil && (cw.liveTokens > 0 || cw.removed) {
				if tok == "" {
					s.mu.RUnlock()
					writeError(w, http.StatusUnauthorized, "missing caller auth token")
					return
				}
				if !s.validLocked(tok, cw) {
					s.mu.RUnlock()
					writeError(w, http.StatusUnauthorized, "invalid caller auth token")
					return
				}
			}
			if target != nil && !s.canCommunicateLocked(cw, target) {
				s.mu.RUnlock()
				writeError(w, http.StatusForbidden, "access denied: workspaces cannot communicate per hierarchy rules")
				return
			}
		}
		source = xwid
	} else if s.gen >= Gen2026_05 && tok != "" {
		// #2306: without X-Workspace-ID the caller is derived from the bearer.
		if owner := s.ownerLocked(tok); owner != nil {
			source = owner.id
		}
	}
	if target == nil {
		s.mu.RUnlock()
		writeError(w, http.StatusNotFound, "workspace not found")
		return
	}
	name, mode, agentURL, status := target.name, target.deliveryMode, target.url, target.status
	idle := target.idleTimeout
	f := target.feed
	s.mu.RUnlock()

	m, err := decodeObject(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid JSON")
		return
	}
	m, method := normalizeA2A(m)
	s.deliver(w, r, a2aCall{id: id, name: name, source: source, mode: mode, agentURL: agentURL, status: status, idle: idle, f: f, m: m, method: method})
}

// a2aCall is an /a2a request that passed the caller checks.
type a2aCall struct {
	id, name, source, mode, agentURL, status, method string
	idle                                             time.Duration
	f                                                *feed
	m                                                map[string]any
}

// deliver queues c for a poll-mode target or pushes it to a push one.
func (s *Server) deliver(w http.ResponseWriter, r *http.Request, c a2aCall) {
	id, name, source, mode, agentURL, status, idle, f, m, method := c.id, c.name, c.source, c.mode, c.agentURL, c.status, c.idle, c.f, c.m, c.method
	msgID := s.upsertKey(m, method)
	if s.gen >= Gen2026_05 && mode == "poll" {
		rb := appendJSON(nil, m, orderJSONB)
		rw := &row{
			id: newUUID(), workspaceID: id, activityType: "a2a_receive",
			sourceID: source, targetID: id, method: method,
			summary: method + " → " + name + " (queued for poll)", requestBody: rb, status: "ok", messageID: msgID,
		}
		if msgID != "" {
			// The ingest row is the one written (a2a_proxy.go:838-840); the
			// queued write only updates it (a2a_proxy_helpers.go:1355).
			rw.summary = method + " → " + name + " (ingest)"
		}
		s.commitQueued(f, rw)
		s.recordA2A(id, source, rb, http.StatusOK)
		writeJSON(w, http.StatusOK, map[string]string{"delivery_mode": "poll", "method": method, "status": "queued"})
		return
	}
	// X-Timeout (seconds) replaces the absolute ceiling of the dispatch;
	// the double's one dispatch timeout is the shorter of the two.
	if secs, err := strconv.Atoi(r.Header.Get("X-Timeout")); err == nil && secs > 0 {
		if xt := time.Duration(secs) * time.Second; idle <= 0 && xt < s.pushTimeout || idle > 0 && xt < idle {
			idle = xt
		}
	}
	if msgID != "" {
		// The ingest row, before the dispatch (a2a_proxy.go:838-840); the
		// outcome is merged into it (logPushed, errorRow).
		rw := &row{id: newUUID(), workspaceID: id, activityType: "a2a_receive", sourceID: source, targetID: id,
			method: method, summary: method + " → " + name + " (ingest)", requestBody: appendJSON(nil, m, s.bodyOrder()),
			status: "ok", messageID: msgID}
		s.commitMessageRow(f, rw)
	}
	s.push(w, id, name, source, agentURL, status, idle, f, m, method)
}

// upsertKey is the messageId that keys a request's row on 2026-08: a
// message/send's params.message.messageId (persistUserMessageAtIngest,
// a2a_proxy_helpers.go:1422; system callers are refused above). "" before
// 2026-08 and for other methods: every write inserts a row.
func (s *Server) upsertKey(m map[string]any, method string) string {
	if s.gen < Gen2026_08 || method != "message/send" {
		return ""
	}
	return messageID(m)
}

// commitMessageRow writes rw (writeMessageRow) and announces it.
func (s *Server) commitMessageRow(f *feed, rw *row) {
	s.writeMessageRow(f, rw)
	s.publish(rw.workspaceID, "ACTIVITY_LOGGED", s.activityEvent(rw))
}

// writeMessageRow merges rw into the row of its messageId, or commits it
// as a new row.
func (s *Server) writeMessageRow(f *feed, rw *row) {
	if _, ok := f.merge(rw, s.encodeRow); !ok {
		f.commit(rw, s.encodeRow)
	}
}

func (s *Server) recordA2A(to, caller string, body []byte, status int) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	s.a2aCalls[to] = append(s.a2aCalls[to], A2ACall{To: to, CallerID: caller, Body: json.RawMessage(body), Status: status, At: time.Now()})
}

// commitQueued writes a poll-queued row: at once, after an async delay
// (WithAsyncRows), or late (WithLateCommit: created_at now, visible after
// the lag). ACTIVITY_LOGGED is published once the row is visible.
func (s *Server) commitQueued(f *feed, rw *row) {
	if _, ok := f.merge(rw, s.encodeRow); ok {
		s.publish(rw.workspaceID, "ACTIVITY_LOGGED", s.activityEvent(rw))
		return
	}
	late, delay := false, time.Duration(0)
	if s.lateFraction > 0 || s.asyncRows > 0 {
		s.randMu.Lock()
		s.queuedN++
		n := float64(s.queuedN)
		late = s.lateFraction > 0 && math.Floor(n*s.lateFraction) > math.Floor((n-1)*s.lateFraction)
		if !late && s.asyncRows > 0 {
			delay = time.Duration(s.rand.Int64N(int64(s.asyncRows) + 1))
		}
		s.randMu.Unlock()
	}
	switch {
	case late:
		f.reserve(rw, s.encodeRow)
		s.after(s.lateLag, func() {
			if f.publish(rw) {
				s.publish(rw.workspaceID, "ACTIVITY_LOGGED", s.activityEvent(rw))
			}
		})
	case delay > 0:
		s.after(delay, func() {
			f.commit(rw, s.encodeRow)
			s.publish(rw.workspaceID, "ACTIVITY_LOGGED", s.activityEvent(rw))
		})
	default:
		f.commit(rw, s.encodeRow)
		s.publish(rw.workspaceID, "ACTIVITY_LOGGED", s.activityEvent(rw))
	}
}

// after runs fn after d unless the server closes first.
func (s *Server) after(d time.Duration, fn func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			fn()
		case <-s.ctx.Done():
		}
	}()
}

// pushCall is one delivery of a request to a push-mode target.
type pushCall struct {
	id, name, source, method string
	msgID                    string // the upsert key (2026-08), "" for none
	f                        *feed
	agentURL                 string
	fwd, logged              []byte // the body as forwarded, as logged
}

// push delivers a normalised request to a push-mode (or OLD) target's URL
// and relays the outcome (docs/protocol.md §6).
func (s *Server) push(w http.ResponseWriter, id, name, source, agentURL, status string, idle time.Duration, f *feed, m map[string]any, method string) {
	c := pushCall{id: id, name: name, source: source, method: method, msgID: s.upsertKey(m, method), f: f, agentURL: agentURL,
		fwd: appendJSON(nil, m, orderSorted), logged: appendJSON(nil, m, s.bodyOrder())}
	if agentURL == "" && s.gen >= Gen2026_08 && (status == "provisioning" || status == "awaiting_agent") {
		// 2026-08 queues a turn for a target still settling instead of
		// dropping it (enteros-core aeec8e47 handlers/a2a_proxy.go:933-948,
		// a2a_proxy_helpers.go:487-515).
		qid, depth := s.enqueue(id, messageID(m))
		writeJSON(w, http.StatusAccepted, map[string]any{
			"queued": true, "queue_id": qid, "queue_depth": depth,
			"message": "workspace agent busy — request queued, will dispatch when capacity available",
		})
		s.recordA2A(id, source, c.fwd, http.StatusAccepted)
		return
	}
	if agentURL == "" {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "workspace has no URL", "status": status})
		s.recordA2A(id, source, c.fwd, http.StatusServiceUnavailable)
		return
	}
	if !strings.HasPrefix(agentURL, "http://") && !strings.HasPrefix(agentURL, "https://") {
		writeError(w, http.StatusBadGateway, "workspace URL is not publicly routable")
		s.recordA2A(id, source, c.fwd, http.StatusBadGateway)
		return
	}
	timeout := s.pushTimeout
	if idle > 0 {
		timeout = idle
	}
	ctx, cancel := context.WithTimeout(s.ctx, timeout)
	defer cancel()
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, agentURL, bytes.NewReader(c.fwd))
	if err != nil {
		writeError(w, http.StatusBadGateway, "failed to reach workspace agent")
		s.recordA2A(id, source, c.fwd, http.StatusBadGateway)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.pushClient.Do(req)
	var respBody []byte
	if err == nil {
		respBody, err = io.ReadAll(io.LimitReader(resp.Body, maxAgentResponse))
		resp.Body.Close()
		if err != nil && !isQueueable(ctx, err) {
			s.errorRow(c, start, err.Error())
			writeJSON(w, http.StatusBadGateway, map[string]any{"error": "failed to read agent response", "delivery_confirmed": false})
			s.recordA2A(id, source, c.fwd, http.StatusBadGateway)
			return
		}
	}
	if err != nil {
		s.pushFailed(ctx, w, c, m, start, err)
		return
	}
	s.logPushed(c, resp.StatusCode, respBody, start)
	relayAgentAnswer(w, resp, respBody)
}

// pushFailed answers a push the agent did not answer: queued (202) on a
// timeout, cancel, EOF or reset, else 502; both with an error row.
func (s *Server) pushFailed(ctx context.Context, w http.ResponseWriter, c pushCall, m map[string]any, start time.Time, err error) {
	if !isQueueable(ctx, err) {
		s.errorRow(c, start, err.Error())
		writeError(w, http.StatusBadGateway, "failed to reach workspace agent")
		s.recordA2A(c.id, c.source, c.fwd, http.StatusBadGateway)
		return
	}
	// The platform's dispatch context is cancelled on its idle timeout, so
	// the row reads "context canceled".
	detail := err.Error()
	if errors.Is(err, context.DeadlineExceeded) {
		detail = "Post " + strconv.Quote(c.agentURL) + ": " + context.Canceled.Error()
	}
	s.errorRow(c, start, detail)
	qid, depth := s.enqueue(c.id, messageID(m))
	writeJSON(w, http.StatusAccepted, map[string]any{
		"queued": true, "queue_id": qid, "queue_depth": depth,
		"message": "workspace agent busy — request queued, will dispatch when capacity available",
	})
	s.recordA2A(c.id, c.source, c.fwd, http.StatusAccepted)
}

// logPushed writes the a2a_receive row of an answered push and announces it.
func (s *Server) logPushed(c pushCall, code int, respBody []byte, start time.Time) {
	dur := int(time.Since(start).Milliseconds())
	rw := &row{
		id: newUUID(), workspaceID: c.id, activityType: "a2a_receive", sourceID: c.source, targetID: c.id,
		method: c.method, summary: c.method + " → " + c.name, requestBody: c.logged,
		durationMS: dur, hasDuration: true, status: "ok", messageID: c.msgID,
	}
	if v, err := decodeAny(respBody); err == nil {
		rw.responseBody = appendJSON(nil, v, s.bodyOrder())
	} else {
		rw.responseBody = quoteJSON(nil, string(respBody))
	}
	if code >= 300 {
		rw.status = "error"
		rw.errorDetail = fmt.Sprintf("agent returned HTTP %d", code)
	}
	s.writeMessageRow(c.f, rw)
	if c.source == "" {
		s.publish(c.id, "A2A_RESPONSE", map[string]any{"response_body": json.RawMessage(rw.responseBody), "method": c.method, "duration_ms": dur})
	}
	s.publish(c.id, "ACTIVITY_LOGGED", s.activityEvent(rw))
	s.recordA2A(c.id, c.source, c.fwd, code)
}

// relayAgentAnswer hands the agent's answer to the caller: as it is, or a
// 3xx or higher as {"error": <the agent's error or the status text>}.
func relayAgentAnswer(w http.ResponseWriter, resp *http.Response, respBody []byte) {
	if resp.StatusCode >= 300 {
		msg := http.StatusText(resp.StatusCode)
		var e struct {
			Error any `json:"error"`
		}
		if json.Unmarshal(respBody, &e) == nil {
			switch v := e.Error.(type) {
			case string:
				msg = v
			case map[string]any:
				if s, ok := v["message"].(string); ok {
					msg = s
				}
			}
		}
		writeError(w, resp.StatusCode, msg)
		return
	}
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = "application/json"
	}
	w.Header().Set("Content-Type", ct)
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
}

// isQueueable: timeout, cancel, EOF or reset queue the request (202);
// anything else is a 502.
func isQueueable(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
}

func (s *Server) errorRow(c pushCall, start time.Time, detail string) {
	rw := &row{
		id: newUUID(), workspaceID: c.id, activityType: "a2a_receive", sourceID: c.source, targetID: c.id,
		method: c.method, summary: "A2A request to " + c.name + " failed: " + detail, requestBody: c.logged,
		durationMS: int(time.Since(start).Milliseconds()), hasDuration: true, status: "error", errorDetail: detail,
		messageID: c.msgID,
	}
	s.commitMessageRow(c.f, rw)
}

// enqueue adds to the target's a2a_queue, idempotent on messageId.
func (s *Server) enqueue(id, msgID string) (string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ws := s.workspaces[id]
	if ws == nil {
		return newUUID(), 1
	}
	if msgID == "" {
		msgID = newUUID()
	}
	qid, ok := ws.queue[msgID]
	if !ok {
		qid = newUUID()
		ws.queue[msgID] = qid
	}
	return qid, len(ws.queue)
}
