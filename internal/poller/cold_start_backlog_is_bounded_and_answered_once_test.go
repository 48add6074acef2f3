package poller_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
)

// lockedBuffer is a log sink safe for the poller's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines(level string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, ln := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(ln, "level="+level) {
			out = append(out, ln)
		}
	}
	return out
}

func bufferLogger(b *lockedBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

func texts(e *env) []string {
	var out []string
	for _, m := range e.inbound() {
		out = append(out, m.Text)
	}
	return out
}

// Messages queued before the workspace's newest own reply were read by
// whoever posted that reply (an earlier relay whose store is gone, or the
// TypeScript channel): a fresh store does not deliver them again. Those
// queued after it are delivered, oldest first. Before, every message of
// the backlog window was delivered again.
func TestColdStartTakesMessagesBeforeTheNewestReplyAsAnswered(t *testing.T) {
	e := newEnv(t)
	e.register(e.ws)
	e.sendCanvas(e.ws.ID, "answered 1")
	e.sendCanvas(e.ws.ID, "answered 2")
	if _, err := e.client(e.ws).Notify(ctx(t), "the earlier relay's reply", nil); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		e.sendCanvas(e.ws.ID, fmt.Sprint("queued ", i))
	}
	var logs lockedBuffer
	r := e.runOnce(e.poller(poller.Config{BacklogWindow: time.Hour, BacklogLimit: 100, PageLimit: 2, Logger: bufferLogger(&logs)}))
	ids := e.messageRowIDs(e.ws.ID)
	if got, want := strings.Join(texts(e), ","), "queued 0,queued 1,queued 2"; got != want || r.Cursor != ids[len(ids)-1] {
		t.Fatalf("delivered %q, cursor %s; want %q and the newest row %s", got, r.Cursor, want, ids[len(ids)-1])
	}
	if n := len(logs.lines("WARN")); n != 0 {
		t.Errorf("%d WARN lines, want none: nothing was left out by the bound", n)
	}

	// The next cycle (its overlap re-read included) delivers nothing more.
	if r := e.runOnce(e.poller(poller.Config{BacklogWindow: time.Hour, BacklogLimit: 100})); r.Published != 0 {
		t.Fatalf("next run published %d", r.Published)
	}
}

// A backlog beyond BacklogLimit delivers the newest messages, oldest
// first, and one WARN line counts the rest and names the setting; no later
// re-read delivers them. Before, the whole window was delivered.
func TestColdStartBacklogLimitKeepsTheNewestAndWarnsOfTheRest(t *testing.T) {
	e := newEnv(t)
	e.register(e.ws)
	for i := range 7 {
		e.sendCanvas(e.ws.ID, fmt.Sprint("m", i))
	}
	var logs lockedBuffer
	p := e.poller(poller.Config{BacklogWindow: time.Hour, BacklogLimit: 3, PageLimit: 2, Logger: bufferLogger(&logs)})
	r := e.runOnce(p)
	if got, want := strings.Join(texts(e), ","), "m4,m5,m6"; got != want {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	if r.Skipped[poller.SkipBacklogBound] != 4 {
		t.Errorf("skipped %v, want 4 %s", r.Skipped, poller.SkipBacklogBound)
	}
	warns := logs.lines("WARN")
	if len(warns) != 1 || !strings.Contains(warns[0], "4 queued messages older than the newest 3") || !strings.Contains(warns[0], "MOLECULE_BACKLOG_LIMIT") {
		t.Fatalf("WARN lines %q; want one counting 4 and naming MOLECULE_BACKLOG_LIMIT", warns)
	}
	if r := e.runOnce(p); r.Published != 0 {
		t.Fatalf("next run published %d of the messages left out", r.Published)
	}
}

// Messages older than the backlog window are counted in one WARN line that
// names MOLECULE_BACKLOG_WINDOW, never left out silently.
func TestColdStartWindowLeavesOutOlderMessagesAndWarns(t *testing.T) {
	e := newEnv(t)
	e.register(e.ws)
	e.sendCanvas(e.ws.ID, "old 0")
	e.sendCanvas(e.ws.ID, "old 1")
	sent := time.Now()
	const window = 300 * time.Millisecond
	waitFor(t, 5*time.Second, "the old messages to be older than the window", func() bool { return time.Since(sent) > 2*window })
	e.sendCanvas(e.ws.ID, "recent")
	var logs lockedBuffer
	r := e.runOnce(e.poller(poller.Config{BacklogWindow: window, BacklogLimit: 100, Logger: bufferLogger(&logs)}))
	if got := strings.Join(texts(e), ","); got != "recent" {
		t.Fatalf("delivered %q, want only the recent message", got)
	}
	warns := logs.lines("WARN")
	if len(warns) != 1 || !strings.Contains(warns[0], "2 queued messages older than 300ms") || !strings.Contains(warns[0], "MOLECULE_BACKLOG_WINDOW") {
		t.Fatalf("WARN lines %q; want one counting 2 and naming MOLECULE_BACKLOG_WINDOW", warns)
	}
	if r.Skipped[poller.SkipBacklogBound] != 2 {
		t.Errorf("skipped %v", r.Skipped)
	}
}
