package chaos_test

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/clustertest"
)

// leaderWatch records, from the nodes' monitoring endpoints (/jsz), which
// node leads each Raft group the relay uses (every stream, bucket and
// consumer, and the meta group) and since when, and when each node was
// SIGKILLed. From that it reckons the spans in which a group had no
// leader: from the kill of its leader to the leader_since of the next
// one. A group leaderless when a message crossed it is where that
// message's time went.
type leaderWatch struct {
	c      *clustertest.Cluster
	client *http.Client

	mu     sync.Mutex
	reigns map[string][]reign // by group, in leader_since order
	kills  map[string][]time.Time
}

// reign is one leader of a group: who and since when.
type reign struct {
	leader string
	since  time.Time
}

// leaderless is one span of a group without a leader.
type leaderless struct {
	group    string
	from, to time.Time // from: the kill of its leader; to: the next leader's leader_since
}

func newLeaderWatch(c *clustertest.Cluster) *leaderWatch {
	return &leaderWatch{c: c, client: &http.Client{Timeout: time.Second},
		reigns: map[string][]reign{}, kills: map[string][]time.Time{}}
}

// killed notes that node was SIGKILLed at.
func (w *leaderWatch) killed(node string, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.kills[node] = append(w.kills[node], at)
}

// run polls every running node until ctx ends. Polling often enough to see
// every leader is all it needs: leader_since says when it began.
func (w *leaderWatch) run(ctx context.Context) {
	for pause(ctx, 250*time.Millisecond) {
		for _, n := range w.c.Nodes {
			if n.Running() {
				w.poll(n)
			}
		}
	}
}

func (w *leaderWatch) poll(n *clustertest.Node) {
	j, err := n.Leaders(w.client)
	if err != nil {
		return
	}
	// Only a node's word about itself counts: a follower keeps naming a
	// dead leader until its election timeout.
	note := func(group string, c *clustertest.GroupLeader) {
		if c != nil && c.Leader == n.Name && c.LeaderSince != nil {
			w.note(group, reign{leader: n.Name, since: *c.LeaderSince})
		}
	}
	for _, a := range j.Accounts {
		for _, s := range a.Streams {
			note(s.Name, s.Cluster)
			for _, c := range s.Consumers {
				note(s.Name+"/"+c.Name, c.Cluster)
			}
		}
	}
}

func (w *leaderWatch) note(group string, r reign) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rs := w.reigns[group]
	for _, x := range rs {
		if x.leader == r.leader && x.since.Equal(r.since) {
			return
		}
	}
	rs = append(rs, r)
	slices.SortFunc(rs, func(a, b reign) int { return a.since.Compare(b.since) })
	w.reigns[group] = rs
}

// spans returns every leaderless span: a reign whose leader was killed
// before the next reign began ends at that kill.
func (w *leaderWatch) spans() []leaderless {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []leaderless
	for group, rs := range w.reigns {
		for i := 1; i < len(rs); i++ {
			prev, next := rs[i-1], rs[i]
			for _, k := range w.kills[prev.leader] {
				if k.After(prev.since) && k.Before(next.since) {
					out = append(out, leaderless{group: group, from: k, to: next.since})
					break
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b leaderless) int { return a.from.Compare(b.from) })
	return out
}

// during names the groups leaderless at some point of [from, to], each
// with how long it was leaderless and when that began relative to the
// latest node kill.
func during(spans []leaderless, from, to time.Time) []leaderless {
	var out []leaderless
	for _, s := range spans {
		if s.from.Before(to) && s.to.After(from) {
			out = append(out, s)
		}
	}
	return out
}

// lastKillBefore is the latest node kill at or before t (zero if none).
func (w *leaderWatch) lastKillBefore(t time.Time) (string, time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var node string
	var at time.Time
	for n, ks := range w.kills {
		for _, k := range ks {
			if !k.After(t) && k.After(at) {
				node, at = n, k
			}
		}
	}
	return node, at
}

// printLeaderless prints, per group, its leaderless spans (the election
// each node kill cost it) and the share of the traffic's time in which at
// least one group on the message path had no leader.
func (w *leaderWatch) printLeaderless(from, to time.Time) {
	spans := w.spans()
	byGroup := map[string][]time.Duration{}
	for _, s := range spans {
		byGroup[s.group] = append(byGroup[s.group], s.to.Sub(s.from))
	}
	groups := make([]string, 0, len(byGroup))
	for g := range byGroup {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	for _, g := range groups {
		ds := byGroup[g]
		var parts []string
		for _, d := range ds {
			parts = append(parts, d.Round(100*time.Millisecond).String())
		}
		fmt.Printf("CHAOS leaderless %s: %d times: %s\n", g, len(ds), strings.Join(parts, " "))
	}
	// The union of the spans of the groups every message crosses.
	var path []leaderless
	for _, s := range spans {
		if onMessagePath(s.group) {
			path = append(path, s)
		}
	}
	slices.SortFunc(path, func(a, b leaderless) int { return cmp.Compare(a.from.UnixNano(), b.from.UnixNano()) })
	var union time.Duration
	var end time.Time
	for _, s := range path {
		a, b := maxTime(s.from, from), minTime(s.to, to)
		a = maxTime(a, end)
		if b.After(a) {
			union += b.Sub(a)
		}
		end = maxTime(end, b)
	}
	total := to.Sub(from)
	if total > 0 {
		fmt.Printf("CHAOS leaderless share: some group on the message path had no leader for %s of the %s of traffic (%.0f%%)\n",
			union.Round(100*time.Millisecond), total.Round(time.Second), 100*union.Seconds()/total.Seconds())
	}
}

// onMessagePath: the groups every message meets on its way (both work
// queues and their consumers, the handled and reply records).
func onMessagePath(group string) bool {
	switch group {
	case "MOLECULE_INBOUND", "MOLECULE_INBOUND/dispatcher", "MOLECULE_REPLY", "MOLECULE_REPLY/replier",
		"KV_molecule_handled", "KV_molecule_replies":
		return true
	}
	return false
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
