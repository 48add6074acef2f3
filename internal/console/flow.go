package console

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// The live flow. While a page watches it (flowStream), the console holds
// core NATS subscriptions on what the stages publish: the inbound, reply
// and dead-letter subjects, and the handled and reply records' key-value
// subjects. From those it keeps the recent messages, each with its
// timeline, and sends each change to the pages within milliseconds. With
// no page open it holds no subscription and costs the relay nothing.
//
// What happened before a page opened is read back when one opens
// (history.go): the last messages of the streams and record buckets the
// subscriptions watch, applied in the order they were stored.

// flowKeep is how many recent messages the flow keeps.
const flowKeep = 500

// flowSubjects are the subjects the flow watches.
var flowSubjects = []string{
	events.SubjectInboundPrefix + ".>",
	events.SubjectReplyPrefix + ".>",
	events.SubjectDLQPrefix + ".>",
	"$KV." + events.BucketHandled + ".*.*",
	"$KV." + events.BucketReplies + ".*.*",
}

// Step is one event of a message's timeline.
type Step struct {
	At     time.Time `json:"at"`
	Stage  string    `json:"stage"`
	What   string    `json:"what"`
	Detail string    `json:"detail,omitempty"`
}

// Message is one message of the flow, without its body.
type Message struct {
	Workspace string `json:"workspace"`
	Activity  string `json:"activity"`
	Source    string `json:"source,omitempty"`
	Peer      string `json:"peer,omitempty"`
	Kind      string `json:"kind,omitempty"`
	// State is received, handled, queued, posting, answered, no_reply,
	// suppressed, cancelled or dead_letter.
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at,omitzero"`
	PolledAt  time.Time `json:"polled_at,omitzero"`
	// SeenAt is when the console saw the message arrive on the inbound
	// stream.
	SeenAt    time.Time `json:"seen_at"`
	HandledAt time.Time `json:"handled_at,omitzero"`
	Delivery  uint64    `json:"delivery,omitempty"`
	Route     string    `json:"route,omitempty"`
	SentAt    time.Time `json:"sent_at,omitzero"`
	Attempts  int       `json:"attempts,omitempty"`
	Error     string    `json:"error,omitempty"`
	Steps     []Step    `json:"steps"`

	text, reply string // the bodies, sent only on a reveal
}

// step adds a step to m's timeline unless it holds it already (the
// history read when a page opens may overlap what the flow saw live);
// false if it did.
func (m *Message) step(at time.Time, stage, what, detail string) bool {
	s := Step{At: at, Stage: stage, What: what, Detail: detail}
	for _, have := range m.Steps {
		// Within a second: a step the flow timed by when it saw it live
		// (a queued reply) is timed by when it was stored in the history.
		if d := have.At.Sub(s.At).Abs(); d < time.Second && have.Stage == s.Stage && have.What == s.What && have.Detail == s.Detail {
			return false
		}
	}
	m.Steps = append(m.Steps, s)
	return true
}

// histogramBounds are the latency histogram's upper bounds in ms (the
// last bucket has none).
var histogramBounds = []int64{100, 250, 500, 1000, 2500, 5000, 10000}

// Stats are the flow's totals: the histogram of created-to-answered
// latency and the throughput of the last minute.
type Stats struct {
	Bounds    []int64 `json:"bounds_ms"`
	Histogram []int   `json:"histogram"`
	// Received and Answered count the last 60 s, per second, oldest
	// first.
	Received []int `json:"received_per_s"`
	Answered []int `json:"answered_per_s"`
	Watching bool  `json:"watching"`
}

type flow struct {
	nc  *nats.Conn
	js  jetstream.JetStream
	log *slog.Logger

	mu       sync.Mutex
	subs     []*nats.Subscription
	watchers map[chan []byte]struct{}
	msgs     map[string]*Message
	order    []string // keys, oldest first
	hist     []int
	received rate
	answered rate
	closed   bool
}

func newFlow(js jetstream.JetStream, log *slog.Logger) *flow {
	return &flow{nc: js.Conn(), js: js, log: log, watchers: map[chan []byte]struct{}{}, msgs: map[string]*Message{}, hist: make([]int, len(histogramBounds)+1)}
}

// watch registers a page; the first one starts the subscriptions. The
// channel receives each changed message as JSON; cancel ends the watch.
func (f *flow) watch() (ch chan []byte, cancel func(), err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch = make(chan []byte, 256)
	if f.closed {
		close(ch)
		return ch, func() {}, nil
	}
	if len(f.watchers) == 0 {
		for _, s := range flowSubjects {
			sub, err := f.nc.Subscribe(s, f.onMsg)
			if err != nil {
				f.unsubscribe()
				return nil, nil, err
			}
			f.subs = append(f.subs, sub)
		}
		// Under f.mu: what the subscriptions deliver meanwhile waits and
		// applies after the history it follows.
		f.readHistory()
	}
	f.watchers[ch] = struct{}{}
	return ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.watchers[ch]; !ok {
			return
		}
		delete(f.watchers, ch)
		close(ch)
		if len(f.watchers) == 0 {
			f.unsubscribe()
		}
	}, nil
}

func (f *flow) unsubscribe() {
	for _, s := range f.subs {
		_ = s.Unsubscribe()
	}
	f.subs = nil
}

func (f *flow) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	f.unsubscribe()
	for ch := range f.watchers {
		close(ch)
	}
	f.watchers = map[chan []byte]struct{}{}
}

// message returns the flow's message ws/act, creating it.
func (f *flow) message(ws, act string, now time.Time) *Message {
	k := ws + "/" + act
	if m, ok := f.msgs[k]; ok {
		return m
	}
	m := &Message{Workspace: ws, Activity: act, State: "received", SeenAt: now, Steps: []Step{}}
	f.msgs[k] = m
	f.order = append(f.order, k)
	if len(f.order) > flowKeep {
		delete(f.msgs, f.order[0])
		f.order = f.order[1:]
	}
	return m
}

func (f *flow) onMsg(msg *nats.Msg) {
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.apply(msg, now)
	if m == nil {
		return
	}
	data, err := json.Marshal(m)
	if err != nil {
		return
	}
	for ch := range f.watchers {
		select {
		case ch <- data:
		default: // a page that does not read loses this update, not the relay
		}
	}
}

// apply applies msg, seen at now, to its message and returns it; nil if
// msg says nothing the flow shows.
func (f *flow) apply(msg *nats.Msg, now time.Time) *Message {
	var m *Message
	switch {
	case strings.HasPrefix(msg.Subject, events.SubjectInboundPrefix+"."):
		m = f.onInbound(msg, now)
	case strings.HasPrefix(msg.Subject, events.SubjectReplyPrefix+"."):
		m = f.onReply(msg, now)
	case strings.HasPrefix(msg.Subject, events.SubjectDLQPrefix+"."):
		m = f.onDeadLetter(msg, now)
	case strings.HasPrefix(msg.Subject, "$KV."):
		m = f.onRecord(msg, now)
	}
	return m
}

func (f *flow) onInbound(msg *nats.Msg, now time.Time) *Message {
	in, err := events.DecodeInbound(msg.Data)
	if err != nil {
		f.log.Debug("console: inbound envelope not decoded", "subject", msg.Subject, "error", err)
		return nil
	}
	m := f.message(in.WorkspaceID, in.ActivityID, now)
	m.Source, m.Peer, m.Kind, m.CreatedAt, m.PolledAt, m.text = string(in.Source), in.SourceWorkspaceID, in.Kind, in.CreatedAt, in.PolledAt, in.Text
	if !in.CreatedAt.IsZero() && len(m.Steps) == 0 {
		m.step(in.CreatedAt, "platform", "queued on the feed", "")
	}
	if id := msg.Header.Get(jetstream.MsgIDHeader); strings.Contains(id, ":replay:") {
		m.State, m.Error = "received", ""
		m.step(now, "console", "replayed from a dead letter", id[strings.LastIndex(id, ":")+1:])
		return m
	}
	if m.step(in.PolledAt, events.StagePoller, "polled and published", "") {
		f.received.add(now)
	}
	return m
}

func (f *flow) onReply(msg *nats.Msg, now time.Time) *Message {
	rep, err := events.DecodeReply(msg.Data)
	if err != nil {
		return nil
	}
	m := f.message(rep.WorkspaceID, rep.ActivityID, now)
	m.reply = rep.Text
	if m.State == "received" || m.State == "handled" {
		m.State = "queued"
	}
	m.step(now, events.StageDispatcher, "reply queued for the replier", "")
	return m
}

func (f *flow) onDeadLetter(msg *nats.Msg, now time.Time) *Message {
	dl, err := events.DecodeDeadLetter(msg.Data)
	if err != nil || dl.ActivityID == "" {
		return nil
	}
	m := f.message(dl.WorkspaceID, dl.ActivityID, now)
	m.State, m.Error = "dead_letter", dl.Reason+": "+dl.Error
	m.step(dl.FailedAt, dl.Stage, "dead-lettered", dl.Reason+" after "+itoa(dl.Deliveries)+" deliveries: "+dl.Error)
	return m
}

// onRecord reads a handled record ($KV.molecule_handled.<ws>.<act>) or
// a reply record ($KV.molecule_replies.<ws>.<act>).
func (f *flow) onRecord(msg *nats.Msg, now time.Time) *Message {
	if op := msg.Header.Get("KV-Operation"); op != "" {
		return nil // a delete or purge: a replay forgetting the record
	}
	tok := strings.Split(msg.Subject, ".")
	if len(tok) != 4 {
		return nil
	}
	m := f.message(tok[2], tok[3], now)
	switch tok[1] {
	case events.BucketHandled:
		var rec events.HandledRecord
		if json.Unmarshal(msg.Data, &rec) != nil {
			return nil
		}
		m.HandledAt, m.Delivery = rec.HandledAt, rec.Delivery
		switch rec.Outcome {
		case events.OutcomeReplied:
			if m.State == "received" {
				m.State = "handled"
			}
			var rep events.Reply
			if json.Unmarshal(rec.Reply, &rep) == nil {
				m.reply = rep.Text
			}
		default:
			m.State = rec.Outcome
		}
		m.step(rec.HandledAt, events.StageDispatcher, "handler finished: "+rec.Outcome, "delivery "+itoa(rec.Delivery))
	case events.BucketReplies:
		var rec events.ReplyRecord
		if json.Unmarshal(msg.Data, &rec) != nil {
			return nil
		}
		m.Route, m.Attempts = rec.Route, rec.Attempts
		switch rec.State {
		case events.StatePosting:
			m.State = "posting"
			m.step(rec.PostingAt, events.StageReplier, "posting by "+rec.Route, "attempt "+itoa(uint64(rec.Attempts)))
		case events.StateSent:
			if m.State != "answered" {
				f.answered.add(now)
				m.SentAt = rec.SentAt
				if b := bucketOf(rec.SentAt.Sub(m.CreatedAt)); !m.CreatedAt.IsZero() {
					f.hist[b]++
				}
			}
			m.State, m.Error = "answered", ""
			m.step(rec.SentAt, events.StageReplier, "answered by "+rec.Route, "")
		}
	default:
		return nil
	}
	return m
}

func bucketOf(d time.Duration) int {
	for i, b := range histogramBounds {
		if d.Milliseconds() <= b {
			return i
		}
	}
	return len(histogramBounds)
}

// snapshot is the recent messages (newest first) and the stats. While
// no page watches, it reads the history first (the page's first
// snapshot may come before its stream).
func (f *flow) snapshot() ([]Message, Stats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.watchers) == 0 && !f.closed {
		f.readHistory()
	}
	out := make([]Message, 0, len(f.order))
	for i := len(f.order) - 1; i >= 0; i-- {
		m := *f.msgs[f.order[i]]
		m.Steps = append([]Step(nil), m.Steps...)
		out = append(out, m)
	}
	now := time.Now()
	return out, Stats{Bounds: histogramBounds, Histogram: append([]int(nil), f.hist...),
		Received: f.received.last(now), Answered: f.answered.last(now), Watching: len(f.watchers) > 0}
}

// get returns a copy of message ws/act with its bodies.
func (f *flow) get(ws, act string) (Message, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.msgs[ws+"/"+act]
	if !ok {
		return Message{}, false
	}
	cp := *m
	cp.Steps = append([]Step(nil), m.Steps...)
	return cp, true
}

// rate counts events per second over the last minute.
type rate struct {
	counts [60]int
	secs   [60]int64
}

func (r *rate) add(t time.Time) {
	s := t.Unix()
	i := s % 60
	if r.secs[i] > s {
		return // older than the minute counted (read from the history)
	}
	if r.secs[i] != s {
		r.secs[i], r.counts[i] = s, 0
	}
	r.counts[i]++
}

func (r *rate) last(now time.Time) []int {
	out := make([]int, 60)
	s := now.Unix()
	for k := 0; k < 60; k++ {
		sec := s - 59 + int64(k)
		if i := sec % 60; r.secs[i] == sec {
			out[k] = r.counts[i]
		}
	}
	return out
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
