package pollgroup_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/molecule-ai/molecule-relay/internal/pollgroup"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
)

const stopTakes = 100 * time.Millisecond

// tracker stands in for the poller: it records which member polls each
// workspace and every moment two polled one at once.
type tracker struct {
	mu      sync.Mutex
	by      map[string]string // workspace → member polling it
	doubles []string
	// Once counting: the most workspaces of total unpolled at once.
	counting     bool
	total        int
	mostUnpolled int
}

// noteUnpolled records how many are unpolled now; tr.mu is held.
func (tr *tracker) noteUnpolled() {
	if tr.counting {
		tr.mostUnpolled = max(tr.mostUnpolled, tr.total-len(tr.by))
	}
}

func (tr *tracker) poll(member string) func(context.Context, string) error {
	return func(ctx context.Context, ws string) error {
		tr.mu.Lock()
		if other, ok := tr.by[ws]; ok {
			tr.doubles = append(tr.doubles, ws+" by "+other+" and "+member)
		}
		tr.by[ws] = member
		tr.mu.Unlock()
		<-ctx.Done()
		// A poll stops after the cycle in flight: a hand-over that did
		// not wait for it would overlap.
		time.Sleep(stopTakes)
		tr.mu.Lock()
		if tr.by[ws] == member {
			delete(tr.by, ws)
		}
		tr.noteUnpolled()
		tr.mu.Unlock()
		return nil
	}
}

// shares returns how many workspaces each member polls, and how many are
// polled at all.
func (tr *tracker) shares() (map[string]int, int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := map[string]int{}
	for _, m := range tr.by {
		out[m]++
	}
	return out, len(tr.by)
}

// waitFor waits until ok holds of the shares.
func (tr *tracker) waitFor(t *testing.T, what string, ok func(map[string]int, int) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, n := tr.shares()
		if ok(s, n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20s; polled %d, by member %v", what, n, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// member runs one member on its own connection; stop ends it as SIGTERM
// would, cut takes its connection away as a crash or a partition would.
type member struct {
	nc   *nats.Conn
	stop context.CancelFunc
	done chan struct{}
}

func startMember(t *testing.T, url, id string, ws []string, tr *tracker) *member {
	t.Helper()
	nc, js := natstest.ConnectCuttable(t, url)
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{nc: nc, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		if err := pollgroup.Run(ctx, js, pollgroup.Config{Group: "g1", Instance: id, Workspaces: ws, Poll: tr.poll(id), TTL: time.Second}); err != nil {
			t.Errorf("member %s: %v", id, err)
		}
	}()
	t.Cleanup(func() { cancel(); <-m.done; nc.Close() })
	return m
}

// A group of members divides the workspaces; a join, a graceful leave and
// a member cut off from NATS each move workspaces, and at no moment do two
// members poll one workspace.
func TestHandOverNeverPollsAWorkspaceTwice(t *testing.T) {
	srv := natstest.Start(t)
	url := srv.ClientURL()
	ws := workspaceIDs(60)
	tr := &tracker{by: map[string]string{}}
	all := func(s map[string]int, n int) bool { return n == len(ws) }

	a := startMember(t, url, "a", ws, tr)
	b := startMember(t, url, "b", ws, tr)
	tr.waitFor(t, "a and b share the fleet", func(s map[string]int, n int) bool { return n == len(ws) && s["a"] > 0 && s["b"] > 0 })

	startMember(t, url, "c", ws, tr)
	tr.waitFor(t, "c takes its share", func(s map[string]int, n int) bool { return all(s, n) && s["c"] > 0 && s["a"]+s["b"]+s["c"] == n })

	// a loses NATS: it stops polling when its lease lapses, the others
	// take its share once they count it dead.
	a.nc.Close()
	tr.waitFor(t, "a's share moves to b and c", func(s map[string]int, n int) bool { return all(s, n) && s["a"] == 0 })

	// b leaves gracefully: it releases its claims, c takes them at once.
	b.stop()
	<-b.done
	tr.waitFor(t, "b's share moves to c", func(s map[string]int, n int) bool { return s["c"] == len(ws) })

	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.doubles) > 0 {
		t.Fatalf("workspaces polled by two members at once: %v", tr.doubles)
	}
}
