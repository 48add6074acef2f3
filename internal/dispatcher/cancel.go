package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A peer's tasks/cancel arrives as an activity row like any JSON-RPC
// method (enteros-core aeec8e47 a2a_proxy.go; docs/delegation.md,
// "Cancelling"). It is never handled as a message: the dispatcher that
// reads it writes a cancel mark in the asks bucket (events.CancelKey, by
// workspace, sender and task id) and acks it. Every dispatcher process
// watches those marks (watchCancels) and ends the context of a handler
// it runs for that sender's message whose taskId or messageId is the
// cancelled id; a handler about to start checks for a mark first, so a
// cancel that came before its message stops it from running at all.

// methodCancel is the A2A method of a cancel.
const methodCancel = "tasks/cancel"

// ackCancel is what the redelivery of a cancel whose ack was lost finds.
const ackCancel = "the cancel mark"

// errTaskCancelled is the cause of a handler context its sender cancelled.
var errTaskCancelled = errors.New("dispatcher: the sender cancelled the task (tasks/cancel)")

// cancelTarget is the task id a tasks/cancel row names: request_body's
// params.id (A2A TaskIdParams).
func cancelTarget(in *events.Inbound) (string, error) {
	var row struct {
		RequestBody struct {
			Params struct {
				ID string `json:"id"`
			} `json:"params"`
		} `json:"request_body"`
	}
	if err := json.Unmarshal(in.Raw, &row); err != nil {
		return "", fmt.Errorf("dispatcher: tasks/cancel %s unreadable: %w", in.ActivityID, err)
	}
	if row.RequestBody.Params.ID == "" {
		return "", fmt.Errorf("dispatcher: tasks/cancel %s names no task (params.id)", in.ActivityID)
	}
	return row.RequestBody.Params.ID, nil
}

// cancels settles a tasks/cancel row: its mark is written (create-only:
// a redelivery finds it) and the row acked, whether or not the task runs
// anywhere; a row that names no task is dead-lettered as malformed.
func (d *Dispatcher) cancels(next stage.Step[*message]) stage.Step[*message] {
	return func(runCtx context.Context, m *message) stage.Outcome {
		in := m.in
		if in.Method != methodCancel {
			return next(runCtx, m)
		}
		id, err := cancelTarget(in)
		if err != nil {
			return stage.DeadLetter(events.ReasonMalformed, err)
		}
		if d.topo.Asks == nil {
			m.Log.WarnContext(runCtx, "dispatcher: tasks/cancel acknowledged but not applied: no "+events.BucketAsks+" bucket", "task", id)
			return stage.Ack(ackCancel)
		}
		ctx, cancel := d.run.OpContext(runCtx)
		defer cancel()
		at, _ := json.Marshal(map[string]any{"activity": in.ActivityID, "at": time.Now().UTC()})
		_, err = d.topo.Asks.Create(ctx, events.CancelKey(in.WorkspaceID, senderOf(in), id), at)
		if err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			m.Log.WarnContext(ctx, "dispatcher: tasks/cancel mark not written; retrying later", "error", err)
			return stage.Retry(0)
		}
		d.stats.cancels.Add(1)
		m.Log.InfoContext(ctx, "dispatcher: tasks/cancel received; its task is stopped where it runs, and not run if it has not started",
			"task", id, "sender", in.SourceWorkspaceID)
		return stage.Ack(ackCancel)
	}
}

// senderOf is the sender token of a cancel mark: a peer's workspace id,
// "canvas" for a canvas user.
func senderOf(in *events.Inbound) string {
	if in.Source == events.SourcePeerAgent {
		return in.SourceWorkspaceID
	}
	return "canvas"
}

// cancelKeys are the marks that cancel in's task: by its taskId and by
// its messageId (a poll-mode sender never gets a task id from us, so the
// id it knows is the one it sent). Only a peer's message can be
// cancelled: the canvas sends no tasks/cancel we know of.
func cancelKeys(in *events.Inbound) []string {
	if in.Source != events.SourcePeerAgent {
		return nil
	}
	var keys []string
	for _, id := range []string{in.TaskID, in.MessageID} {
		if id != "" {
			keys = append(keys, events.CancelKey(in.WorkspaceID, in.SourceWorkspaceID, id))
		}
	}
	return keys
}

// cancelable is the handler runs of this process that a cancel mark can
// end, by mark key.
type cancelable struct {
	mu   sync.Mutex
	next uint64
	runs map[string]map[uint64]context.CancelCauseFunc
}

// add registers cancel under keys; remove undoes it.
func (r *cancelable) add(keys []string, cancel context.CancelCauseFunc) (remove func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs == nil {
		r.runs = map[string]map[uint64]context.CancelCauseFunc{}
	}
	r.next++
	id := r.next
	for _, k := range keys {
		if r.runs[k] == nil {
			r.runs[k] = map[uint64]context.CancelCauseFunc{}
		}
		r.runs[k][id] = cancel
	}
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, k := range keys {
			delete(r.runs[k], id)
			if len(r.runs[k]) == 0 {
				delete(r.runs, k)
			}
		}
	}
}

// fire ends every run registered under key.
func (r *cancelable) fire(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cancel := range r.runs[key] {
		cancel(errTaskCancelled)
	}
	return len(r.runs[key])
}

// cancellable makes hctx end when in's task is cancelled, and says
// whether it already is (a mark written before the handler started).
// done unregisters the run.
func (d *Dispatcher) cancellable(hctx context.Context, in *events.Inbound) (ctx context.Context, cancelled bool, done func(), err error) {
	keys := cancelKeys(in)
	if d.topo.Asks == nil || len(keys) == 0 {
		return hctx, false, func() {}, nil
	}
	ctx, cancel := context.WithCancelCause(hctx)
	// Registered before the marks are read: a mark written after the
	// read reaches the run through the watch.
	remove := d.cancelRuns.add(keys, cancel)
	done = func() { remove(); cancel(nil) }
	octx, ocancel := d.run.OpContext(hctx)
	defer ocancel()
	for _, k := range keys {
		_, err := d.topo.Asks.Get(octx, k)
		switch {
		case err == nil:
			return ctx, true, done, nil
		case !errors.Is(err, jetstream.ErrKeyNotFound):
			done()
			return hctx, false, func() {}, err
		}
	}
	return ctx, false, done, nil
}

// watchCancels ends this process's handler runs whose task a cancel mark
// names, as marks are written, until ctx ends; stop waits for the watch
// to end. Without the watch (no asks bucket, or it failed to start) a
// cancel still stops a message that has not started.
func (d *Dispatcher) watchCancels(ctx context.Context) (stop func()) {
	if d.topo.Asks == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	w, err := d.topo.Asks.Watch(ctx, events.CancelFilter, jetstream.UpdatesOnly())
	if err != nil {
		cancel()
		d.log.Warn("dispatcher: cancel marks not watched; a tasks/cancel stops only messages not started", "error", err)
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e != nil && e.Operation() == jetstream.KeyValuePut {
					if n := d.cancelRuns.fire(e.Key()); n > 0 {
						d.log.Info("dispatcher: handler run cancelled by its sender (tasks/cancel)", "runs", n)
					}
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}
