// Package delegate lets a handler ask a peer agent a question and wait for
// its answer ("awaited delegation"), even when the peer answers minutes
// later through its own poll loop, and even when the asking process dies
// meanwhile.
//
// Each question has a stable A2A messageId (MessageID: the n-th ask of a
// handler run on one inbound message) and a record in the asks bucket
// (events.BucketAsks), created before the question is sent. The answer
// reaches the record by one of three ways: a push-mode peer's synchronous
// JSON-RPC answer, stored by Ask itself; a relay's reply, a new inbound
// message naming our messageId in metadata.in_reply_to_message_id; or the
// reply of a peer that is not a relay (a TypeScript channel or Python SDK
// agent: a fresh messageId, no metadata), matched to the oldest question
// awaited from that peer through its awaiting list (events.AwaitingKey).
// The dispatcher stores the last two (Route) before any handler sees
// them. The waiting Ask sees the answer through a watch of its key, and a
// handler re-run after a crash asks the same question under the same id
// and finds the answer there instead of asking again. See
// docs/delegation.md.
package delegate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/configerr"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Errors of New and Ask, matched with errors.Is.
var (
	// ErrInvalidConfig: New got no asks bucket or no workspace client.
	ErrInvalidConfig = configerr.For("delegate")
	// ErrInvalidQuestion: the question or its scope cannot be asked
	// (no peer, nothing to say, an unknown asking workspace).
	ErrInvalidQuestion = errors.New("delegate: invalid question")
	// ErrNoAnswer: the peer did not answer before the question's timeout
	// or the handler's deadline. The handler decides what to do.
	ErrNoAnswer = errors.New("delegate: no answer from the peer in time")
	// ErrMismatch: a re-run of the handler asked its n-th question of
	// another peer than the first run did (a handler whose questions
	// depend on something other than its message).
	ErrMismatch = errors.New("delegate: the handler's n-th question changed between runs")
)

// DefaultTimeout is Config.DefaultTimeout's default.
const DefaultTimeout = 2 * time.Minute

// Config configures an Asker.
type Config struct {
	// Asks is the asks bucket (events.Topology.Asks). Required.
	Asks jetstream.KeyValue
	// Clients are the platform clients of the workspaces that may ask,
	// by workspace id. Required, unless Lookup is set.
	Clients map[string]*molecule.Client
	// Lookup, when set, gives the client of a workspace not in Clients
	// (the workspace registry's, as it is now). It must be quick and safe
	// for concurrent use.
	Lookup func(workspace string) *molecule.Client
	// DefaultTimeout bounds the wait of a question that sets none
	// (MOLECULE_ASK_TIMEOUT). If not set, DefaultTimeout (2 minutes).
	DefaultTimeout time.Duration
	// MaxWait caps every wait, so that the record outlives it. If not
	// set, events.DefaultAskTTL less events.AskTTLMargin; pass the
	// topology's AskTTL less the margin.
	MaxWait time.Duration
	// RateReserve is how many requests of the platform's rate-limit
	// window a question leaves for the heartbeat (as the replier's). If
	// not set, 3.
	RateReserve int
	// Logger; if not set, slog.Default().
	Logger *slog.Logger
}

// Asker asks peers on behalf of handlers. It is safe for concurrent use
// and holds no state between calls: the asks bucket does.
type Asker struct {
	cfg Config
	log *slog.Logger
}

// New validates cfg, applies its defaults and returns an Asker.
func New(cfg Config) (*Asker, error) {
	if cfg.Asks == nil || (len(cfg.Clients) == 0 && cfg.Lookup == nil) {
		return nil, fmt.Errorf("%w: need the asks bucket and at least one workspace client", ErrInvalidConfig)
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = DefaultTimeout
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = events.DefaultAskTTL - events.AskTTLMargin
	}
	if cfg.RateReserve <= 0 {
		cfg.RateReserve = molecule.DefaultPostReserve
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Asker{cfg: cfg, log: cfg.Logger.With("stage", "delegate")}, nil
}

// Scope is what one question belongs to.
type Scope struct {
	// Workspace asks; it must have a client in Config.Clients.
	Workspace string
	// Activity is the inbound activity whose handler asks.
	Activity string
	// N numbers the question within the handler run, from 1 (a Session
	// counts for you). A re-run asks its n-th question under the same id.
	N int
	// ContextID is the conversation's A2A contextId; if not set, the
	// question's messageId starts a new one.
	ContextID string
	// Deadline is the handler's deadline; no wait outlasts it.
	Deadline time.Time
	// Hops is the asking message's hop count (events.Inbound.Hops); the
	// question carries one more (metadata.relay_hops), so a chain of agents
	// asking each other stops at the receivers' MOLECULE_MAX_HOPS.
	Hops int
}

// MessageID is the A2A messageId of the n-th question the handler of
// workspace's activity asks: the same in every run of that handler.
func MessageID(workspace, activity string, n int) string {
	return events.NameUUID("molecule-relay/ask/" + workspace + "/" + activity + "/" + strconv.Itoa(n))
}

// Session numbers the questions of one handler run. Questions asked one
// after the other are numbered in call order; a handler that asks several
// at once gets the numbers in the order its calls reach Ask.
type Session struct {
	a     *Asker
	scope Scope
	n     atomic.Int64
}

// Session starts the numbering for one handler run of s.Workspace's
// s.Activity (s.N is ignored).
func (a *Asker) Session(s Scope) *Session { return &Session{a: a, scope: s} }

// Ask asks the session's next question; see Asker.Ask.
func (s *Session) Ask(ctx context.Context, q handler.Question) (*handler.PeerAnswer, error) {
	sc := s.scope
	sc.N = int(s.n.Add(1))
	return s.a.Ask(ctx, sc, q)
}

// Ask sends q to q.PeerID as s.Workspace and waits for the answer, at most
// q.Timeout (if not set, Config.DefaultTimeout), never past s.Deadline nor
// Config.MaxWait. While it waits, the calling dispatcher slot is given
// back (stage.Park), so answers can be fetched with every slot waiting.
// It returns ErrNoAnswer when the wait ends first; the question is then
// abandoned and a late answer goes to the dead-letter stream.
func (a *Asker) Ask(ctx context.Context, s Scope, q handler.Question) (*handler.PeerAnswer, error) {
	c, err := a.validate(s, q)
	if err != nil {
		return nil, err
	}
	id := MessageID(s.Workspace, s.Activity, s.N)
	key := events.AskKey(s.Workspace, id)
	deadline := a.deadline(s, q)
	log := a.log.With("workspace", s.Workspace, "activity", s.Activity, "peer", q.PeerID, "message_id", id)
	rec, err := a.open(ctx, key, id, s, q, deadline)
	if err != nil {
		return nil, err
	}
	if rec.State == events.AskAnswered {
		log.InfoContext(ctx, "delegate: question answered before this run; not asked again")
		return peerAnswer(id, rec.Answer), nil
	}
	if err := expect(ctx, a.cfg.Asks, s, q.PeerID, id, contextOf(s, id), deadline); err != nil {
		return nil, fmt.Errorf("delegate: question %s not put on the awaiting list: %w", id, err)
	}
	defer a.forget(ctx, s, q.PeerID, id, log)
	if rec.SentAt.IsZero() {
		if ans, err := a.send(ctx, c, key, id, s, q, deadline, log); ans != nil || err != nil {
			return ans, err
		}
	} else {
		log.InfoContext(ctx, "delegate: question sent by an earlier run; waiting for its answer")
	}
	return a.await(ctx, key, id, deadline, log)
}

func (a *Asker) validate(s Scope, q handler.Question) (*molecule.Client, error) {
	c := a.cfg.Clients[s.Workspace]
	if c == nil && a.cfg.Lookup != nil {
		c = a.cfg.Lookup(s.Workspace)
	}
	switch {
	case c == nil:
		return nil, fmt.Errorf("%w: workspace %q is not served here", ErrInvalidQuestion, s.Workspace)
	case s.Activity == "" || s.N < 1:
		return nil, fmt.Errorf("%w: need the asking activity and the question's number (from 1)", ErrInvalidQuestion)
	case strings.TrimSpace(q.PeerID) == "":
		return nil, fmt.Errorf("%w: no peer to ask", ErrInvalidQuestion)
	case q.PeerID == s.Workspace:
		return nil, fmt.Errorf("%w: a workspace cannot ask itself", ErrInvalidQuestion)
	case q.Text == "" && len(q.Attachments) == 0:
		return nil, fmt.Errorf("%w: a question needs text or attachments", ErrInvalidQuestion)
	}
	return c, nil
}

// deadline is when the wait ends: the question's timeout, capped by the
// handler's deadline and MaxWait.
func (a *Asker) deadline(s Scope, q handler.Question) time.Time {
	t := q.Timeout
	if t <= 0 {
		t = a.cfg.DefaultTimeout
	}
	t = min(t, a.cfg.MaxWait)
	d := time.Now().Add(t)
	if !s.Deadline.IsZero() && s.Deadline.Before(d) {
		d = s.Deadline
	}
	return d
}

// forget takes the question off the awaiting list once Ask returns; a
// failure leaves it there until its deadline, where the matching skips it.
func (a *Asker) forget(ctx context.Context, s Scope, peer, id string, log *slog.Logger) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := forget(fctx, a.cfg.Asks, s, peer, id); err != nil {
		log.WarnContext(ctx, "delegate: question not taken off the awaiting list", "error", err)
	}
}

// contextOf is the question's contextId: the conversation's, else the
// question's own id.
func contextOf(s Scope, id string) string {
	if s.ContextID != "" {
		return s.ContextID
	}
	return id
}

func peerAnswer(id string, ans *events.AskAnswer) *handler.PeerAnswer {
	if ans == nil {
		return &handler.PeerAnswer{MessageID: id}
	}
	return &handler.PeerAnswer{Text: ans.Text, Attachments: ans.Attachments, MessageID: id, ActivityID: ans.ActivityID}
}
