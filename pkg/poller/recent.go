package poller

import (
	"sort"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// SkipPublished is a row this relay already published, met again by an
// overlap or window re-read (recognised from the cursor record's recent
// set, without a publish).
const SkipPublished = "already_published"

// Why the cursor keeps the recently published activity ids: the inbound
// stream's de-duplication forgets the ids of messages the dispatcher
// already consumed (work-queue retention) once the server restarts, so
// after a restart an overlap re-read published everything in its window
// again. The set is bounded: by age (the overlap window plus slack) and by
// count (maxRecent; beyond it the stream's de-duplication still applies).
const (
	maxRecent   = 1000
	recentSlack = time.Minute
)

// recentID is a published row: its activity id and created_at.
type recentID struct {
	id        string
	createdAt time.Time
}

// recentKeep is how long a published id is remembered.
func (p *Poller) recentKeep() time.Duration {
	return max(p.cfg.OverlapWindow, DefaultOverlapWindow) + recentSlack
}

// mergeRecent returns old plus add, without ids created more than keep
// before now, at most maxRecent (the newest kept). The value maps an
// activity id to its created_at in Unix microseconds.
func mergeRecent(old map[string]int64, add []recentID, keep time.Duration, now time.Time) map[string]int64 {
	cut := now.Add(-keep).UnixMicro()
	type kv struct {
		id string
		at int64
	}
	all := make([]kv, 0, len(old)+len(add))
	seen := make(map[string]bool, len(old)+len(add))
	for _, a := range add {
		if at := a.createdAt.UnixMicro(); at >= cut && !seen[a.id] {
			seen[a.id] = true
			all = append(all, kv{a.id, at})
		}
	}
	for id, at := range old {
		if at >= cut && !seen[id] {
			seen[id] = true
			all = append(all, kv{id, at})
		}
	}
	if len(all) > maxRecent {
		sort.Slice(all, func(i, j int) bool { return all[i].at > all[j].at })
		all = all[:maxRecent]
	}
	if len(all) == 0 {
		return nil
	}
	out := make(map[string]int64, len(all))
	for _, e := range all {
		out[e.id] = e.at
	}
	return out
}

// alreadyPublished reports whether row is in the recent set of v.
func (v *cursorValue) alreadyPublished(row molecule.ActivityRow) bool {
	_, ok := v.Recent[row.ID]
	return ok && row.ID != ""
}
