package poller

import "time"

// firstRetryDelay is the wait before the cycle after a failed one; it
// doubles with each further failure up to the poll interval.
//
// Why: a failed cycle (a NATS request to a leader being elected, a
// platform 5xx, a dropped connection) used to wait a whole PollInterval
// (5 s) for the next try, so a blip of a few hundred milliseconds cost
// every message queued meanwhile 5 s. Most such failures are over within
// a second. A 429 is paced separately (pace waits out its Retry-After),
// so retrying sooner never sends a request the platform asked us not to.
const firstRetryDelay = 250 * time.Millisecond

// failRetry is the wait before the next cycle of one workspace's Run loop.
type failRetry struct{ next time.Duration }

// after records a cycle's outcome and says when to try again: after a
// failure, the current delay (250 ms, 500 ms, 1 s, … capped at interval)
// and true while it is shorter than interval; after a success, false (the
// poll timer decides) and the delays start over.
func (f *failRetry) after(err error, interval time.Duration) (time.Duration, bool) {
	if err == nil {
		f.next = 0
		return 0, false
	}
	if f.next == 0 {
		f.next = firstRetryDelay
	}
	d := min(f.next, interval)
	f.next = min(2*f.next, interval)
	return d, d < interval
}
