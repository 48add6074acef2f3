// The quick follow-up re-reads scheduled after activity.

package poller

import (
	"slices"
	"time"
)

const (
	// wakeRereadWindow is what the re-read a woken poll that found
	// nothing owes reads, before the process's first complete re-read
	// (after it, rereadSpan): the announced row committed behind the
	// cursor, its created_at at most its commit lag earlier.
	wakeRereadWindow = 10 * time.Second
	// followUpSlack widens a quick re-read's window before where the
	// previous one started (rereadSpan), or before the activity that
	// scheduled it: a late row's created_at precedes its commit by the
	// commit's lag (milliseconds on the 2026-05 server). Rows committed
	// later than this after their created_at are left to the slow re-read.
	followUpSlack = 2 * time.Second
	// followUpGap is the least time between the starts of two follow-ups:
	// under steady traffic they coalesce to at most two a second.
	followUpGap = 500 * time.Millisecond
)

// followUps are the quick overlap re-reads due after activity, or owed by
// a woken poll that found nothing (one workspace's Run loop owns them).
// Each reads what rereadSpan says; before the process's first complete
// re-read, the window from the activity that scheduled it (less
// followUpSlack) to its own time.
type followUps struct {
	pending []followUp // by due time
	// taken is when the last follow-up was taken: an owed re-read waits
	// followUpGap after it (owe).
	taken time.Time
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

// next is when the next follow-up is due: not within followUpGap of the
// last one taken.
func (f *followUps) next() (time.Time, bool) {
	if len(f.pending) == 0 {
		return time.Time{}, false
	}
	return f.notBefore(f.pending[0].due), true
}

// notBefore is due, or followUpGap after the last follow-up taken if
// that is later.
func (f *followUps) notBefore(due time.Time) time.Time {
	if f.taken.IsZero() {
		return due
	}
	return later(due, f.taken.Add(followUpGap))
}

// take removes the follow-ups due by now and returns the window they
// re-read, or 0 when none is due. Follow-ups that fall due while a long
// cycle runs wait followUpGap after the last one: every re-read reads the
// commit-lag slack again (rereadSpan), so two in quick succession would
// read it twice for nothing.
func (f *followUps) take(now time.Time) time.Duration {
	if now.Before(f.notBefore(now)) {
		return 0
	}
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
	f.taken = now
	return now.Sub(origin) + followUpSlack
}

// owe schedules the re-read a woken poll that found nothing owes (the
// announced row committed behind the cursor): now, or followUpGap after
// the last follow-up, so that a burst, in which most woken polls find
// their row already read by the poll before, re-reads at most twice a
// second instead of on every poll. One pending within followUpGap covers
// it. Its window, when no re-read has completed yet, is wakeRereadWindow.
func (f *followUps) owe(now time.Time) {
	due := f.notBefore(now)
	if slices.ContainsFunc(f.pending, func(x followUp) bool { return absDur(x.due.Sub(due)) < followUpGap }) {
		return
	}
	f.pending = append(f.pending, followUp{due: due, origin: now.Add(followUpSlack - wakeRereadWindow)})
	slices.SortFunc(f.pending, func(a, b followUp) int { return a.due.Compare(b.due) })
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
