package chaos_test

import (
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// spanSink is an OTLP/HTTP trace receiver on 127.0.0.1: the stages export
// their spans to it (the relay's own tracing, internal/tracing), and the
// test reads from them when each message reached each hop. Only the spans
// of a message's path are kept: the poller's publish, the dispatcher's
// handle and reply-publish, the replier's reply and post.
type spanSink struct {
	url string

	mu    sync.Mutex
	spans map[string][]span // by activity id
	owner map[string]string // span id -> activity id, of the spans that carry one
	bare  []span            // reply-publish spans: their activity is their parent's (handle)
}

// span is one exported span of a message's path.
type span struct {
	name             string
	spanID, parentID string
	start, end       time.Time
	delivery         int64
}

func newSpanSink(t *testing.T) *spanSink {
	t.Helper()
	s := &spanSink{spans: map[string][]span{}, owner: map[string]string{}}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	s.url = "http://" + l.Addr().String() + "/v1/traces"
	return s
}

// env is what makes a stage export its spans here, at once (a SIGKILLed
// stage loses what it had not sent yet).
func (s *spanSink) env() []string {
	return []string{
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + s.url,
		"OTEL_BSP_SCHEDULE_DELAY=200",
		"OTEL_EXPORTER_OTLP_COMPRESSION=none",
	}
}

func (s *spanSink) serve(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	var req collectortrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s.add(sp, sp.GetAttributes())
			}
		}
	}
	s.mu.Unlock()
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (s *spanSink) add(sp *tracev1.Span, attrs []*commonv1.KeyValue) {
	switch sp.GetName() {
	case "publish", "handle", "reply-publish", "reply", "post":
	default:
		return
	}
	x := span{name: sp.GetName(), spanID: fmt.Sprintf("%x", sp.GetSpanId()), parentID: fmt.Sprintf("%x", sp.GetParentSpanId()),
		start: time.Unix(0, int64(sp.GetStartTimeUnixNano())), end: time.Unix(0, int64(sp.GetEndTimeUnixNano()))}
	activity := ""
	for _, a := range attrs {
		switch a.GetKey() {
		case "molecule.activity_id":
			activity = a.GetValue().GetStringValue()
		case "molecule.delivery":
			x.delivery = a.GetValue().GetIntValue()
		}
	}
	if activity == "" {
		s.bare = append(s.bare, x)
		return
	}
	s.owner[x.spanID] = activity
	s.spans[activity] = append(s.spans[activity], x)
}

// of returns the spans of one activity, in start order.
func (s *spanSink) of(activity string) []span {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bare = slices.DeleteFunc(s.bare, func(b span) bool {
		if a, ok := s.owner[b.parentID]; ok {
			s.spans[a] = append(s.spans[a], b)
			return true
		}
		return false
	})
	out := slices.Clone(s.spans[activity])
	slices.SortFunc(out, func(a, b span) int { return a.start.Compare(b.start) })
	return out
}

// hop is one leg of a message's way from the send to its reply.
type hop struct {
	name     string
	from, to time.Time
	// groups are the Raft groups (streams, consumers, buckets) the leg
	// needs a leader of.
	groups []string
}

func (h hop) took() time.Duration { return h.to.Sub(h.from) }

// path is the way of one message that produced its first reply.
type path struct {
	legs []hop
	// inDelivery and replyDelivery are the deliveries of the inbound
	// message and of its reply that did the work; a later one means the
	// earlier were handed back (a retry after a platform fault, an
	// AckWait after a SIGKILL).
	inDelivery, replyDelivery int64
}

const (
	legPoll        = "poll (send to the poller's first publish)"
	legPublish     = "poller publish (first try to the one stored)"
	legInbound     = "inbound stream to dispatcher (pull)"
	legBefore      = "dispatcher before handler (handled read, claim, memory)"
	legHandler     = "handler"
	legAfter       = "dispatcher after handler (memory, handled record)"
	legReplyPub    = "reply publish"
	legReplyStream = "reply stream to replier (pull)"
	legRecord      = "replier before post (reply record, budget)"
	legPost        = "post (to the platform's row)"
)

// hops cuts a message's way into its legs from its spans and the handler
// run that produced its reply; ok is false when a span of that path was
// lost with a SIGKILLed stage.
//
// The path followed is the one that produced the first reply: the latest
// post that started before the reply landed, the reply span around it,
// the latest reply-publish to start before that (the replier can receive
// a reply before the publish's ack is back), the handle span around it,
// and so back to the poller's publish.
func hops(sentAt time.Time, spans []span, run handlerRun, replyAt time.Time) (path, bool) {
	last := func(name string, before time.Time) (span, bool) {
		var got span
		found := false
		for _, x := range spans {
			if x.name == name && !x.start.After(before) && (!found || x.start.After(got.start)) {
				got, found = x, true
			}
		}
		return got, found
	}
	post, ok1 := last("post", replyAt)
	rep, ok2 := last("reply", post.start)
	rpub, ok3 := last("reply-publish", rep.start)
	handle, ok4 := last("handle", rpub.start)
	pub, ok5 := last("publish", handle.start)
	if !(ok1 && ok2 && ok3 && ok4 && ok5) || run.start.Before(handle.start) {
		return path{}, false
	}
	pub0 := pub
	for _, x := range spans {
		if x.name == "publish" && x.start.Before(pub0.start) {
			pub0 = x
		}
	}
	const (
		inbound, dispatcher = "MOLECULE_INBOUND", "MOLECULE_INBOUND/dispatcher"
		reply, replier      = "MOLECULE_REPLY", "MOLECULE_REPLY/replier"
		handled, replies    = "KV_molecule_handled", "KV_molecule_replies"
		memory, cursors     = "MOLECULE_MEMORY", "KV_molecule_cursors"
		status              = "KV_molecule_poller_status"
	)
	legs := []hop{
		{legPoll, sentAt, pub0.start, []string{cursors, status, inbound}},
		{legPublish, pub0.start, pub.start, []string{inbound, cursors, status}},
		// A stage pulls only with a free slot, and its slots wait on the
		// records of the messages it holds: the stream legs also need the
		// buckets the next stage reads.
		{legInbound, pub.start, handle.start, []string{inbound, dispatcher, handled, memory}},
		{legBefore, handle.start, run.start, []string{handled, memory}},
		{legHandler, run.start, run.at, nil},
		{legAfter, run.at, rpub.start, []string{memory, handled}},
		{legReplyPub, rpub.start, rpub.end, []string{reply}},
		{legReplyStream, rpub.end, rep.start, []string{reply, replier, replies}},
		{legRecord, rep.start, post.start, []string{replies}},
		{legPost, post.start, replyAt, nil},
	}
	for i := range legs {
		legs[i].to = maxTime(legs[i].to, legs[i].from)
	}
	return path{legs: legs, inDelivery: handle.delivery, replyDelivery: rep.delivery}, true
}

// stageKills records when each stage was SIGKILLed.
type stageKills struct {
	mu sync.Mutex
	at []stageKill
}

type stageKill struct {
	stage string
	at    time.Time
}

func (k *stageKills) add(stage string, at time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.at = append(k.at, stageKill{stage, at})
}

// within names the stages killed in [from, to].
func (k *stageKills) within(from, to time.Time) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, x := range k.at {
		if !x.at.Before(from) && !x.at.After(to) {
			out = append(out, x.stage)
		}
	}
	return out
}

// slowMessage is a message slower than 2 s, attributed to the leg it
// spent most time in.
type slowMessage struct {
	text    string
	total   time.Duration
	path    path
	longest hop
	// leaderless are the groups of the longest leg that had no leader
	// during it.
	leaderless []leaderless
	// killed is the latest node kill before the leg ended, and
	// fromKill how long after it the leg began (negative: before).
	killed   string
	fromKill time.Duration
	stages   []string // stages SIGKILLed during the leg
	// afterLeader is how long the leg went on after the last of its
	// leaderless groups had a leader again: what the relay added to the
	// election.
	afterLeader time.Duration
	cause       string
}

// attributeHops cuts every answered message into its legs, prints each
// leg's distribution over all messages, and attributes every message
// slower than 2 s (and than 10 s) to a cause: the election of a group its
// longest leg needed, a SIGKILLed stage, a retry after a platform fault,
// or none found.
//
// It returns the message whose longest leg went on longest after the
// groups it waited for had a leader again, among the messages slowed by an
// election alone (first deliveries, no stage SIGKILLed during the leg):
// what the relay itself added to an election (ok false: none).
func attributeHops(ledger []*sent, runs map[string][]handlerRun, first map[string]time.Time, sink *spanSink, lw *leaderWatch, kills *stageKills) (worst slowMessage, ok bool) {
	spans := lw.spans()
	var all []path
	var slow []slowMessage
	missing := 0
	for _, s := range ledger {
		replyAt, answered := first[s.text]
		if !answered {
			continue
		}
		p, ok := pathOf(s, runs[s.text], replyAt, sink)
		if !ok {
			missing++
			continue
		}
		all = append(all, p)
		if total := replyAt.Sub(s.postedAt); total > 2*time.Second {
			slow = append(slow, attribute(s.text, total, p, spans, lw, kills))
		}
	}
	printLegs(all)
	printSlow(slow, missing)
	var after []time.Duration
	for _, m := range slow {
		if m.cause != "election" || m.path.inDelivery > 1 || m.path.replyDelivery > 1 || len(m.stages) > 0 {
			continue
		}
		after = append(after, m.afterLeader)
		if !ok || m.afterLeader > worst.afterLeader {
			worst, ok = m, true
		}
	}
	fmt.Printf("CHAOS slowed by an election alone (first deliveries, no stage SIGKILLed): %d messages; their longest leg went on after its groups had a leader by %s\n", len(after), pcts(after))
	return worst, ok
}

func attribute(text string, total time.Duration, p path, spans []leaderless, lw *leaderWatch, kills *stageKills) slowMessage {
	m := slowMessage{text: text, total: total, path: p}
	for _, l := range p.legs {
		if l.took() > m.longest.took() {
			m.longest = l
		}
	}
	for _, g := range during(spans, m.longest.from, m.longest.to) {
		if slices.Contains(m.longest.groups, g.group) {
			m.leaderless = append(m.leaderless, g)
		}
	}
	if node, at := lw.lastKillBefore(m.longest.to); !at.IsZero() {
		m.killed, m.fromKill = node, m.longest.from.Sub(at)
	}
	m.stages = kills.within(m.longest.from, m.longest.to)
	var back time.Time
	for _, g := range m.leaderless {
		back = maxTime(back, g.to)
	}
	if !back.IsZero() {
		m.afterLeader = m.longest.to.Sub(back)
	}
	redelivered := (m.longest.name == legInbound && p.inDelivery > 1) || (m.longest.name == legReplyStream && p.replyDelivery > 1)
	switch {
	case m.longest.name == legRecord && p.replyDelivery > 1:
		// A redelivered reply whose record says "posting": the post of a
		// replier SIGKILLed before it was answered may still be in
		// flight, and a notify not on the feed waits out its timeout.
		m.cause = "settling an earlier delivery's post"
	case len(m.leaderless) > 0:
		m.cause = "election"
	case len(m.stages) > 0:
		m.cause = "stage SIGKILL"
	case redelivered:
		m.cause = "redelivery (a retry after a platform fault)"
	case m.longest.name == legPoll:
		m.cause = "poll (platform fault or interval)"
	default:
		m.cause = "none found"
	}
	return m
}

// pathOf finds the path of the handler run that produced the message's
// first reply.
func pathOf(s *sent, runs []handlerRun, replyAt time.Time, sink *spanSink) (path, bool) {
	runs = slices.Clone(runs)
	slices.SortFunc(runs, func(a, b handlerRun) int { return b.at.Compare(a.at) })
	for _, r := range runs {
		if r.at.After(replyAt) {
			continue
		}
		if p, ok := hops(s.postedAt, sink.of(r.activityID), r, replyAt); ok {
			return p, true
		}
	}
	return path{}, false
}

// printLegs prints each leg's p50, p95 and max over every message.
func printLegs(all []path) {
	if len(all) == 0 {
		fmt.Println("CHAOS legs: no complete trace")
		return
	}
	for i := range all[0].legs {
		ds := make([]time.Duration, 0, len(all))
		for _, p := range all {
			ds = append(ds, p.legs[i].took())
		}
		fmt.Printf("CHAOS leg %-58s %s\n", all[0].legs[i].name+":", pcts(ds))
	}
}

// printSlow prints how the slow messages are attributed, and in full the
// slowest dozen over 10 s and five whose cause was not found.
func printSlow(slow []slowMessage, missing int) {
	if missing > 0 {
		fmt.Printf("CHAOS %d answered messages without a complete trace (a span lost with a SIGKILLed stage)\n", missing)
	}
	for _, th := range []time.Duration{2 * time.Second, 10 * time.Second} {
		byLeg, byCause, byGroup := map[string]int{}, map[string]int{}, map[string]int{}
		var fromKill, after []time.Duration
		n := 0
		for _, m := range slow {
			if m.total <= th {
				continue
			}
			n++
			byLeg[m.longest.name]++
			byCause[m.cause]++
			for _, g := range dedupGroups(m.leaderless) {
				byGroup[g]++
			}
			if m.cause == "election" {
				fromKill = append(fromKill, m.fromKill)
				after = append(after, m.afterLeader)
			}
		}
		fmt.Printf("CHAOS over %s: %d messages; longest leg: %s\n", th, n, counts(byLeg))
		fmt.Printf("CHAOS over %s: cause: %s; leaderless groups of that leg: %s\n", th, counts(byCause), counts(byGroup))
		fmt.Printf("CHAOS over %s, elections: the leg began after the node kill by %s; it went on after the last of its groups had a leader by %s\n", th, pcts(fromKill), pcts(after))
	}
	slices.SortFunc(slow, func(a, b slowMessage) int { return int(b.total - a.total) })
	var shown []slowMessage
	for i, m := range slow {
		if m.total <= 10*time.Second || i == 12 {
			break
		}
		shown = append(shown, m)
	}
	unexplained := 0
	for _, m := range slow {
		if m.cause == "none found" && unexplained < 5 {
			unexplained++
			shown = append(shown, m)
		}
	}
	for _, m := range shown {
		var legs []string
		for _, l := range m.path.legs {
			if l.took() >= 300*time.Millisecond {
				legs = append(legs, fmt.Sprintf("%s %s", l.name, l.took().Round(10*time.Millisecond)))
			}
		}
		var groups []string
		for _, g := range m.leaderless {
			groups = append(groups, fmt.Sprintf("%s %s-%s", g.group, g.from.UTC().Format("15:04:05.0"), g.to.UTC().Format("15:04:05.0")))
		}
		fmt.Printf("CHAOS slow: %s %s (deliveries %d, reply %d): %s. Cause %s: longest leg %s-%s UTC, began %s after the kill of %s; leaderless: [%s]; then %s more; stages killed: %v\n",
			m.text, m.total.Round(10*time.Millisecond), m.path.inDelivery, m.path.replyDelivery, strings.Join(legs, ", "), m.cause,
			m.longest.from.UTC().Format("15:04:05.000"), m.longest.to.UTC().Format("15:04:05.000"), m.fromKill.Round(10*time.Millisecond), m.killed,
			strings.Join(groups, ", "), m.afterLeader.Round(10*time.Millisecond), m.stages)
	}
}

func dedupGroups(ls []leaderless) []string {
	var out []string
	for _, l := range ls {
		if !slices.Contains(out, l.group) {
			out = append(out, l.group)
		}
	}
	return out
}

func counts(m map[string]int) string {
	type kv struct {
		k string
		n int
	}
	var xs []kv
	for k, n := range m {
		xs = append(xs, kv{k, n})
	}
	slices.SortFunc(xs, func(a, b kv) int {
		if a.n != b.n {
			return b.n - a.n
		}
		return strings.Compare(a.k, b.k)
	})
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("%s %d", x.k, x.n))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}
