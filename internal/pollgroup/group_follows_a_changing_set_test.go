package pollgroup_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/pollgroup"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
)

// set is a pollgroup.Source the test changes (the workspace registry's
// Current and Changed in a relay).
type set struct {
	mu      sync.Mutex
	ids     []string
	changed []chan struct{}
}

func (s *set) Current() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ids...)
}

func (s *set) source() pollgroup.Source {
	c := make(chan struct{}, 1)
	s.mu.Lock()
	s.changed = append(s.changed, c)
	s.mu.Unlock()
	return memberSource{s, c}
}

func (s *set) set(ids []string) {
	s.mu.Lock()
	s.ids = ids
	for _, c := range s.changed {
		select {
		case c <- struct{}{}:
		default:
		}
	}
	s.mu.Unlock()
}

type memberSource struct {
	*set
	c chan struct{}
}

func (m memberSource) Changed() <-chan struct{} { return m.c }

// TestGroupFollowsAChangingSet: two members with a Source poll every
// workspace added to it, stop every one removed from it, and never poll
// one twice.
func TestGroupFollowsAChangingSet(t *testing.T) {
	srv := natstest.Start(t)
	all := workspaceIDs(40)
	s := &set{ids: all[:20]}
	tr := &tracker{by: map[string]string{}}
	for _, id := range []string{"a", "b"} {
		nc, err := nats.Connect(srv.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = pollgroup.Run(ctx, js, pollgroup.Config{Group: "g1", Instance: id, Source: s.source(), Poll: tr.poll(id), TTL: time.Second})
		}()
		t.Cleanup(func() { cancel(); <-done; nc.Close() })
	}
	tr.waitFor(t, "the first 20 polled by both", func(m map[string]int, n int) bool { return n == 20 && m["a"] > 0 && m["b"] > 0 })
	s.set(all[10:40])
	removedStopped := func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		for _, ws := range all[:10] {
			if tr.by[ws] != "" {
				return false
			}
		}
		return true
	}
	tr.waitFor(t, "the 30 of the new set, the removed 10 stopped", func(m map[string]int, n int) bool { return n == 30 && removedStopped() })
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.doubles) > 0 {
		t.Errorf("polled twice: %v", tr.doubles)
	}
}
