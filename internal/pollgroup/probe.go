package pollgroup

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// Liveness probes count a killed member dead within about 2 s of its last
// renewal rather than 4 s (2 TTL, deadRenewals): those 4 s were about a
// third of the time a killed member's workspaces went unwatched (make
// chaos-group, docs/fleet.md).
//
// Each member answers core NATS requests on its own subject
// (events.PollGroupMemberSubject) from its connection's goroutine, so a
// member that is busy still answers, or at worst times out, and it names
// that subject in its lease's value once it has asked itself and been
// answered (permissions may refuse the subject; older members never
// answer). A member whose key missed probeAfter renewals, and that names
// a subject, is asked: the server answers "no responders" only when no
// subscription is left, which is what a dead process (its connection
// closed) leaves. It then counts dead until its key changes again.
// Anything else (an answer, a timeout) leaves the judgement to
// deadRenewals, as without probes. Claims still decide who polls: a
// member counted dead wrongly (cut off from NATS) sees its claims taken
// and stops them, as it does after deadRenewals.

// probeAfter: a member is asked once its key missed this many of our
// renewals (TTL/4 each). A live member's renewal is rarely more than one
// late; one cut off from NATS (its node lost) has this long to reconnect
// before its workspaces move.
const probeAfter = 3

// probeTimeout bounds one probe; a timeout says nothing.
const probeTimeout = time.Second

// answerProbes subscribes this member to its probes on subject, and asks
// once itself to prove that the permissions let both ways through. The
// subscription ends when stop is called.
func answerProbes(ctx context.Context, nc *nats.Conn, subject string) (stop func(), err error) {
	sub, err := nc.Subscribe(subject, func(msg *nats.Msg) { _ = msg.Respond(nil) })
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if _, err := nc.RequestWithContext(ctx, subject, nil); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("asked itself on %s: %w", subject, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// probeResult is one probe's answer: absent when no subscriber was left.
type probeResult struct {
	member string
	at     uint64 // the member's lastAt when asked
	absent bool
}

// prober sends the probes and keeps what they found. Only serve's
// goroutine touches it; the requests run on their own and report on
// results.
type prober struct {
	nc      *nats.Conn
	results chan probeResult
	// inFlight: a probe of the member is out, sent at its lastAt.
	inFlight map[string]uint64
	// absent: the member's lastAt when a probe found it gone.
	absent map[string]uint64
}

func newProber(nc *nats.Conn) *prober {
	return &prober{nc: nc, results: make(chan probeResult, 16),
		inFlight: map[string]uint64{}, absent: map[string]uint64{}}
}

// ask probes member on subject, unless a probe of it at this lastAt is
// out or found it gone already.
func (p *prober) ask(ctx context.Context, member, subject string, at uint64) {
	if sent, ok := p.inFlight[member]; ok && sent == at {
		return
	}
	if p.gone(member, at) {
		return
	}
	p.inFlight[member] = at
	go func() {
		rctx, cancel := context.WithTimeout(ctx, probeTimeout)
		defer cancel()
		_, err := p.nc.RequestWithContext(rctx, subject, nil)
		select {
		case p.results <- probeResult{member: member, at: at, absent: errors.Is(err, nats.ErrNoResponders)}:
		case <-ctx.Done():
		}
	}()
}

// record takes a probe's answer; it reports whether it found member gone.
// The answer to a probe sent before the member's key changed is dropped.
func (p *prober) record(r probeResult) bool {
	if sent, ok := p.inFlight[r.member]; !ok || sent != r.at {
		return false
	}
	delete(p.inFlight, r.member)
	if r.absent {
		p.absent[r.member] = r.at
	}
	return r.absent
}

// gone reports whether a probe found member absent since its key last
// changed (at).
func (p *prober) gone(member string, at uint64) bool {
	g, ok := p.absent[member]
	return ok && g == at
}

// forget drops what probes found of member: its key changed or went.
func (p *prober) forget(member string) {
	delete(p.absent, member)
	delete(p.inFlight, member)
}
