package relay

import (
	"context"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// otherPollerWait bounds the question to the other processes on this
// NATS. Only a reply that looks like a second relay's asks it, and with
// no other process (only this one's own subscription listens) it waits
// all of it, once per workspace: the warning follows.
const otherPollerWait = 500 * time.Millisecond

// Two relay processes on one NATS without MOLECULE_POLLER_GROUP both poll
// a workspace they share, but one inbound stream, one dispatcher consumer
// and one reply consumer answer each message once, posted by either
// process's replier. A reply on the feed that this process's ledger does
// not hold is then no second relay's: the poller asks on this NATS
// (otherPoller) before it warns of one, and each process with a ledger
// answers for the workspaces it polls (answerPollerQuestions).

// answerPollerQuestions answers, until stop, another process's question
// whether this one polls a workspace, with this process's instance id.
func (rt *Runtime) answerPollerQuestions() (stop func()) {
	if rt.Conn.Embedded() {
		return func() {} // no other process can use this NATS
	}
	polled := make(map[string]bool, len(rt.Clients))
	for _, c := range rt.Clients {
		polled[c.WorkspaceID()] = true
	}
	polls := func(ws string) bool { return polled[ws] }
	if rt.reg != nil {
		polls = rt.reg.reg.Active // the set changes while it runs
	}
	me := rt.InstanceID()
	prefix := events.SubjectPollersPrefix + "."
	sub, err := rt.Conn.NC.Subscribe(prefix+"*", func(m *nats.Msg) {
		if string(m.Data) == me || !polls(strings.TrimPrefix(m.Subject, prefix)) {
			return // our own question, or not our workspace
		}
		_ = m.Respond([]byte(me))
	})
	if err != nil {
		rt.Log.Warn("relay: cannot answer other processes on this NATS; they may take this one's replies for a second relay's", "error", err)
		return func() {}
	}
	return func() { _ = sub.Unsubscribe() }
}

// otherPoller is poller.Config.OtherPoller: it asks the processes on this
// NATS whether one of them polls ws. nil without a ledger, or on the
// embedded server, which no other process can use.
func (rt *Runtime) otherPoller() func(ctx context.Context, ws string) (string, bool) {
	if rt.ledger == nil || rt.Conn.Embedded() {
		return nil
	}
	me := []byte(rt.InstanceID())
	return func(ctx context.Context, ws string) (string, bool) {
		ctx, cancel := context.WithTimeout(ctx, otherPollerWait)
		defer cancel()
		m, err := rt.Conn.NC.RequestWithContext(ctx, events.PollersSubject(ws), me)
		if err != nil {
			return "", false
		}
		return string(m.Data), true
	}
}
