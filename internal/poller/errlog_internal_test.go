package poller

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// An unchanged failure is logged again only after RepeatLogEvery, with
// the count of repeats; a changed one at once.
func TestRepeatLogInterval(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var r repeatLog
	boom := errors.New("boom")
	for range 4 {
		r.failed(t.Context(), log, "failed", boom)
	}
	if n := strings.Count(buf.String(), "boom"); n != 1 {
		t.Fatalf("%d lines for 4 identical failures:\n%s", n, buf.String())
	}
	r.loggedAt = time.Now().Add(-RepeatLogEvery) // as if the interval passed
	r.failed(t.Context(), log, "failed", boom)
	if !strings.Contains(buf.String(), "repeated=4") {
		t.Fatalf("the repeat line lacks the count:\n%s", buf.String())
	}
	r.failed(t.Context(), log, "failed", errors.New("other"))
	if !strings.Contains(buf.String(), "error=other") {
		t.Fatalf("a changed failure was not logged:\n%s", buf.String())
	}
}
