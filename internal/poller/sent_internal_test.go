package poller

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// TestSentSetRemembersMoreThanTheCursorsRecentSet: what this process
// published is recognised for the whole keep window, beyond the cursor's
// maxRecent ids, and forgotten once older than keep.
func TestSentSetRemembersMoreThanTheCursorsRecentSet(t *testing.T) {
	now := time.Now()
	keep := 3 * time.Minute
	var s sentSet
	n := 4 * maxRecent
	rows := make([]recentID, n)
	for i := range rows {
		rows[i] = recentID{id: fmt.Sprintf("a-%d", i), createdAt: now.Add(-time.Duration(n-i) * 10 * time.Millisecond)}
	}
	s.add(rows, keep, now)
	for _, i := range []int{0, maxRecent, n - 1} {
		if !s.has(molecule.ActivityRow{ID: rows[i].id}) {
			t.Errorf("row %d of %d published by this process not recognised", i, n)
		}
	}
	if s.has(molecule.ActivityRow{ID: "never-sent"}) || s.has(molecule.ActivityRow{}) {
		t.Error("a row never published (or without an id) recognised")
	}
	later := now.Add(keep + time.Minute)
	s.add([]recentID{{id: "new", createdAt: later}}, keep, later)
	if s.has(molecule.ActivityRow{ID: rows[n-1].id}) || !s.has(molecule.ActivityRow{ID: "new"}) {
		t.Error("rows older than keep are still remembered, or the new one is not")
	}
}

// The snapshot keeps every id exactly (UUIDs in 16 bytes, anything else
// as it is) and every created_at to the microsecond, oldest first.
func TestSentSnapshotRoundTripsIDsAndTimes(t *testing.T) {
	base := time.Date(2026, 11, 26, 12, 0, 0, 123456000, time.UTC)
	rows := []recentID{
		{"0b6f3c1e-2a4d-4e8f-9a1b-3c5d7e9f0a2b", base},
		{"row-7", base}, // same microsecond, not a UUID
		{"0B6F3C1E-2A4D-4E8F-9A1B-3C5D7E9F0A2B", base.Add(time.Microsecond)}, // upper case kept as is
		{"ffffffff-ffff-ffff-ffff-ffffffffffff", base.Add(90 * time.Second)},
	}
	got, err := decodeSent(encodeSent(rows))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rows) {
		t.Fatalf("decoded %d rows, want %d", len(got), len(rows))
	}
	for i := range rows {
		if got[i].id != rows[i].id || !got[i].createdAt.Equal(rows[i].createdAt) {
			t.Errorf("row %d: got %s at %s, want %s at %s", i, got[i].id, got[i].createdAt, rows[i].id, rows[i].createdAt)
		}
	}
	if size := len(encodeSent(rows[:1])); size > 1+binary.MaxVarintLen64+17 {
		t.Errorf("a UUID row takes %d bytes", size)
	}
	if _, err := decodeSent([]byte{sentFormat, 5, 0, 1}); err == nil {
		t.Error("a truncated snapshot decoded without error")
	}
}

// A snapshot's rows leave pending once it is written; a row added while
// it was written stays.
func TestWrittenSnapshotLeavesOnlyNewerRowsPending(t *testing.T) {
	now := time.Now()
	keep := 3 * time.Minute
	var s sentSet
	s.add([]recentID{{"a", now}, {"b", now}}, keep, now)
	rows := s.snapshot(keep, now)
	s.add([]recentID{{"c", now}}, keep, now) // published during the write
	s.saved(rows, now)
	if got := s.unsaved(keep, now); len(got) != 1 || got["c"] != now.UnixMicro() {
		t.Fatalf("pending after the write: %v, want only c", got)
	}
	if !s.has(molecule.ActivityRow{ID: "a"}) {
		t.Fatal("a row in the snapshot is no longer recognised")
	}
}

// The stored cursor's ids are adopted once per process: adopted again, a
// record saved before this process's snapshot would put back what the
// snapshot holds.
func TestCursorRecentIsAdoptedOnce(t *testing.T) {
	now := time.Now()
	keep := 3 * time.Minute
	var s sentSet
	s.adopt(map[string]int64{"old": now.UnixMicro()}, keep, now)
	s.saved(s.snapshot(keep, now), now)
	s.adopt(map[string]int64{"old": now.UnixMicro()}, keep, now)
	if got := s.unsaved(keep, now); len(got) != 0 {
		t.Fatalf("pending after a second adopt: %v, want none", got)
	}
	if !s.has(molecule.ActivityRow{ID: "old"}) {
		t.Fatal("the adopted id is not recognised")
	}
}

// A delivered page does not walk every remembered id: rows older than
// keep are dropped by a sweep at most every sentSweepEvery, and by the
// first one due.
func TestSentSetSweepsOldRowsAtMostEverySweepInterval(t *testing.T) {
	now := time.Now()
	keep := 3 * time.Minute
	var s sentSet
	s.add([]recentID{{"old", now}}, keep, now)
	justAfter := now.Add(keep + time.Second) // "old" is now older than keep
	s.add([]recentID{{"b", justAfter}}, keep, now.Add(sentSweepEvery/2))
	if !s.has(molecule.ActivityRow{ID: "old"}) {
		t.Fatal("a page swept the set before the sweep interval passed")
	}
	s.add([]recentID{{"c", justAfter}}, keep, justAfter)
	if s.has(molecule.ActivityRow{ID: "old"}) {
		t.Fatal("a row older than keep survived the sweep that was due")
	}
	if got := s.unsaved(keep, justAfter); len(got) != 2 {
		t.Fatalf("pending after the sweep: %v, want b and c", got)
	}
}

// BenchmarkSentSetAddOnePage is the poller's bookkeeping for a page of
// one row, one message at a time at ten messages a second (the rate
// limit's pace), over the default keep window (3 minutes): 1,800 ids
// remembered, and as many pending as the snapshots leave.
func BenchmarkSentSetAddOnePage(b *testing.B) {
	const every = 100 * time.Millisecond
	now := time.Now()
	keep := DefaultOverlapWindow + recentSlack
	var s sentSet
	rows := make([]recentID, keep/every)
	for i := range rows {
		rows[i] = recentID{id: fmt.Sprintf("a-%d", i), createdAt: now.Add(-time.Duration(len(rows)-i) * every)}
	}
	s.add(rows, keep, now)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		at := now.Add(time.Duration(i) * every)
		s.add([]recentID{{fmt.Sprintf("n-%d", i), at}}, keep, at)
		if i%100 == 99 { // a snapshot every 10 s
			s.saved(s.snapshot(keep, at), at)
		}
	}
}
