package moleculetest_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// docs/protocol.md §4, as on the 2026-05 server: under concurrent senders a
// row is stamped when accepted but becomes visible later, behind rows
// accepted (and stamped) after it. The feed read at that moment lacks it
// while newer rows are there; once committed it sits at its earlier place.
func TestLateCommitUnderConcurrentSendersBecomesVisibleBehindNewerRows(t *testing.T) {
	const lag, senders, each = 2 * time.Second, 8, 5
	s := newServer(t, moleculetest.WithLateCommit(0.2, lag), moleculetest.WithRateLimit(0, 0))
	a := s.CreateWorkspace("ext-A")
	registerPoll(t, s, a)
	feed := func() []map[string]any {
		return call(t, s, "GET", "/workspaces/"+a.ID+"/activity?type=a2a_receive&limit=100", bearerH(a.Token), "").array(t)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				if code, _, err := s.SendCanvas(context.Background(), a.ID, "s"+strconv.Itoa(i)+"m"+strconv.Itoa(j)); err != nil || code != 200 {
					t.Errorf("send: %d %v", code, err)
				}
			}
		}()
	}
	wg.Wait()
	early := feed() // newest first
	if time.Since(start) >= lag {
		t.Skip("machine too slow: the late rows committed before the feed was read")
	}
	visible := map[string]bool{}
	for _, r := range early {
		visible[r["id"].(string)] = true
	}
	if n := len(early); n != senders*each*4/5 {
		t.Fatalf("%d rows visible right after the sends, want %d (every 5th late)", n, senders*each*4/5)
	}
	newestVisible := early[0]["created_at"].(string)
	waitFor(t, "late rows committed", 10*time.Second, func() bool { return len(feed()) == senders*each })
	late, behind := 0, 0
	for _, r := range feed() {
		if visible[r["id"].(string)] {
			continue
		}
		late++
		if before(t, r["created_at"].(string), newestVisible) {
			behind++
		}
	}
	if late != senders*each/5 {
		t.Fatalf("%d late rows, want %d", late, senders*each/5)
	}
	// Only the newest late row may have nothing newer visible before it.
	if behind < late-1 {
		t.Fatalf("%d of %d late rows sit behind a row that was visible before them, want at least %d", behind, late, late-1)
	}
}

func before(t *testing.T, a, b string) bool {
	t.Helper()
	ta, err := time.Parse(time.RFC3339Nano, a)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := time.Parse(time.RFC3339Nano, b)
	if err != nil {
		t.Fatal(err)
	}
	return ta.Before(tb)
}
