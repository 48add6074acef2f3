package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/molecule-ai/molecule-relay/internal/handler"
)

// maxBatch caps one direct get batch (TopologyConfig.HistoryTurns is at
// most 1000).
const maxBatch = 1000

// readTimeout bounds a read whose context has no deadline.
const readTimeout = 10 * time.Second

// errNoStream is a direct get nobody answered: the stream does not exist
// (or this user may not read it).
var errNoStream = errors.New("memory: no responders for the memory stream's direct get")

// directGetter reads the messages of one conversation subject with one
// batched direct get ($JS.API.DIRECT.GET.<stream>, {"seq": from,
// "next_by_subj": subject, "batch": n, "no_hdr": true}; nats-server 2.11+,
// ADR-31): the server answers with the subject's messages from seq on,
// oldest first, then an end-of-batch status (204, with
// Nats-Last-Sequence) or 404 when there are none.
// nats.go's jetstream package offers only single-message gets, so the
// request is made here. The answers of every read come in on one
// wildcard subscription and are routed by the inbox token, so a read does
// not subscribe and unsubscribe on the server.
type directGetter struct {
	nc      *nats.Conn
	api     string
	batch   int
	prefix  string
	once    sync.Once
	sub     *nats.Subscription
	subErr  error
	mu      sync.Mutex
	next    uint64
	waiting map[string]chan *nats.Msg
}

// newDirectGetter reads stream, whose subjects hold at most perSubject
// messages each.
func newDirectGetter(nc *nats.Conn, stream string, perSubject int) *directGetter {
	return &directGetter{nc: nc, api: "$JS.API.DIRECT.GET." + stream, batch: perSubject + 1, waiting: map[string]chan *nats.Msg{}}
}

// subscribe opens the wildcard subscription of answers, once.
func (g *directGetter) subscribe() error {
	g.once.Do(func() {
		g.prefix = g.nc.NewRespInbox() + "."
		g.sub, g.subErr = g.nc.Subscribe(g.prefix+"*", func(m *nats.Msg) {
			g.mu.Lock()
			ch := g.waiting[m.Subject[len(g.prefix):]]
			g.mu.Unlock()
			if ch == nil {
				return // the read gave up
			}
			select {
			case ch <- m:
			default: // more answers than a batch can have: the reader sees the gap as a timeout
			}
		})
	})
	return g.subErr
}

// close ends the subscription of answers (a getter of one command; a
// Store's lives as long as its connection).
func (g *directGetter) close() {
	if g.sub != nil {
		_ = g.sub.Unsubscribe()
	}
}

// record is one stored message of a conversation, decoded: its turns
// and each one's size as stored (compact JSON), or a forget marker.
type record struct {
	turns  []handler.Turn
	sizes  []int
	forget bool
	// sum identifies the stored message by its bytes (sumOf), so that a
	// probe of a conversation's oldest message finds it among those a
	// Store holds (readcache.go).
	sum uint64
}

// sumSeed is the seed of every sum this process takes.
var sumSeed = maphash.MakeSeed()

// sumOf is the sum of a stored message's bytes.
func sumOf(data []byte) uint64 { return maphash.Bytes(sumSeed, data) }

// decodeRecord decodes a stored message. ok is false for one that is
// neither a list of turns nor a forget marker (skipped). A turn that does
// not decode is skipped.
func decodeRecord(data []byte) (r record, ok bool) {
	if isForgetMarker(data) {
		return record{forget: true}, true
	}
	var raws []json.RawMessage
	if json.Unmarshal(data, &raws) != nil {
		return record{}, false
	}
	r.turns = make([]handler.Turn, 0, len(raws))
	r.sizes = make([]int, 0, len(raws))
	for _, raw := range raws {
		var t handler.Turn
		if json.Unmarshal(raw, &t) != nil {
			continue
		}
		r.turns = append(r.turns, t)
		r.sizes = append(r.sizes, len(raw))
	}
	return r, true
}

// records returns the messages on subject from seq on (from its first
// when seq is 0), oldest first, decoded (one that is neither turns nor a
// forget marker as a record without turns), and the sequence of the last
// one (0 when there is none).
func (g *directGetter) records(ctx context.Context, subject string, seq uint64) ([]record, uint64, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, readTimeout)
		defer cancel()
	}
	var out []record
	var lastSeq uint64
	for {
		datas, last, err := g.batchFrom(ctx, subject, seq)
		if err != nil {
			return nil, 0, err
		}
		for _, d := range datas {
			r, ok := decodeRecord(d)
			if !ok {
				r = record{} // no turns, but one of the messages the stream holds
			}
			r.sum = sumOf(d)
			out = append(out, r)
		}
		if last != 0 {
			lastSeq = last
		}
		// A batch is one more than the stream keeps of a subject, so a
		// full one means the bound was raised after this reader learned
		// it: read on from the last message answered. (With no_hdr the
		// end of batch's Nats-Num-Pending is not decremented for what was
		// sent, nats-server v2.15.2 stream.go getDirectRequest, so it
		// cannot say.)
		if len(datas) < g.batch || last == 0 {
			return out, lastSeq, nil
		}
		seq = last + 1
	}
}

// turns returns the turns of every message on subject, oldest first, each
// turn once (the first of any with the same non-empty ActivityID and
// Role), none of those before a forget marker.
func (g *directGetter) turns(ctx context.Context, subject string) ([]handler.Turn, error) {
	recs, _, err := g.records(ctx, subject, 0)
	if err != nil {
		return nil, err
	}
	var out []handler.Turn
	for _, r := range fromForget(recs) { // the marker has no turns
		out = append(out, r.turns...)
	}
	return dedupe(out), nil
}

// directGetRequest is the body of a batched direct get (nats-server's
// JSApiMsgGetRequest fields the reads use).
type directGetRequest struct {
	Seq       uint64 `json:"seq,omitempty"`
	NextFor   string `json:"next_by_subj"`
	Batch     int    `json:"batch"`
	NoHeaders bool   `json:"no_hdr"`
}

func (r directGetRequest) marshal() []byte {
	b, _ := json.Marshal(r) // none of its values can fail
	return b
}

// batchFrom asks for up to a batch of subject's messages from seq on and
// returns their payloads and the last one's sequence.
func (g *directGetter) batchFrom(ctx context.Context, subject string, seq uint64) (datas [][]byte, last uint64, err error) {
	// no_hdr: the turns need no headers, and the server rewrites a stored
	// message's headers for every answer (its Nats-Msg-Id plus six of its
	// own); the end of batch still carries the last sequence and the
	// count left.
	return g.ask(ctx, subject, directGetRequest{Seq: seq, NextFor: subject, Batch: g.batch, NoHeaders: true})
}

// oldest returns the sum of the oldest message on subject, or found
// false when it holds none: one message, found from the stream's
// per-subject index (an unbatched direct get: no count of what follows,
// no end of batch).
func (g *directGetter) oldest(ctx context.Context, subject string) (sum uint64, found bool, err error) {
	datas, _, err := g.ask(ctx, subject, directGetRequest{NextFor: subject, NoHeaders: true})
	if err != nil || len(datas) == 0 {
		return 0, false, err
	}
	return sumOf(datas[0]), true, nil
}

// ask sends req and gathers its answers: a batch's messages up to its
// end, or an unbatched request's one message.
func (g *directGetter) ask(ctx context.Context, subject string, req directGetRequest) (datas [][]byte, last uint64, err error) {
	if err := g.subscribe(); err != nil {
		return nil, 0, fmt.Errorf("memory: subscribe: %w", err)
	}
	ch := make(chan *nats.Msg, max(req.Batch, 1)+2)
	g.mu.Lock()
	g.next++
	token := strconv.FormatUint(g.next, 36)
	g.waiting[token] = ch
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		delete(g.waiting, token)
		g.mu.Unlock()
	}()
	if err := g.nc.PublishRequest(g.api, g.prefix+token, req.marshal()); err != nil {
		return nil, 0, fmt.Errorf("memory: read %s: %w", subject, err)
	}
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("memory: read %s: %w", subject, ctx.Err())
		}
		status := ""
		if m.Header != nil {
			status = m.Header.Get("Status")
		}
		switch status {
		case "":
			datas = append(datas, m.Data)
			if req.Batch == 0 {
				return datas, 0, nil // no end of batch follows
			}
		case "204": // end of batch
			last, _ = strconv.ParseUint(m.Header.Get("Nats-Last-Sequence"), 10, 64)
			return datas, last, nil
		case "404": // the subject holds no message from seq on
			return datas, last, nil
		case "503":
			return nil, 0, fmt.Errorf("%w (%s)", errNoStream, g.api)
		default:
			return nil, 0, fmt.Errorf("memory: read %s: status %s %s", subject, status, m.Header.Get("Description"))
		}
	}
}

// dedupe drops every turn whose non-empty ActivityID and Role an earlier
// turn has: a record repeated after the stream's duplicate window (a
// replay days later) shows once.
func dedupe(turns []handler.Turn) []handler.Turn {
	type id struct{ activity, role string }
	seen := make(map[id]struct{}, len(turns))
	out := turns[:0]
	for _, t := range turns {
		if t.ActivityID != "" {
			k := id{t.ActivityID, t.Role}
			if _, dup := seen[k]; dup {
				continue
			}
			seen[k] = struct{}{}
		}
		out = append(out, t)
	}
	return out
}
