package console

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
)

type flowView struct {
	Messages []Message `json:"messages"`
	Stats    Stats     `json:"stats"`
}

func (c *Console) flowSnapshot(*http.Request) (any, error) {
	msgs, st := c.flow.snapshot()
	return flowView{Messages: msgs, Stats: st}, nil
}

// statsEvery is how often a watching page is sent the flow's stats;
// after a change, within statsSoon.
const (
	statsEvery = time.Second
	statsSoon  = 200 * time.Millisecond
)

// flowStream sends the page each changed message as a server-sent event
// ("message"), and the stats ("stats") every statsEvery, or statsSoon
// after a change.
func (c *Console) flowStream(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "console: streaming unsupported", http.StatusInternalServerError)
		return
	}
	ch, cancel, err := c.flow.watch()
	if err != nil {
		http.Error(w, "console: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	defer cancel()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": watching\n\n")
	fl.Flush()
	tick := time.NewTicker(statsSoon)
	defer tick.Stop()
	var changed bool
	var sent time.Time
	for {
		select {
		case <-r.Context().Done():
			return
		case data, ok := <-ch:
			if !ok {
				return
			}
			fmt.Fprintf(w, "event: message\ndata: %s\n\n", data)
			fl.Flush()
			changed = true
		case now := <-tick.C:
			if !changed && now.Sub(sent) < statsEvery {
				continue
			}
			changed, sent = false, now
			_, st := c.flow.snapshot()
			b, _ := jsonOf(st)
			fmt.Fprintf(w, "event: stats\ndata: %s\n\n", b)
			fl.Flush()
		}
	}
}

// timelineView is a message's timeline and its dead letters, without
// bodies.
type timelineView struct {
	Message     Message     `json:"message"`
	DeadLetters []dlq.Entry `json:"dead_letters"`
}

func (c *Console) timeline(r *http.Request) (any, error) {
	ws, act := r.PathValue("workspace"), r.PathValue("activity")
	m, ok := c.flow.get(ws, act)
	if !ok {
		return nil, httpError{http.StatusNotFound, errors.New("console: the flow holds no such message (it keeps the recent ones, read back from the streams and records when a page opens)")}
	}
	v := timelineView{Message: m, DeadLetters: []dlq.Entry{}}
	entries, err := dlq.List(r.Context(), c.js, dlq.Filter{WorkspaceID: ws})
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.DeadLetter != nil && e.DeadLetter.ActivityID == act {
			v.DeadLetters = append(v.DeadLetters, e.Redacted())
		}
	}
	return v, nil
}

type revealed struct {
	Text  string `json:"text"`
	Reply string `json:"reply,omitempty"`
}

func (c *Console) revealFlow(r *http.Request) (any, error) {
	ws, act := r.PathValue("workspace"), r.PathValue("activity")
	m, ok := c.flow.get(ws, act)
	if !ok {
		return nil, httpError{http.StatusNotFound, errors.New("console: the flow holds no such message")}
	}
	c.logReveal(r, "flow message", "workspace", ws, "activity", act)
	return revealed{Text: m.text, Reply: m.reply}, nil
}

// logReveal records that an operator revealed a body: what, never the
// body itself.
func (c *Console) logReveal(r *http.Request, what string, attrs ...any) {
	c.log.InfoContext(r.Context(), "console: message body revealed", append([]any{"what", what, "remote", r.RemoteAddr}, attrs...)...)
}
