package dispatcher

import (
	"context"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// The milestone lines of one message (stage.Config.LogMessages: info, else
// debug): what an operator follows a message by. They carry ids, kinds and
// sizes, never the text (the message logger holds workspace, activity and
// delivery).

// logReceived says a delivery reached the dispatcher.
func (d *Dispatcher) logReceived(ctx context.Context, m *message) {
	m.received = time.Now()
	in := m.in
	m.Log.Log(ctx, d.cfg.MessageLevel(), "dispatcher: message received", "from", in.Source, "kind", kindOf(in),
		"text_bytes", len(in.Text), "attachments", len(in.Attachments))
}

// logHandled says a message is handled: its outcome, how long its handler
// ran and the dispatcher took, and the answer's size.
func (d *Dispatcher) logHandled(ctx context.Context, m *message, rec events.HandledRecord, a handler.Answer) {
	m.Log.Log(ctx, d.cfg.MessageLevel(), "dispatcher: message handled", "outcome", rec.Outcome,
		"handler_ms", m.handlerTook.Milliseconds(), "took_ms", time.Since(m.received).Milliseconds(),
		"reply_bytes", len(a.Text), "reply_attachments", len(a.Attachments))
}

// kindOf names what in is, for the log.
func kindOf(in *events.Inbound) string {
	switch {
	case in.Kind != "":
		return in.Kind
	case in.Cron:
		return "cron"
	}
	return "message"
}

// watchSlow logs m's handler every LogSlowHandler while it runs, until
// the returned stop: a hung handler is seen long before its timeout.
func (d *Dispatcher) watchSlow(m *message) (stop func()) {
	every := d.cfg.LogSlowHandler
	if every <= 0 {
		return func() {}
	}
	start := time.Now()
	var (
		mu      sync.Mutex
		stopped bool
		t       *time.Timer
	)
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(every, func() {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		m.Log.Info("dispatcher: handler still running", "running_for", time.Since(start).Round(time.Second).String(),
			"timeout", d.cfg.HandlerTimeout.String())
		t.Reset(every)
	})
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		t.Stop()
	}
}
