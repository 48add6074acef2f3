package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var flagFloorBatch = flag.Int("floor-batch", 16, "messages per inbound stream message of the batched floor designs")

// The batched designs do what shipped does, per stream message of B
// messages (-floor-batch) instead of per message; docs/performance.md,
// "What batched hops would reach". The poller publishes a JSON array of B
// inbound envelopes under one Nats-Msg-Id, and the dispatcher, per batch,
// reads the conversation's turns once (every message is one
// conversation's, as in echo/d1), keeps the records, publishes one turn
// message (2B turns) and acks once:
//   - batched: one handled get and one handled create of the batch's key,
//     the value all B records with their posting marks, then one sent
//     create of B records. The optimistic bound: "handled?" is answerable
//     only for the batch as cut, which a re-poll after a poller crash
//     need not repeat.
//   - batched/keyed: the records stay per message, so "handled?" is
//     answerable for any cut: one batched direct get (multi_last) of the
//     B keys, then one atomic batch publish per record kind (nats-server
//     2.12+, AllowAtomicPublish), each message create-only
//     (Nats-Expected-Last-Subject-Sequence: 0, which nats-server checks
//     per subject inside a batch; one failed expectation rejects the
//     whole batch).
//   - batched/keyed-async: batched/keyed with each record kind written
//     as B create-only publishes sent together, their acks awaited
//     together (as the poller's pages are): per-message records without
//     an atomic batch, whose staging costs nats-server a file store per
//     batch on an R1 file stream.

// Headers of an atomic batch publish (ADR-50); nats.go has no API for it.
const (
	batchIDHeader     = "Nats-Batch-Id"
	batchSeqHeader    = "Nats-Batch-Sequence"
	batchCommitHeader = "Nats-Batch-Commit"
)

// grain is how many messages one inbound stream message carries.
func (d floorDesign) grain() int {
	if !d.batched {
		return 1
	}
	if *flagFloorBatch < 1 {
		return 1
	}
	return *flagFloorBatch
}

// floorBatchID names the stream message of count messages from start
// (its Nats-Msg-Id): in-<start>, or in-<start>-<count> for more than one.
func floorBatchID(start, count int) string {
	if count == 1 {
		return "in-" + strconv.Itoa(start)
	}
	return fmt.Sprintf("in-%d-%d", start, count)
}

func parseFloorBatchID(id string) (start, count int, ok bool) {
	s, c, many := strings.Cut(strings.TrimPrefix(id, "in-"), "-")
	start, err := strconv.Atoi(s)
	if err != nil || !strings.HasPrefix(id, "in-") {
		return 0, 0, false
	}
	if !many {
		return start, 1, true
	}
	count, err = strconv.Atoi(c)
	return start, count, err == nil && count > 0
}

// floorTally counts each relayed message once, so that a run fails when a
// message is lost (never counted) or counted twice.
type floorTally struct {
	mu           sync.Mutex
	seen         []bool
	left         int
	twice, wrong int
	done         chan struct{}
}

func newFloorTally(n int) *floorTally {
	return &floorTally{seen: make([]bool, n), left: n, done: make(chan struct{})}
}

// mark counts the messages of the stream message named id.
func (t *floorTally) mark(id string) {
	start, count, ok := parseFloorBatchID(id)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !ok || start < 0 || start+count > len(t.seen) {
		t.wrong++
		return
	}
	for i := start; i < start+count; i++ {
		if t.seen[i] {
			t.twice++
			continue
		}
		t.seen[i] = true
		t.left--
		if t.left == 0 {
			close(t.done)
		}
	}
}

// wait fails the benchmark unless every message is counted within
// timeout, each once.
func (t *floorTally) wait(b *testing.B, timeout time.Duration) {
	select {
	case <-t.done:
	case <-time.After(timeout):
		t.mu.Lock()
		defer t.mu.Unlock()
		b.Fatalf("%d of %d messages relayed after %s", len(t.seen)-t.left, len(t.seen), timeout)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.twice > 0 || t.wrong > 0 {
		b.Fatalf("%d messages counted twice, %d stream messages with a Msg-Id out of range", t.twice, t.wrong)
	}
}

// floorBatch is what one stream message of count messages stores: the
// inbound envelopes, the handled and sent records and the turns, each a
// JSON array of count payloads (the single payload itself when the
// design is not batched).
type floorBatch struct {
	inbound, handled, sent, turns []byte
}

type floorBatches struct {
	p       floorPayloads
	batched bool
	mu      sync.Mutex
	byCount map[int]floorBatch
}

func newFloorBatches(p floorPayloads, batched bool) *floorBatches {
	return &floorBatches{p: p, batched: batched, byCount: map[int]floorBatch{}}
}

func (bs *floorBatches) get(count int) floorBatch {
	if !bs.batched {
		return floorBatch{inbound: bs.p.inbound, handled: bs.p.handled, sent: bs.p.sent, turns: bs.p.reply}
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	fb, ok := bs.byCount[count]
	if !ok {
		fb = floorBatch{inbound: jsonArrayOf(bs.p.inbound, count), handled: jsonArrayOf(bs.p.handled, count),
			sent: jsonArrayOf(bs.p.sent, count), turns: jsonArrayOf(bs.p.reply, count)}
		bs.byCount[count] = fb
	}
	return fb
}

// jsonArrayOf is a JSON array of count copies of item.
func jsonArrayOf(item []byte, count int) []byte {
	var buf bytes.Buffer
	buf.WriteByte('[')
	for i := range count {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(item)
	}
	buf.WriteByte(']')
	return buf.Bytes()
}

// dispatchBatch is the dispatcher's part for one stream message of a
// batched design.
func (d floorDesign) dispatchBatch(ctx context.Context, b *testing.B, w *floorWorld, batches *floorBatches, m jetstream.Msg) {
	id := m.Headers().Get(jetstream.MsgIDHeader)
	start, count, ok := parseFloorBatchID(id)
	if !ok {
		b.Errorf("inbound Msg-Id %q names no batch", id)
		return
	}
	batch := batches.get(count)
	w.turns.load(ctx, b)
	switch d.handled {
	case handledBatch:
		key := "ws." + id
		if _, err := w.handled.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
			b.Errorf("handled get: %v", err)
		}
		if _, err := w.handled.Create(ctx, key, batch.handled); err != nil {
			b.Errorf("handled create: %v", err)
		}
		if _, err := w.sentKV.Create(ctx, key, batch.sent); err != nil { // after the B POSTs
			b.Errorf("sent create: %v", err)
		}
	case handledKeyed, handledKeyedAsync:
		create := atomicCreate
		if d.handled == handledKeyedAsync {
			create = asyncCreate
		}
		keys := make([]string, count)
		for i := range keys {
			keys[i] = "ws.in-" + strconv.Itoa(start+i)
		}
		if err := noneStored(ctx, w.disp.Conn(), "KV_floor_handled", "$KV.floor_handled.", keys); err != nil {
			b.Errorf("handled get: %v", err)
		}
		if err := create(ctx, w.disp, "h-"+id, "$KV.floor_handled.", keys, batches.p.handled); err != nil {
			b.Errorf("handled batch: %v", err)
		}
		if err := create(ctx, w.disp, "s-"+id, "$KV.floor_replies.", keys, batches.p.sent); err != nil {
			b.Errorf("sent batch: %v", err)
		}
	}
	w.turns.record(ctx, b, batch.turns, id)
	if err := m.Ack(); err != nil {
		b.Errorf("ack: %v", err)
	}
}

// noneStored asks with one batched direct get (multi_last, nats-server
// 2.11+) for the last message of each key's subject, and returns an error
// unless none exists (404), as on a first delivery. A real reader routes
// the found messages and the end-of-batch status as internal/memory's
// directGetter does; on a first delivery the one answer is the 404, so a
// plain request reads it.
func noneStored(ctx context.Context, nc *nats.Conn, stream, prefix string, keys []string) error {
	subjects := make([]string, len(keys))
	for i, k := range keys {
		subjects[i] = prefix + k
	}
	req, err := json.Marshal(struct {
		MultiLast []string `json:"multi_last"`
	}{subjects})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream, req)
	if err != nil {
		return err
	}
	switch status := resp.Header.Get("Status"); status {
	case "404":
		return nil
	case "":
		return fmt.Errorf("%s already stored", resp.Header.Get("Nats-Subject"))
	default:
		return fmt.Errorf("multi_last get of %d keys: status %s %s", len(keys), status, resp.Header.Get("Description"))
	}
}

// atomicCreate stores data under each key in one atomic batch (nats-server
// 2.12+, the stream's AllowAtomicPublish): all or none. Each message is
// create-only; the messages before the commit go without a reply subject,
// so the server sends one ack, for the commit.
func atomicCreate(ctx context.Context, js jetstream.JetStream, batchID, prefix string, keys []string, data []byte) error {
	for i, k := range keys {
		m := &nats.Msg{Subject: prefix + k, Data: data, Header: nats.Header{}}
		m.Header.Set(batchIDHeader, batchID)
		m.Header.Set(batchSeqHeader, strconv.Itoa(i+1))
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		if i < len(keys)-1 {
			if err := js.Conn().PublishMsg(m); err != nil {
				return err
			}
			continue
		}
		m.Header.Set(batchCommitHeader, "1")
		if _, err := js.PublishMsg(ctx, m); err != nil {
			return fmt.Errorf("commit of %d messages: %w", len(keys), err)
		}
	}
	return nil
}

// asyncCreate stores data under each key with one create-only publish
// per key, all sent before the first ack is awaited; each key is created
// or not on its own (batchID is unused).
func asyncCreate(ctx context.Context, js jetstream.JetStream, _, prefix string, keys []string, data []byte) error {
	acks := make([]jetstream.PubAckFuture, len(keys))
	for i, k := range keys {
		m := &nats.Msg{Subject: prefix + k, Data: data, Header: nats.Header{}}
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			return err
		}
		acks[i] = f
	}
	for i, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("create of %s: %w", keys[i], err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// allowAtomicPublish turns on atomic batch publish in the handled and
// sent buckets' streams.
func (w *floorWorld) allowAtomicPublish(ctx context.Context, b *testing.B) {
	for _, name := range []string{"KV_floor_handled", "KV_floor_replies"} {
		s, err := w.poller.Stream(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		cfg := s.CachedInfo().Config
		cfg.AllowAtomicPublish = true
		if _, err := w.poller.UpdateStream(ctx, cfg); err != nil {
			b.Fatalf("allow atomic publish on %s: %v", name, err)
		}
	}
}
