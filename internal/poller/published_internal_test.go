package poller

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// TestPublishedRemembersMoreThanTheCursorsRecentSet: what this process
// published is recognised for the whole keep window, beyond the cursor's
// maxRecent ids, and forgotten once older than keep.
func TestPublishedRemembersMoreThanTheCursorsRecentSet(t *testing.T) {
	now := time.Now()
	keep := 3 * time.Minute
	s := newPublished(nil, "", keep, nil)
	n := 4 * maxRecent
	rows := make([]recentID, n)
	for i := range rows {
		rows[i] = recentID{id: fmt.Sprintf("a-%d", i), createdAt: now.Add(-time.Duration(n-i) * 10 * time.Millisecond)}
	}
	s.add(rows, now)
	for _, i := range []int{0, maxRecent, n - 1} {
		if !s.recognises(molecule.ActivityRow{ID: rows[i].id}, &cursorValue{}) {
			t.Errorf("row %d of %d published by this process not recognised", i, n)
		}
	}
	if s.recognises(molecule.ActivityRow{ID: "never-sent"}, &cursorValue{}) || s.recognises(molecule.ActivityRow{}, &cursorValue{}) {
		t.Error("a row never published (or without an id) recognised")
	}
	later := now.Add(keep + time.Minute)
	s.add([]recentID{{id: "new", createdAt: later}}, later)
	if s.recognises(molecule.ActivityRow{ID: rows[n-1].id}, &cursorValue{}) || !s.recognises(molecule.ActivityRow{ID: "new"}, &cursorValue{}) {
		t.Error("rows older than keep are still remembered, or the new one is not")
	}
}

// The snapshot keeps every id exactly (UUIDs in 16 bytes, anything else
// as it is) and every created_at to the microsecond, oldest first.
func TestPublishedSnapshotRoundTripsIDsAndTimes(t *testing.T) {
	base := time.Date(2026, 11, 26, 12, 0, 0, 123456000, time.UTC)
	rows := []recentID{
		{"0b6f3c1e-2a4d-4e8f-9a1b-3c5d7e9f0a2b", base},
		{"row-7", base}, // same microsecond, not a UUID
		{"0B6F3C1E-2A4D-4E8F-9A1B-3C5D7E9F0A2B", base.Add(time.Microsecond)}, // upper case kept as is
		{"ffffffff-ffff-ffff-ffff-ffffffffffff", base.Add(90 * time.Second)},
	}
	got, err := decodeSnapshot(encodeSnapshot(rows))
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
	if size := len(encodeSnapshot(rows[:1])); size > 1+binary.MaxVarintLen64+17 {
		t.Errorf("a UUID row takes %d bytes", size)
	}
	if _, err := decodeSnapshot([]byte{snapshotFormat, 5, 0, 1}); err == nil {
		t.Error("a truncated snapshot decoded without error")
	}
}

// A snapshot's rows leave pending once it is written; a row added while
// it was written stays.
func TestWrittenSnapshotLeavesOnlyNewerRowsPending(t *testing.T) {
	now := time.Now()
	keep := 3 * time.Minute
	s := newPublished(nil, "", keep, nil)
	s.add([]recentID{{"a", now}, {"b", now}}, now)
	rows := s.snapshot(now)
	s.add([]recentID{{"c", now}}, now) // published during the write
	s.saved(rows, now)
	if got := s.forCursor(nil, now); len(got) != 1 || got["c"] != now.UnixMicro() {
		t.Fatalf("pending after the write: %v, want only c", got)
	}
	if !s.recognises(molecule.ActivityRow{ID: "a"}, &cursorValue{}) {
		t.Fatal("a row in the snapshot is no longer recognised")
	}
}

// The stored cursor's ids are adopted once per process: adopted again, a
// record saved before this process's snapshot would put back what the
// snapshot holds.
func TestCursorRecentIsAdoptedOnce(t *testing.T) {
	now := time.Now()
	keep := 3 * time.Minute
	s := newPublished(nil, "", keep, nil)
	s.adopt(map[string]int64{"old": now.UnixMicro()}, now)
	s.saved(s.snapshot(now), now)
	s.adopt(map[string]int64{"old": now.UnixMicro()}, now)
	if got := s.forCursor(nil, now); len(got) != 0 {
		t.Fatalf("pending after a second adopt: %v, want none", got)
	}
	if !s.recognises(molecule.ActivityRow{ID: "old"}, &cursorValue{}) {
		t.Fatal("the adopted id is not recognised")
	}
}

// A delivered page does not walk every remembered id: rows older than
// keep are dropped by a sweep at most every publishedSweepEvery, and by the
// first one due.
func TestPublishedSweepsOldRowsAtMostEverySweepInterval(t *testing.T) {
	now := time.Now()
	keep := 3 * time.Minute
	s := newPublished(nil, "", keep, nil)
	s.add([]recentID{{"old", now}}, now)
	justAfter := now.Add(keep + time.Second) // "old" is now older than keep
	s.add([]recentID{{"b", justAfter}}, now.Add(publishedSweepEvery/2))
	if !s.recognises(molecule.ActivityRow{ID: "old"}, &cursorValue{}) {
		t.Fatal("a page swept the set before the sweep interval passed")
	}
	s.add([]recentID{{"c", justAfter}}, justAfter)
	if s.recognises(molecule.ActivityRow{ID: "old"}, &cursorValue{}) {
		t.Fatal("a row older than keep survived the sweep that was due")
	}
	if got := s.forCursor(nil, justAfter); len(got) != 2 {
		t.Fatalf("pending after the sweep: %v, want b and c", got)
	}
}

// BenchmarkPublishedAddOnePage is the poller's bookkeeping for a page of
// one row, one message at a time at ten messages a second (the rate
// limit's pace), over the default keep window (3 minutes): 1,800 ids
// remembered, and as many pending as the snapshots leave.
func BenchmarkPublishedAddOnePage(b *testing.B) {
	const every = 100 * time.Millisecond
	now := time.Now()
	keep := DefaultOverlapWindow + recentSlack
	s := newPublished(nil, "", keep, nil)
	rows := make([]recentID, keep/every)
	for i := range rows {
		rows[i] = recentID{id: fmt.Sprintf("a-%d", i), createdAt: now.Add(-time.Duration(len(rows)-i) * every)}
	}
	s.add(rows, now)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		at := now.Add(time.Duration(i) * every)
		s.add([]recentID{{fmt.Sprintf("n-%d", i), at}}, at)
		if i%100 == 99 { // a snapshot every 10 s
			s.saved(s.snapshot(at), at)
		}
	}
}

// A row is recognised when this process published it or when the cursor
// record read names it (another poller, or this one's predecessor, did);
// a checkpoint carries both, within keep, the newest maxRecent.
func TestPublishedRecognisesTheCursorsRowsAndCheckpointsCarryBoth(t *testing.T) {
	now := time.Now()
	keep := 3 * time.Minute
	s := newPublished(nil, "", keep, nil)
	s.add([]recentID{{"mine", now}}, now)
	cursor := &cursorValue{Recent: map[string]int64{"theirs": now.UnixMicro(), "aged": now.Add(-keep - time.Second).UnixMicro()}}
	for id, want := range map[string]bool{"mine": true, "theirs": true, "never": false} {
		if got := s.recognises(molecule.ActivityRow{ID: id}, cursor); got != want {
			t.Errorf("row %s recognised %v, want %v", id, got, want)
		}
	}
	cp := s.forCheckpoint(cursor.Recent, now)
	if _, aged := cp["aged"]; len(cp) != 2 || aged || cp["mine"] == 0 || cp["theirs"] == 0 {
		t.Errorf("checkpoint ids %v, want mine and theirs", cp)
	}
	for i := range 2 * maxRecent {
		s.add([]recentID{{fmt.Sprintf("n-%d", i), now.Add(time.Duration(i) * time.Microsecond)}}, now)
	}
	if cp := s.forCheckpoint(cursor.Recent, now); len(cp) != maxRecent || cp[fmt.Sprintf("n-%d", 2*maxRecent-1)] == 0 {
		t.Errorf("checkpoint of %d ids keeps %d, want the newest %d", 2*maxRecent+2, len(cp), maxRecent)
	}
}
