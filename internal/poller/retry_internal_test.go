package poller

import (
	"errors"
	"testing"
	"time"
)

// After a failed cycle the next try comes after 250 ms, doubling with each
// further failure up to the poll interval (from then on the poll timer
// alone); a success starts the delays over.
func TestFailedCycleRetryDelayDoublesUpToTheInterval(t *testing.T) {
	var f failRetry
	fail := errors.New("platform 500")
	const interval = 5 * time.Second
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second}
	for i, w := range want {
		d, sooner := f.after(fail, interval)
		if d != w || !sooner {
			t.Fatalf("failure %d: retry after %s (sooner %v), want %s", i+1, d, sooner, w)
		}
	}
	for range 3 {
		if d, sooner := f.after(fail, interval); sooner {
			t.Fatalf("a retry after %s, sooner than the poll interval, once the delay reached it", d)
		}
	}
	if _, sooner := f.after(nil, interval); sooner {
		t.Fatal("a successful cycle scheduled a retry")
	}
	if d, _ := f.after(fail, interval); d != firstRetryDelay {
		t.Fatalf("after a success the first retry waits %s, want %s", d, firstRetryDelay)
	}
	if d, sooner := f.after(fail, 100*time.Millisecond); sooner || d != 100*time.Millisecond {
		t.Fatalf("with a 100 ms interval: %s (sooner %v), want the interval itself", d, sooner)
	}
}
