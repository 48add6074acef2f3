package jsonread_test

import (
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/internal/jsonread"
)

// FuzzUTCTimeMatchesTimeParse: whatever UTCTime accepts, time.Parse with
// time.RFC3339Nano accepts too and reads as the same instant in the same
// location.
func FuzzUTCTimeMatchesTimeParse(f *testing.F) {
	for _, s := range []string{
		"2026-11-21T17:25:36.745773Z", "2026-11-21T17:28:10.5Z", "2026-11-21T17:30:02Z",
		"2026-11-21T17:30:02.123456789Z", "2026-11-21T17:30:02.1234567891Z", "2026-11-21T17:30:02.Z",
		"2024-02-29T00:00:00Z", "2025-02-29T00:00:00Z", "2100-02-29T00:00:00Z", "2000-02-29T00:00:00Z",
		"2026-04-31T00:00:00Z", "2026-00-10T00:00:00Z", "2026-13-10T00:00:00Z", "2026-11-00T00:00:00Z",
		"2026-11-21T24:00:00Z", "2026-11-21T23:60:00Z", "2026-11-21T23:59:60Z", "0000-01-01T00:00:00Z",
		"2026-11-21T17:25:36+00:00", "2026-11-21T17:25:36.5-07:00", "2026-11-21t17:25:36Z", "2026-11-21 17:25:36Z",
		"2026-11-21T17:25:36z", "2026-11-21T17:25:36,5Z", "+026-11-21T17:25:36Z", "2026-1-21T17:25:36Z", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := jsonread.UTCTime([]byte(s))
		want, err := time.Parse(time.RFC3339Nano, s)
		if !ok {
			return // the caller asks time.Parse
		}
		if err != nil {
			t.Fatalf("UTCTime(%q) = %v, time.Parse refuses it: %v", s, got, err)
		}
		if got != want {
			t.Fatalf("UTCTime(%q) = %v (%v), time.Parse %v (%v)", s, got, got.Location(), want, want.Location())
		}
	})
}

// TestUTCTimeReadsThePlatformsForm: the form every fixture row has is
// read by hand, not left to time.Parse.
func TestUTCTimeReadsThePlatformsForm(t *testing.T) {
	for _, s := range []string{"2026-11-21T17:25:36.745773Z", "2026-11-21T17:28:10.5Z", "2026-11-21T17:30:02Z"} {
		if _, ok := jsonread.UTCTime([]byte(s)); !ok {
			t.Errorf("UTCTime(%q) declined", s)
		}
	}
}

// TestUTCTimeDoesNotAllocate: the point of it.
func TestUTCTimeDoesNotAllocate(t *testing.T) {
	b := []byte("2026-11-21T17:25:36.745773Z")
	if n := testing.AllocsPerRun(100, func() { _, _ = jsonread.UTCTime(b) }); n != 0 {
		t.Fatalf("UTCTime allocates %v times", n)
	}
}
