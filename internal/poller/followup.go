package poller

import (
	"slices"
	"time"
)

const (
	// wakeRereadWindow is what a woken poll that found nothing re-reads:
	// the announced row committed behind the cursor, its created_at at
	// most its commit lag earlier.
	wakeRereadWindow = 10 * time.Second
	// followUpSlack widens a follow-up's window before the activity that
	// scheduled it: a late row's created_at precedes its commit by the
	// commit's lag (milliseconds on the 2026-05 server).
	followUpSlack = 2 * time.Second
	// followUpGap is the least time between two follow-ups: under steady
	// traffic they coalesce to at most two a second.
	followUpGap = 500 * time.Millisecond
)

// followUps are the quick overlap re-reads due after activity (one
// workspace's Run loop owns them). Each covers the window from the
// activity that scheduled it (less followUpSlack) to its own time.
type followUps struct {
	pending []followUp // by due time
}

type followUp struct{ due, origin time.Time }

// schedule adds a follow-up after each of after, from now; one within
// followUpGap of one already pending is left to that one (it covers
// this activity too: its window reaches back to the earlier origin).
func (f *followUps) schedule(now time.Time, after []time.Duration) {
	for _, d := range after {
		due := now.Add(d)
		if slices.ContainsFunc(f.pending, func(x followUp) bool { return absDur(x.due.Sub(due)) < followUpGap }) {
			continue
		}
		f.pending = append(f.pending, followUp{due: due, origin: now})
	}
	slices.SortFunc(f.pending, func(a, b followUp) int { return a.due.Compare(b.due) })
}

// next is when the next follow-up is due.
func (f *followUps) next() (time.Time, bool) {
	if len(f.pending) == 0 {
		return time.Time{}, false
	}
	return f.pending[0].due, true
}

// take removes the follow-ups due by now and returns the window they
// re-read, or 0 when none is due.
func (f *followUps) take(now time.Time) time.Duration {
	var origin time.Time
	n := 0
	for _, x := range f.pending {
		if x.due.After(now) {
			break
		}
		if origin.IsZero() || x.origin.Before(origin) {
			origin = x.origin
		}
		n++
	}
	if n == 0 {
		return 0
	}
	f.pending = slices.Delete(f.pending, 0, n)
	return now.Sub(origin) + followUpSlack
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
