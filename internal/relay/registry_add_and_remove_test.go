package relay_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// TestRegistryAddAndRemove: over 100 adds and 100 removes on a running
// relay, each added workspace is polled within 2 s (add → its first
// activity poll, as the platform double sees it), each removed one is
// polled no more 2 s after its removal (remove → its last request with
// its token other than a reply), and a message in its handler when it is
// removed is still answered; a message sent after the 2 s is not. It
// prints the median and max of both.
func TestRegistryAddAndRemove(t *testing.T) {
	const changes, bound = 100, 2 * time.Second
	w := newRegistryWorld(t)
	rt := w.open(t)
	started := make(chan string, 2*changes)
	var mu sync.Mutex
	release := map[string]chan struct{}{}
	rt.SetHandler(handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		if strings.HasPrefix(req.Message.Text, "hold") {
			mu.Lock()
			ch := release[req.Message.WorkspaceID]
			mu.Unlock()
			started <- req.Message.WorkspaceID
			select {
			case <-ch:
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		return "echo: " + req.Message.Text, nil
	}))
	w.run(t, rt)

	wss := make([]moleculetest.Workspace, changes)
	var added []time.Duration
	for i := range wss {
		ws := w.plat.CreateWorkspace(fmt.Sprintf("agent-%d", i))
		wss[i] = ws
		mu.Lock()
		release[ws.ID] = make(chan struct{})
		mu.Unlock()
		t0 := time.Now()
		w.put(t, ws.ID, ws.Token)
		var first time.Time
		pipelinetest.Eventually(t, 2*bound, fmt.Sprintf("workspace %d's first poll", i), func() bool {
			first = firstPoll(w.plat, ws.Token, t0)
			return !first.IsZero()
		})
		added = append(added, first.Sub(t0))
	}

	removedAt := make([]time.Time, changes)
	for i, ws := range wss {
		w.send(t, ws.ID, fmt.Sprintf("hold %d", i))
		waitStarted(t, started, ws.ID)
		removedAt[i] = time.Now()
		if err := w.admin.Remove(context.Background(), ws.ID); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		close(release[ws.ID]) // in flight at the removal: its answer must still be posted
		mu.Unlock()
	}
	pipelinetest.Eventually(t, 30*time.Second, "every message in flight at its removal answered", func() bool {
		for i, ws := range wss {
			if w.answers(ws.ID, fmt.Sprintf("hold %d", i)) == 0 {
				return false
			}
		}
		return true
	})
	// The bound under test: nothing may be polled after it. Then a message
	// to each; a live poller would fetch it within milliseconds (its event
	// stream) or a poll interval.
	time.Sleep(time.Until(removedAt[changes-1].Add(bound)))
	for i, ws := range wss {
		w.send(t, ws.ID, fmt.Sprintf("after removal %d", i))
	}
	time.Sleep(3 * time.Second) // nothing to wait on: what is tested is that nothing happens

	var removed []time.Duration
	last := lastPolls(w.plat)
	for i, ws := range wss {
		d := max(0, last[ws.Token].Sub(removedAt[i]))
		if d > bound {
			t.Errorf("workspace %d: polled %s after its removal", i, d)
		}
		if w.answers(ws.ID, fmt.Sprintf("after removal %d", i)) != 0 {
			t.Errorf("workspace %d: answered after its removal", i)
		}
		removed = append(removed, d)
	}
	for i, d := range added {
		if d > bound {
			t.Errorf("workspace %d: first polled %s after its add", i, d)
		}
	}
	t.Logf("add → first poll over %d adds: median %s, max %s", changes, median(added), slices.Max(added))
	t.Logf("remove → last poll over %d removes (0: none after the removal): median %s, max %s", changes, median(removed), slices.Max(removed))
}

// firstPoll is when the double first answered a read of the activity
// feed with token, at or after from; zero if not yet.
func firstPoll(plat *moleculetest.Server, token string, from time.Time) time.Time {
	for _, r := range plat.Requests() {
		if r.Method == "GET" && strings.HasSuffix(r.Path, "/activity") && r.Header.Get("Authorization") == "Bearer "+token && !r.At.Before(from) {
			return r.At
		}
	}
	return time.Time{}
}

// lastPolls is, by token, the last request the double received that is
// the poller's (anything but a reply posted: notify, A2A).
func lastPolls(plat *moleculetest.Server) map[string]time.Time {
	last := map[string]time.Time{}
	for _, r := range plat.Requests() {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if strings.HasSuffix(r.Path, "/notify") || strings.HasSuffix(r.Path, "/a2a") {
			continue
		}
		if r.At.After(last[tok]) {
			last[tok] = r.At
		}
	}
	return last
}

func waitStarted(t *testing.T, started <-chan string, ws string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case id := <-started:
			if id == ws {
				return
			}
		case <-timeout:
			t.Fatalf("workspace %s: its message did not reach the handler", ws)
		}
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
