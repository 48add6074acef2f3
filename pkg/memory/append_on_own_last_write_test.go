package memory_test

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/molecule-ai/molecule-relay/internal/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/handler"
	"github.com/molecule-ai/molecule-relay/pkg/memory"
)

// A Store appends on its own last write of a conversation without reading
// the key first (the reads are counted on the wire); when another process
// wrote in between, the compare-and-set fails, the Store reads and merges,
// and no turn is lost.
func TestAppendOnOwnLastWriteSkipsTheReadLosesNoTurn(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	mine, other := memoryOn(t, w.Proc(), memory.Config{Turns: 10}), memoryOn(t, w.Proc(), memory.Config{Turns: 10})
	ctx := pipelinetest.Ctx(t)
	reads := sniffReads(t, w.Obs.NC)

	record := func(s *memory.Store, activity string) {
		t.Helper()
		if n, err := s.Record(ctx, ws, "conv", turn(activity, handler.RoleUser, "q"), turn(activity, handler.RoleAgent, "a")); err != nil || n != 2 {
			t.Fatalf("record %s: added %d, %v", activity, n, err)
		}
	}
	record(mine, "a1") // nothing known yet: read, create
	if n := reads.of(t, mine, "conv"); n != 1 {
		t.Errorf("first write read the key %d times, want 1", n)
	}
	record(mine, "a2") // on its own last write: no read
	if n := reads.of(t, mine, "conv"); n != 0 {
		t.Errorf("append on the Store's own last write read the key %d times, want 0", n)
	}
	record(other, "a3") // another process: mine's last write is now stale
	reads.of(t, mine, "conv")
	record(mine, "a4") // compare-and-set fails, then read and merge
	if n := reads.of(t, mine, "conv"); n != 1 {
		t.Errorf("append on a stale last write read the key %d times, want 1", n)
	}
	got, err := mine.Load(ctx, ws, "conv")
	var ids []string
	for _, tn := range got {
		ids = append(ids, tn.ActivityID+"/"+tn.Role)
	}
	want := "a1/user a1/agent a2/user a2/agent a3/user a3/agent a4/user a4/agent"
	if err != nil || strings.Join(ids, " ") != want {
		t.Fatalf("stored turns %v (%v), want %s", ids, err, want)
	}
}

// wireReads counts the KV reads of one conversation key seen on the wire.
type wireReads struct {
	mu   sync.Mutex
	seen []string // subject + request body of every read
}

// sniffReads subscribes to the JetStream get APIs (direct and not).
func sniffReads(t *testing.T, nc *nats.Conn) *wireReads {
	r := &wireReads{}
	for _, subj := range []string{"$JS.API.DIRECT.GET.>", "$JS.API.STREAM.MSG.GET.>"} {
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
			r.mu.Lock()
			r.seen = append(r.seen, m.Subject+" "+string(m.Data))
			r.mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return r
}

// of returns how many reads of conversation were seen since the last call.
// A probe read through s, of another key, is the barrier: once the sniffer
// has seen it, it has seen every read s made before it.
func (r *wireReads) of(t *testing.T, s *memory.Store, conversation string) int {
	t.Helper()
	probe := fmt.Sprint("probe-", time.Now().UnixNano())
	if _, err := s.Load(pipelinetest.Ctx(t), ws, probe); err != nil {
		t.Fatal(err)
	}
	var n int
	pipelinetest.Eventually(t, 5*time.Second, "the probe read on the wire", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for i, s := range r.seen {
			if strings.Contains(s, probe) {
				n = 0
				for _, before := range r.seen[:i] {
					if bytes.Contains([]byte(before), []byte("."+conversation)) {
						n++
					}
				}
				r.seen = r.seen[i+1:]
				return true
			}
		}
		return false
	})
	return n
}
