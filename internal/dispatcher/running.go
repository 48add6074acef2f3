package dispatcher

import (
	"strconv"
	"sync"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// running counts the handlers running for each workspace, for the
// heartbeat's active_tasks and current_task (docs/protocol.md, "What the
// heartbeat says").
type running struct {
	mu sync.Mutex
	by map[string][]*events.Inbound // workspace → its messages being handled, oldest first
}

// start records in's handler as running until the returned end is called.
func (r *running) start(in *events.Inbound) (end func()) {
	r.mu.Lock()
	if r.by == nil {
		r.by = map[string][]*events.Inbound{}
	}
	r.by[in.WorkspaceID] = append(r.by[in.WorkspaceID], in)
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		list := r.by[in.WorkspaceID]
		for i, m := range list {
			if m == in {
				list = append(list[:i:i], list[i+1:]...)
				break
			}
		}
		if len(list) == 0 {
			delete(r.by, in.WorkspaceID)
		} else {
			r.by[in.WorkspaceID] = list
		}
	}
}

// Running reports how many handlers run for workspace ws in this process
// and a short description of what they do, for the heartbeat: who the
// message is from, never what it says ("" when none runs). known is
// always true: the poller's heartbeat asks it as a poller.Tasks.
func (d *Dispatcher) Running(ws string) (n int, current string, known bool) {
	d.running.mu.Lock()
	defer d.running.mu.Unlock()
	list := d.running.by[ws]
	switch len(list) {
	case 0:
		return 0, "", true
	case 1:
		return 1, taskOf(list[0]), true
	}
	return len(list), "answering " + strconv.Itoa(len(list)) + " messages", true
}

// taskOf describes the handling of one message by its sender.
func taskOf(in *events.Inbound) string {
	switch {
	case in.Kind == events.KindBroadcast:
		return "reading a broadcast"
	case in.Source == events.SourcePeerAgent:
		return "answering a peer agent"
	case in.Cron:
		return "running a scheduled task"
	}
	return "answering a canvas message"
}
