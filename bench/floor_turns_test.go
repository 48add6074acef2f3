package bench_test

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// floorTurns is the floor's conversation memory: one stream, one subject
// per conversation bounded to the shipped number of turns, read with a
// batched direct get of the messages after the last one read (no headers),
// written with one publish per message. Reads of the conversation run one
// at a time, and the loads that arrive during one share the next, as
// internal/memory's do (its readcache.go); what the floor leaves out is
// that package's cache, decoding and bounds.
type floorTurns struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	subject string
	last    atomic.Uint64 // the newest sequence a read returned

	mu      sync.Mutex
	waiting map[string]chan *nats.Msg
	next    uint64

	flights          sync.Mutex
	inflight, joined chan struct{} // closed when their read ends
}

// load is one handler's history: the read under way's successor, shared
// with every load that arrives while the read under way runs.
func (t *floorTurns) load(ctx context.Context, b *testing.B) {
	t.flights.Lock()
	if t.inflight == nil {
		f := make(chan struct{})
		t.inflight = f
		t.flights.Unlock()
		t.fly(ctx, b, f)
		return
	}
	f, prev, lead := t.joined, t.inflight, false
	if f == nil {
		f, lead = make(chan struct{}), true
		t.joined = f
	}
	t.flights.Unlock()
	if lead {
		<-prev
		t.fly(ctx, b, f)
		return
	}
	<-f
}

func (t *floorTurns) fly(ctx context.Context, b *testing.B, f chan struct{}) {
	t.read(ctx, b)
	t.flights.Lock()
	t.inflight, t.joined = t.joined, nil
	t.flights.Unlock()
	close(f)
}

const floorTurnsStream = "FLOOR_MEM"

func startFloorTurns(b *testing.B, js jetstream.JetStream) *floorTurns {
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: floorTurnsStream, Subjects: []string{floorTurnsStream + ".>"},
		Storage: jetstream.FileStorage, MaxMsgsPerSubject: events.DefaultHistoryTurns, Duplicates: 2 * time.Minute, AllowDirect: true})
	if err != nil {
		b.Fatal(err)
	}
	t := &floorTurns{nc: js.Conn(), js: js, subject: floorTurnsStream + ".ws.canvas", waiting: map[string]chan *nats.Msg{}}
	if _, err := t.nc.Subscribe("_FLOOR_TURNS.>", t.deliver); err != nil {
		b.Fatal(err)
	}
	return t
}

func (t *floorTurns) deliver(m *nats.Msg) {
	token := m.Subject[len("_FLOOR_TURNS."):]
	t.mu.Lock()
	ch := t.waiting[token]
	t.mu.Unlock()
	if ch != nil {
		ch <- m
	}
}

// read asks for the turns after the last one read and waits for the end
// of the batch.
func (t *floorTurns) read(ctx context.Context, b *testing.B) {
	req, _ := json.Marshal(struct {
		Seq       uint64 `json:"seq,omitempty"`
		NextFor   string `json:"next_by_subj"`
		Batch     int    `json:"batch"`
		NoHeaders bool   `json:"no_hdr"`
	}{t.last.Load() + 1, t.subject, events.DefaultHistoryTurns, true})
	ch := make(chan *nats.Msg, events.DefaultHistoryTurns+2)
	t.mu.Lock()
	t.next++
	token := strconv.FormatUint(t.next, 36)
	t.waiting[token] = ch
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.waiting, token)
		t.mu.Unlock()
	}()
	if err := t.nc.PublishRequest("$JS.API.DIRECT.GET."+floorTurnsStream, "_FLOOR_TURNS."+token, req); err != nil {
		b.Errorf("turns read: %v", err)
		return
	}
	for {
		select {
		case m := <-ch:
			if m.Header == nil {
				continue
			}
			switch m.Header.Get("Status") {
			case "": // a turn
			case "204", "404": // end of batch, or nothing after the last read
				if seq, err := strconv.ParseUint(m.Header.Get("Nats-Last-Sequence"), 10, 64); err == nil && seq > t.last.Load() {
					t.last.Store(seq)
				}
				return
			default:
				b.Errorf("turns read: status %s", m.Header.Get("Status"))
				return
			}
		case <-time.After(5 * time.Second):
			b.Errorf("turns read: no end of batch")
			return
		case <-ctx.Done():
			return
		}
	}
}

// record publishes the message's turns (the reply's envelope stands in
// for them: about the same size) and awaits the ack.
func (t *floorTurns) record(ctx context.Context, b *testing.B, data []byte, key string) {
	m := &nats.Msg{Subject: t.subject, Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, "turn-"+key)
	if _, err := t.js.PublishMsg(ctx, m); err != nil {
		b.Errorf("turn publish: %v", err)
	}
}
