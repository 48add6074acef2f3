package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

var flagFloorMsgs = flag.Int("floor-msgs", 20000, "messages per floor run")

// BenchmarkFloor measures what the relay's unavoidable parts cost per
// relayed message with none of the relay's code around them: the JetStream
// work of a durable hand-off between the three stages (the embedded server
// and nats.go, in this process, on loopback TCP, one connection per stage
// as separate processes would have), and one HTTP POST per reply (in
// floor_http_test.go). Set beside relay_us/msg of BenchmarkPipeline they
// show how much of the relay's CPU is its own code and how much no code
// change of ours can remove. docs/performance.md, "The floor".
//
// The JetStream designs, each a set of operations per message:
//   - handoff: inbound publish (async, acks awaited per page of 500),
//     dispatcher delivery, reply publish (awaited), ack, replier delivery,
//     ack. No record: the least any design with a stream between stages
//     does, 4 NATS messages in and 4 out.
//   - records: handoff plus the records today's stages keep for
//     exactly-once (docs/guarantees.md) on a first delivery: the
//     dispatcher's handled get and create, the replier's posting create
//     and sent update.
//   - folded: records with the handled record folded into the reply
//     stream (docs/performance.md, "Against the targets"): the
//     dispatcher reads "handled?" with a direct get of the reply's own
//     subject and stores nothing but the reply.
//   - direct: records without the reply stream, as stages in one process
//     could do it: the dispatcher posts the reply itself (posting create,
//     sent update) and acks the inbound message after.
//   - memory: direct plus conversation memory: before the handler a
//     batched direct get of the conversation's turns after the last one
//     read (one read at a time, shared by the loads that wait for it),
//     after the sent update a turn publish (awaited). Every message is
//     one conversation's, as in echo/d1.
//   - shipped: what the shipped defaults do for a canvas reply: memory
//     with the posting mark on the handled record (docs/architecture.md,
//     "Direct posting"): no posting record of its own, and the sent
//     record a create; one stored write fewer than memory.
//   - batched, batched/keyed, batched/keyed-async: shipped at the grain
//     of -floor-batch messages per stream message
//     (floor_batched_test.go).
func BenchmarkFloor(b *testing.B) {
	runFloor(b, floorDesigns, func(b *testing.B, d floorDesign) { d.run(b, *flagFloorMsgs) },
		func(b *testing.B, sink *httpSink) { sink.floor(b, *flagFloorMsgs) })
}

// floorDesigns are BenchmarkFloor's designs, by name.
var floorDesigns = []floorDesign{
	{name: "handoff", replyStream: true},
	{name: "records", handled: handledKV, replyStream: true, replyRecords: true},
	{name: "folded", handled: handledFolded, replyStream: true, replyRecords: true},
	{name: "direct", handled: handledKV, replyRecords: true},
	{name: "memory", handled: handledKV, replyRecords: true, memory: true},
	{name: "shipped", handled: handledMarked, memory: true},
	{name: "batched", handled: handledBatch, memory: true, batched: true},
	{name: "batched/keyed", handled: handledKeyed, memory: true, batched: true},
	{name: "batched/keyed-async", handled: handledKeyedAsync, memory: true, batched: true},
}

// floorDesignsNamed returns the floorDesigns of names, in that order.
func floorDesignsNamed(b *testing.B, names ...string) []floorDesign {
	var out []floorDesign
	for _, n := range names {
		i := slices.IndexFunc(floorDesigns, func(d floorDesign) bool { return d.name == n })
		if i < 0 {
			b.Fatalf("no floor design %q", n)
		}
		out = append(out, floorDesigns[i])
	}
	return out
}

// runFloor runs each design as the sub-benchmark jetstream/<name>, then
// http/post against one HTTP sink.
func runFloor(b *testing.B, designs []floorDesign, design func(*testing.B, floorDesign), post func(*testing.B, *httpSink)) {
	for _, d := range designs {
		b.Run("jetstream/"+d.name, func(b *testing.B) {
			for range b.N {
				design(b, d)
			}
		})
	}
	b.Run("http/post", func(b *testing.B) {
		sink := startHTTPSink(b)
		for range b.N {
			post(b, sink)
		}
	})
}

// How a floor design records that a message was handled.
const (
	handledNone       = iota
	handledKV         // a get and a create-only write in the handled bucket
	handledFolded     // a direct get of the reply's own subject; the reply is the record
	handledMarked     // handledKV whose record carries the posting mark; then the sent create
	handledBatch      // handledMarked with one key per batch, its value the batch's records
	handledKeyed      // handledMarked with a key per message: one multi_last get, one atomic batch per record kind
	handledKeyedAsync // handledKeyed with B create-only publishes per record kind instead of an atomic batch
)

type floorDesign struct {
	name    string
	handled int
	// replyStream: the reply goes through a stream to a replier
	// consumer; without it the dispatcher does the replier's part.
	replyStream bool
	// replyRecords: the posting create and sent update around the POST.
	replyRecords bool
	// memory: a turns read before the handler, a turn publish after.
	memory bool
	// batched: one inbound stream message per -floor-batch messages,
	// and the dispatcher's work per batch (floor_batched_test.go).
	batched bool
}

// floorPayloads are envelopes of the sizes the relay stores: the test
// fixtures of internal/events, compacted.
type floorPayloads struct {
	inbound, reply, handled, posting, sent []byte
}

func loadFloorPayloads(b *testing.B) floorPayloads {
	read := func(name string) []byte {
		raw, err := os.ReadFile(filepath.Join("..", "internal", "events", "testdata", name))
		if err != nil {
			b.Fatal(err)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			b.Fatal(err)
		}
		return buf.Bytes()
	}
	p := floorPayloads{inbound: read("inbound_canvas.json"), reply: read("reply_canvas.json")}
	now := time.Now().UTC()
	var err error
	if p.handled, err = (events.HandledRecord{Outcome: events.OutcomeReplied, Reply: p.reply, Delivery: 1, HandledAt: now}).Marshal(); err != nil {
		b.Fatal(err)
	}
	rec := events.ReplyRecord{State: events.StatePosting, Route: events.RouteNotify, PostingAt: now, Deadline: now.Add(time.Minute), Attempts: 1}
	p.posting, _ = json.Marshal(rec)
	rec.State, rec.SentAt = events.StateSent, now
	p.sent, _ = json.Marshal(rec)
	return p
}

// floorWorld is a NATS server with two work-queue streams, a durable pull
// consumer on each and, for the records design, two buckets.
type floorWorld struct {
	ns                *natstest.Server
	poller, disp, rep jetstream.JetStream
	inbound, replies  jetstream.Consumer
	out               jetstream.Stream // the reply stream, on the dispatcher's connection
	handled, sentKV   jetstream.KeyValue
	turns             *floorTurns
}

func startFloorWorld(b *testing.B) *floorWorld {
	ctx := context.Background()
	ns := natstest.Start(b)
	w := &floorWorld{ns: ns}
	_, w.poller = natstest.Connect(b, ns.ClientURL())
	_, w.disp = natstest.Connect(b, ns.ClientURL())
	_, w.rep = natstest.Connect(b, ns.ClientURL())
	stream := func(name string) jetstream.Consumer {
		s, err := w.poller.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"},
			Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, AllowDirect: true})
		if err != nil {
			b.Fatal(err)
		}
		if w.out, err = w.disp.Stream(ctx, name); err != nil { // the last one made is the reply stream
			b.Fatal(err)
		}
		c, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: name, AckPolicy: jetstream.AckExplicitPolicy,
			AckWait: 8 * time.Second, MaxAckPending: 10000})
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	w.inbound, w.replies = stream("FLOOR_IN"), stream("FLOOR_OUT")
	bucket := func(name string) jetstream.KeyValue {
		kv, err := w.poller.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, TTL: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		return kv
	}
	w.handled, w.sentKV = bucket("floor_handled"), bucket("floor_replies")
	w.turns = startFloorTurns(b, w.poller)
	return w
}

func (w *floorWorld) varz(b *testing.B) *server.Varz {
	v, err := w.ns.Varz(nil)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// run relays n messages through the design's operations and reports the
// process's CPU (server and clients) and the server's messages per
// relayed message. It fails unless every message is relayed, each once.
func (d floorDesign) run(b *testing.B, n int) {
	w := startFloorWorld(b)
	p := loadFloorPayloads(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	relayed := newFloorTally(n)
	grain := d.grain()
	batches := newFloorBatches(p, d.batched)
	if d.handled == handledKeyed {
		w.allowAtomicPublish(ctx, b)
	}
	// A batch holds grain messages: the dispatcher holds as many messages
	// as the other designs do, in fewer batches.
	stopD := consumeWith(b, ctx, w.inbound, max(1, *flagEchoConc/grain), func(m jetstream.Msg) {
		id := m.Headers().Get(jetstream.MsgIDHeader)
		if d.batched {
			d.dispatchBatch(ctx, b, w, batches, m)
		} else {
			d.dispatch(ctx, b, w, p, m)
		}
		if !d.replyStream {
			relayed.mark(id)
		}
	})
	defer stopD()
	if d.replyStream {
		defer d.consumeReplies(ctx, b, w, p, func(key string) { relayed.mark(key[len("ws."):]) })()
	}

	v0, cpu0, t0 := w.varz(b), selfCPU(), time.Now()
	b.ResetTimer()
	publishPages(ctx, b, w.poller, batches, n, grain)
	relayed.wait(b, *flagTimeout)
	b.StopTimer()
	wall, cpu, v1 := time.Since(t0), selfCPU()-cpu0, w.varz(b)
	us := float64(cpu.Microseconds()) / float64(n)
	m := metrics{
		"msg/s":           float64(n) / wall.Seconds(),
		"relay_us/msg":    us,
		"msg/relay_cpu_s": 1e6 / us,
		"nats_in/msg":     float64(v1.InMsgs-v0.InMsgs) / float64(n),
		"nats_out/msg":    float64(v1.OutMsgs-v0.OutMsgs) / float64(n),
		"load1":           loadavg(),
	}
	m.report(b)
	record(b.Name(), m)
}

// publishPages publishes n inbound messages, as the poller does: async,
// each with its Nats-Msg-Id, the acks of a page of 500 awaited together.
// At a grain above 1 each page is cut into stream messages of up to grain
// messages (floor_batched_test.go).
func publishPages(ctx context.Context, b *testing.B, js jetstream.JetStream, batches *floorBatches, n, grain int) {
	const page = 500
	for start := 0; start < n; start += page {
		var acks []jetstream.PubAckFuture
		end := min(start+page, n)
		for i := start; i < end; i += grain {
			count := min(grain, end-i)
			m := &nats.Msg{Subject: "FLOOR_IN.ws", Data: batches.get(count).inbound, Header: nats.Header{}}
			m.Header.Set(jetstream.MsgIDHeader, floorBatchID(i, count))
			f, err := js.PublishMsgAsync(m)
			if err != nil {
				b.Fatal(err)
			}
			acks = append(acks, f)
		}
		for _, f := range acks {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			case <-ctx.Done():
				return
			}
		}
	}
}

// dispatch is the dispatcher's part: its handled record, then the reply
// publish (awaited) or, without a reply stream, the replier's records;
// then a plain ack.
func (d floorDesign) dispatch(ctx context.Context, b *testing.B, w *floorWorld, p floorPayloads, m jetstream.Msg) {
	key := "ws." + m.Headers().Get(jetstream.MsgIDHeader)
	subject := "FLOOR_OUT.ws"
	if d.memory {
		w.turns.load(ctx, b)
	}
	switch d.handled {
	case handledFolded:
		subject += "." + key
		if _, err := w.out.GetLastMsgForSubject(ctx, subject); !errors.Is(err, jetstream.ErrMsgNotFound) {
			b.Errorf("reply get: %v", err)
		}
	case handledKV, handledMarked:
		if _, err := w.handled.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
			b.Errorf("handled get: %v", err)
		}
		_, err := w.handled.Create(ctx, key, p.handled)
		if err != nil {
			b.Errorf("handled create: %v", err)
		}
		if d.handled == handledMarked { // the POST, then its sent record
			if _, err := w.sentKV.Create(ctx, key, p.sent); err != nil {
				b.Errorf("sent create: %v", err)
			}
		}
	}
	if d.replyStream {
		r := &nats.Msg{Subject: subject, Data: p.reply, Header: nats.Header{}}
		r.Header.Set(jetstream.MsgIDHeader, key)
		if _, err := w.disp.PublishMsg(ctx, r); err != nil {
			b.Errorf("reply publish: %v", err)
		}
	} else {
		d.postRecords(ctx, b, w, p, key)
	}
	if d.memory {
		w.turns.record(ctx, b, p.reply, key)
	}
	if err := m.Ack(); err != nil {
		b.Errorf("ack: %v", err)
	}
}

// postRecords is the replier's part without its POST, on a first
// delivery: the posting create and the sent update.
// consumeReplies is the replier of the designs with a reply stream: the
// records around each reply's POST, its ack, then done with its key.
func (d floorDesign) consumeReplies(ctx context.Context, b *testing.B, w *floorWorld, p floorPayloads, done func(key string)) (stop func()) {
	return consumeWith(b, ctx, w.replies, *flagReplyConc, func(m jetstream.Msg) {
		key := m.Headers().Get(jetstream.MsgIDHeader)
		d.postRecords(ctx, b, w, p, key)
		if err := m.Ack(); err != nil {
			b.Errorf("ack: %v", err)
		}
		done(key)
	})
}

func (d floorDesign) postRecords(ctx context.Context, b *testing.B, w *floorWorld, p floorPayloads, key string) {
	if !d.replyRecords {
		return
	}
	rev, err := w.sentKV.Create(ctx, key, p.posting)
	if err != nil {
		b.Errorf("posting create: %v", err)
	}
	if _, err := w.sentKV.Update(ctx, key, p.sent, rev); err != nil {
		b.Errorf("sent update: %v", err)
	}
}

// consumeWith delivers the consumer's messages to conc workers, holding at
// most conc messages at a time (the stages pull for their free slots).
func consumeWith(b *testing.B, ctx context.Context, c jetstream.Consumer, conc int, work func(jetstream.Msg)) (stop func()) {
	jobs := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := range jobs {
				work(m)
			}
		}()
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		select {
		case jobs <- m:
		case <-ctx.Done():
		}
	}, jetstream.PullMaxMessages(conc))
	if err != nil {
		b.Fatal(err)
	}
	return func() {
		cc.Stop()
		<-cc.Closed()
		close(jobs)
		wg.Wait()
	}
}
