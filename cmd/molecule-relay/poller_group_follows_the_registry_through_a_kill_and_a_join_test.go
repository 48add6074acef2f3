package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/pollgroup"
	"github.com/molecule-ai/molecule-relay/internal/registry"
	"github.com/molecule-ai/molecule-relay/internal/testkit/chaos"
	"github.com/molecule-ai/molecule-relay/internal/testkit/clustertest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// The sizes of TestPollerGroupFollowsTheRegistry; make chaos-group runs
// it at 10,000 workspaces.
var (
	groupN       = flag.Int("group-n", 300, "TestPollerGroupFollowsTheRegistry: workspaces in the registry at the start")
	groupTraffic = flag.Duration("group-traffic", 24*time.Second, "TestPollerGroupFollowsTheRegistry: how long messages are sent (the kill at a third, the join at two thirds)")
	groupEvery   = flag.Duration("group-every", 50*time.Millisecond, "TestPollerGroupFollowsTheRegistry: one message to a random registered workspace this often")
	groupChanges = flag.Int("group-changes", 20, "TestPollerGroupFollowsTheRegistry: registry changes during the traffic, adds and removes alternating")
	groupPoll    = flag.Duration("group-poll", 2*time.Second, "TestPollerGroupFollowsTheRegistry: the members' MOLECULE_POLL_INTERVAL")
	groupLogDir  = flag.String("group-logs", "", "TestPollerGroupFollowsTheRegistry: keep the processes' logs in this directory (default: a temporary one, removed)")
	groupReady   = flag.Duration("group-ready", 90*time.Second, "TestPollerGroupFollowsTheRegistry: how long the group may take to poll every workspace once")
	groupSSE     = flag.Bool("group-sse", false, "TestPollerGroupFollowsTheRegistry: the members keep event streams and the default safety net, as shipped; a workspace is unwatched while no member holds its event stream open, and the gap bound applies to that")
)

const (
	groupMaxUnpolled = 10 * time.Second // issue 42 item 4
	groupMaxChange   = 2 * time.Second  // issue 42 item 1: an add polled, a remove stopped
)

// regChange is one registry change the test made, and when.
type regChange struct {
	ws  string
	add bool
	at  time.Time
}

// sentMsg is a canvas message the double accepted.
type sentMsg struct {
	ws string
	at time.Time
}

// Three poll processes in one group share the workspaces of the registry
// (MOLECULE_WORKSPACE_REGISTRY) on one NATS, with a dispatch and a reply
// process. Under steady canvas traffic to random registered workspaces one
// member is SIGKILLed, a fourth joins, and workspaces are added and removed
// through the registry. Measured on the double's record of each
// workspace's GET /activity (the platform's view): nothing lost, nothing
// answered twice, no registered workspace unpolled for more than 10 s, an
// added one polled and a removed one stopped within 2 s.
//
// A message to a removed workspace counts when the double saw a poll of
// that workspace after accepting it (the relay read it, so it is in flight
// and must be answered, once); one never read is left on the platform,
// counted apart, and is not lost (the cursor holds it for a re-add).
func TestPollerGroupFollowsTheRegistry(t *testing.T) {
	n, changes := *groupN, *groupChanges
	bin := relayBin(t)
	// nats-server in its own process, as the chaos test runs it: at
	// 10,000 workspaces an embedded one shares this process's CPU with
	// the double and its request log, and falls behind.
	natsBin := clustertest.ServerBinary(t)
	t.Cleanup(clustertest.RemoveBinaries)
	ns, err := chaos.NewNATS(natsBin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	if err := ns.StartReady(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	plat := moleculetest.NewServer(moleculetest.WithRequestLogLimit(0), moleculetest.WithRateLimit(0, 0))
	t.Cleanup(plat.Close)
	_, js := natstest.Connect(t, ns.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	topo, err := events.EnsureTopology(ctx, js, events.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	key, keyB64, err := registry.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Open(ctx, js, key, true, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := pollgroup.EnsureBucket(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	entry := func(w moleculetest.Workspace) registry.Entry {
		return registry.Entry{ID: w.ID, Token: w.Token, PlatformURL: plat.URL()}
	}
	seeded := make([]registry.Entry, n)
	for i := range seeded {
		seeded[i] = entry(plat.CreateWorkspace(fmt.Sprintf("group-%05d", i)))
	}
	if _, err := reg.Seed(ctx, seeded); err != nil {
		t.Fatal(err)
	}
	spare := make([]registry.Entry, (changes+1)/2) // added during the run
	for i := range spare {
		spare[i] = entry(plat.CreateWorkspace(fmt.Sprintf("group-added-%03d", i)))
	}

	dir := t.TempDir()
	if *groupLogDir != "" {
		dir = *groupLogDir
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + dir,
		"NATS_URL=" + ns.URL(),
		"MOLECULE_PLATFORM_URL=" + plat.URL(),
		"MOLECULE_WORKSPACE_REGISTRY=true", "MOLECULE_REGISTRY_KEY=" + keyB64,
		"MOLECULE_HANDLER=echo", "MOLECULE_TOPOLOGY=lookup",
		"MOLECULE_LOG_LEVEL=info",
	}
	if *groupSSE {
		env = append(env, "MOLECULE_SSE=true")
	} else {
		// A poll every interval per workspace, no stream: the request log
		// shows every gap.
		env = append(env, "MOLECULE_SSE=false", "MOLECULE_POLL_INTERVAL="+groupPoll.String(), "MOLECULE_SAFETY_NET_INTERVAL=0")
	}
	claims := watchClaims(t, js, "fleet")
	g := startGroupStages(t, bin, dir, env)
	procs := g.procs
	began := time.Now()
	waitFleet(t, *groupReady, "every workspace polled once by the group", func() bool { return cursors(t, topo.Cursors) >= n })
	steady := time.Now()
	t.Logf("%d workspaces polled by the group %s after the members started", n, steady.Sub(began).Round(time.Millisecond))

	// The workspaces messages may be sent to: the registered ones.
	var (
		mu     sync.Mutex
		active = make([]string, n)
		sent   = map[string]sentMsg{} // text → message
		done   []regChange
		left   = n
	)
	for i, e := range seeded {
		active[i] = e.ID
	}
	T := *groupTraffic
	tctx, stopTraffic := context.WithTimeout(context.Background(), T)
	defer stopTraffic()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { // traffic
		defer wg.Done()
		tick := time.NewTicker(*groupEvery)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-tctx.Done():
				return
			case <-tick.C:
			}
			mu.Lock()
			ws := active[rand.IntN(len(active))]
			mu.Unlock()
			text := fmt.Sprintf("group message %d", i)
			code, _, err := plat.SendCanvas(context.Background(), ws, text)
			if err != nil || code != 200 {
				t.Errorf("send %q: %d %v", text, code, err)
				return
			}
			mu.Lock()
			sent[text] = sentMsg{ws: ws, at: time.Now()}
			mu.Unlock()
		}
	}()
	go func() { // registry changes, evenly over the traffic
		defer wg.Done()
		for i := range changes {
			select {
			case <-tctx.Done():
				return
			case <-time.After(time.Until(steady.Add(T * time.Duration(2*i+1) / time.Duration(2*changes)))):
			}
			c := regChange{add: i%2 == 0}
			if c.add {
				e := spare[i/2]
				c.ws, c.at = e.ID, time.Now()
				if err := reg.Put(context.Background(), e); err != nil {
					t.Errorf("add %s: %v", e.ID, err)
					return
				}
				// Sent to once the relay registered it in poll mode: before
				// that the double takes a message for push delivery (202).
				go func() {
					for deadline := time.Now().Add(groupMaxUnpolled); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
						if plat.Status(e.ID).DeliveryMode == "poll" {
							mu.Lock()
							active = append(active, e.ID)
							mu.Unlock()
							return
						}
					}
				}()
			} else {
				mu.Lock()
				j := rand.IntN(left) // a seeded workspace, not removed yet: active[:left] holds only those
				c.ws = active[j]
				active = slices.Delete(active, j, j+1)
				left--
				mu.Unlock()
				c.at = time.Now()
				if err := reg.Remove(context.Background(), c.ws); err != nil {
					t.Errorf("remove %s: %v", c.ws, err)
					return
				}
			}
			mu.Lock()
			done = append(done, c)
			mu.Unlock()
		}
	}()

	time.Sleep(T / 3)
	killed := procs[2]
	killedID := instanceOf(t, killed)
	owners, err := pollgroup.Owners(context.Background(), js, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	killed.Kill()
	time.Sleep(T / 3)
	joinedAt := time.Now()
	g.start("poll-4", "poll", inFleetGroup)
	procs = g.procs
	wg.Wait()
	trafficEnd := time.Now()

	// Every message that must be answered is answered; then a pause for a
	// second answer to show.
	polls := func() map[string][]time.Time { return activityReads(plat.Requests()) }
	removedAt := map[string]time.Time{}
	for _, c := range done {
		if !c.add {
			removedAt[c.ws] = c.at
		}
	}
	due := func(p map[string][]time.Time) (map[string]sentMsg, int) {
		out, unread := map[string]sentMsg{}, 0
		for text, m := range sent {
			if _, gone := removedAt[m.ws]; gone && !readAfter(p[m.ws], m.at) {
				unread++
				continue
			}
			out[text] = m
		}
		return out, unread
	}
	var ids []string
	isSeeded := map[string]bool{}
	for i, e := range append(slices.Clone(seeded), spare...) {
		ids = append(ids, e.ID)
		isSeeded[e.ID] = i < len(seeded)
	}
	// The removed workspaces are stopped by now: which of their messages
	// were read is known.
	dueNow, _ := due(polls())
	// Not fatal: what was lost is counted below, with the other figures.
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		got, left := answers(plat, ids), 0
		for text, m := range dueNow {
			if got["echo: "+text+"@"+m.ws] == 0 {
				left++
			}
		}
		if left == 0 {
			break
		}
	}
	time.Sleep(2 * *groupPoll)
	end := time.Now()

	reqs := plat.Requests()
	reads := activityReads(reqs)
	streams := eventStreams(reqs)
	must, unread := due(reads)
	got := answers(plat, ids)
	answerLat := answerLatencies(plat, must)
	lost, twice := 0, 0
	for text, m := range must {
		switch c := got["echo: "+text+"@"+m.ws]; {
		case c == 0:
			lost++
			if lost <= 5 {
				next, _ := firstAfter(reads[m.ws], m.at)
				t.Logf("lost: %q to %s, sent at +%s, next polled at +%s", text, m.ws, m.at.Sub(steady).Round(time.Millisecond), next.Sub(steady).Round(time.Millisecond))
			}
		case c > 1:
			twice++
		}
	}
	for k, c := range got {
		if c > 1 && !strings.HasPrefix(k, "echo: group message") {
			t.Errorf("an answer nobody asked for, %d times: %s", c, k)
		}
	}

	// Unpolled gaps, each workspace over the time it was registered.
	addedAt := map[string]time.Time{}
	for _, c := range done {
		if c.add {
			addedAt[c.ws] = c.at
		}
	}
	var (
		addLat, removeLat, worstOf []time.Duration
		worst, worstJoin           time.Duration
		worstWS                    string
		worstFrom                  time.Time
		changeLat                  = map[string]time.Duration{} // workspace → add → first poll, or remove → last poll
	)
	for _, id := range ids {
		from, to := steady, end
		if at, ok := addedAt[id]; ok {
			first, ok := firstAfter(reads[id], at)
			if !ok {
				t.Errorf("workspace %s added %s after steady state was never polled", id, at.Sub(steady).Round(time.Millisecond))
				continue
			}
			addLat = append(addLat, first.Sub(at))
			changeLat[id] = first.Sub(at)
			from = first
		} else if !isSeeded[id] {
			continue // a spare never added
		}
		if at, ok := removedAt[id]; ok {
			last := at
			if l, ok := lastAfter(reads[id], at); ok {
				last = l
			}
			removeLat = append(removeLat, last.Sub(at))
			changeLat[id] = last.Sub(at)
			to = at
		}
		gap := func(from time.Time) (time.Duration, time.Time) {
			if *groupSSE {
				return longestUnwatched(streams[id], from, to)
			}
			return longestGap(reads[id], from, to)
		}
		d, at := gap(from)
		if dj, _ := gap(maxTime(from, joinedAt)); dj > worstJoin {
			worstJoin = dj
		}
		worstOf = append(worstOf, d)
		if d > worst {
			worst, worstWS, worstFrom = d, id, at
		}
	}

	// Kill → takeover: when the killed member's workspaces were next polled.
	var takeover []time.Duration
	for ws, m := range owners {
		if _, gone := removedAt[ws]; m != killedID || gone {
			continue
		}
		if first, ok := firstAfter(reads[ws], killedAt); ok {
			takeover = append(takeover, first.Sub(killedAt))
		} else {
			t.Errorf("workspace %s of the killed member never polled after the kill", ws)
		}
	}

	// At the end the three live members hold a share each, and the claims
	// are the registered workspaces: none left to the killed member, none
	// kept for a removed one. The joiner's share may still be moving
	// (handoverWindow at a time): it is waited for, up to a minute.
	var (
		final map[string]string
		share map[string]int
		want  = *groupN - len(removedAt) + len(addedAt)
	)
	checked := time.Now()
	for deadline := checked.Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		if final, err = pollgroup.Owners(context.Background(), js, "fleet"); err != nil {
			t.Fatal(err)
		}
		share = map[string]int{}
		for _, m := range final {
			share[m]++
		}
		if len(final) == want && len(share) == 3 && share[killedID] == 0 || time.Now().After(deadline) {
			break
		}
	}
	settled := time.Now()
	for ws, m := range final {
		if _, gone := removedAt[ws]; gone {
			t.Errorf("workspace %s removed at +%s still claimed by %s", ws, removedAt[ws].Sub(steady).Round(time.Millisecond), m)
		}
	}
	if len(final) != want || len(share) != 3 || share[killedID] > 0 {
		t.Errorf("claims at the end: %d workspaces by members %v; want %d by the 3 live members", len(final), share, want)
	}

	// A live member's workspace taken over means it was polled twice meanwhile.
	for _, p := range procs[3:] {
		out := p.Tail(1 << 26)
		if i := strings.Index(out, "another member took over"); i >= 0 {
			t.Errorf("%s: a live member's workspace was taken over: %s", p.Name, strings.SplitN(out[i:], "\n", 2)[0])
		}
	}
	if strings.Contains(procs[len(procs)-1].Tail(1<<26), "took over the workspaces of a member counted dead") {
		t.Error("poll-4 took a workspace over by expiry when it joined, instead of waiting for its release")
	}

	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("N=%d, traffic %s (kill at +%s, join at +%s), %d registry changes; wall time %s; load average %s",
		*groupN, trafficEnd.Sub(steady).Round(time.Second), killedAt.Sub(steady).Round(time.Millisecond),
		joinedAt.Sub(steady).Round(time.Millisecond), len(done), time.Since(began).Round(time.Second), strings.TrimSpace(string(load)))
	t.Logf("messages: %d sent, %d due (%d to removed workspaces never read, not counted), %d lost, %d answered twice",
		len(sent), len(must), unread, lost, twice)
	t.Logf("%s: longest %s (workspace %s, from +%s), median of each workspace's longest %s",
		map[bool]string{false: "unpolled", true: "unwatched (no event stream open)"}[*groupSSE],
		worst.Round(time.Millisecond), worstWS, worstFrom.Sub(steady).Round(time.Millisecond), median(worstOf).Round(time.Millisecond))
	t.Logf("after the join: longest %s; the claims, checked %s after the join, settled %s later",
		worstJoin.Round(time.Millisecond), checked.Sub(joinedAt).Round(time.Millisecond), settled.Sub(checked).Round(time.Millisecond))
	slices.Sort(answerLat)
	if len(answerLat) > 0 {
		t.Logf("sent → answered: median %s, p99 %s, max %s (%d answers)", median(answerLat).Round(time.Millisecond),
			answerLat[len(answerLat)*99/100].Round(time.Millisecond), answerLat[len(answerLat)-1].Round(time.Millisecond), len(answerLat))
	}
	t.Logf("add → first poll: median %s, max %s (%d); remove → last poll: median %s, max %s (%d)",
		median(addLat).Round(time.Millisecond), slices.Max(append(addLat, 0)).Round(time.Millisecond), len(addLat),
		median(removeLat).Round(time.Millisecond), slices.Max(append(removeLat, 0)).Round(time.Millisecond), len(removeLat))
	t.Logf("kill → takeover of the killed member's %d workspaces: median %s, all by %s",
		len(takeover), median(takeover).Round(time.Millisecond), slices.Max(append(takeover, 0)).Round(time.Millisecond))

	if lost > 0 || twice > 0 {
		t.Errorf("%d messages due: %d lost, %d answered more than once", len(must), lost, twice)
	}
	if worst > groupMaxUnpolled {
		claims.explain(t, plat.Requests(), worstWS, steady, worstFrom, worstFrom.Add(worst))
		for _, p := range procs[2:] {
			t.Logf("%s is instance %s", p.Name, instanceOf(t, p))
		}
		t.Errorf("workspace %s went unpolled for %s from +%s (kill at +%s; bound %s)", worstWS, worst, worstFrom.Sub(steady), killedAt.Sub(steady), groupMaxUnpolled)
	}
	if len(takeover) == 0 {
		t.Error("the killed member held no workspace")
	}
	// An add is polled within 2 s, but while its owner is the killed
	// member not yet counted dead: then within the unpolled bound.
	lastTakeover := killedAt.Add(slices.Max(append(takeover, 0)))
	for _, c := range done {
		d, ok := changeLat[c.ws]
		inKill := !c.at.Before(killedAt.Add(-groupMaxChange)) && !c.at.After(lastTakeover)
		switch {
		case !ok:
		case d > groupMaxUnpolled || (d > groupMaxChange && !(c.add && inKill)):
			t.Errorf("workspace %s %s at +%s: last/first poll %s after (bound %s)", c.ws, map[bool]string{true: "added", false: "removed"}[c.add],
				c.at.Sub(steady).Round(time.Millisecond), d.Round(time.Millisecond), groupMaxChange)
		}
	}
}

// cursors counts the workspaces with a cursor: each was polled once.
func cursors(t *testing.T, kv jetstream.KeyValue) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return 0
	}
	n := 0
	for range keys.Keys() {
		n++
	}
	return n
}

var instanceRE = regexp.MustCompile(`poller group: joined.* instance=([0-9a-f]+)`)

// instanceOf reads a member's instance id from its log.
func instanceOf(t *testing.T, p *chaos.Process) string {
	t.Helper()
	m := instanceRE.FindStringSubmatch(p.Tail(1 << 26))
	if m == nil {
		t.Fatalf("%s: no \"poller group: joined\" line with its instance in its log", p.Name)
	}
	return m[1]
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// workspaceGET returns the workspace of r when r is a GET of
// /workspaces/<id>/<sub>.
func workspaceGET(r moleculetest.RecordedRequest, sub string) (string, bool) {
	id, rest, ok := strings.Cut(strings.TrimPrefix(r.Path, "/workspaces/"), "/")
	return id, ok && rest == sub && r.Method == "GET"
}

// eventStreams is, per workspace, the time spans of its event streams the
// double answered 200 (one still open ends in the far future).
func eventStreams(reqs []moleculetest.RecordedRequest) map[string][][2]time.Time {
	out := map[string][][2]time.Time{}
	for _, r := range reqs {
		id, ok := workspaceGET(r, "events/stream")
		if !ok || r.Status != 200 {
			continue
		}
		end := r.Done
		if end.IsZero() {
			end = r.At.Add(24 * time.Hour)
		}
		out[id] = append(out[id], [2]time.Time{r.At, end})
	}
	return out
}

// longestUnwatched is the longest time within [from, to] during which no
// span of spans was open, and where it began.
func longestUnwatched(spans [][2]time.Time, from, to time.Time) (time.Duration, time.Time) {
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
	var (
		worst time.Duration
		at    time.Time
	)
	reach := from // watched up to here
	for _, sp := range append(spans, [2]time.Time{to, to}) {
		start := sp[0]
		if start.After(to) {
			start = to
		}
		if d := start.Sub(reach); d > worst {
			worst, at = d, reach
		}
		if sp[1].After(reach) {
			reach = sp[1]
		}
		if !reach.Before(to) {
			break
		}
	}
	return worst, at
}

// answerLatencies is, for each message of must, the time from its send to
// its first answer on the canvas.
func answerLatencies(plat *moleculetest.Server, must map[string]sentMsg) []time.Duration {
	first := map[string]time.Time{} // "echo: text@ws" → first answer
	seen := map[string]bool{}
	for _, m := range must {
		if seen[m.ws] {
			continue
		}
		seen[m.ws] = true
		for _, n := range plat.Notifications(m.ws) {
			k := n.Message + "@" + m.ws
			if _, ok := first[k]; !ok {
				first[k] = n.At
			}
		}
	}
	var out []time.Duration
	for text, m := range must {
		if at, ok := first["echo: "+text+"@"+m.ws]; ok {
			out = append(out, at.Sub(m.at))
		}
	}
	return out
}

// activityReads is, per workspace, when the double received each of its
// GET /workspaces/<id>/activity, in order.
func activityReads(reqs []moleculetest.RecordedRequest) map[string][]time.Time {
	out := map[string][]time.Time{}
	for _, r := range reqs {
		if id, ok := workspaceGET(r, "activity"); ok {
			out[id] = append(out[id], r.At)
		}
	}
	for _, ts := range out {
		slices.SortFunc(ts, time.Time.Compare)
	}
	return out
}

func readAfter(ts []time.Time, at time.Time) bool { _, ok := firstAfter(ts, at); return ok }

func firstAfter(ts []time.Time, at time.Time) (time.Time, bool) {
	for _, x := range ts {
		if x.After(at) {
			return x, true
		}
	}
	return time.Time{}, false
}

func lastAfter(ts []time.Time, at time.Time) (time.Time, bool) {
	if len(ts) == 0 || !ts[len(ts)-1].After(at) {
		return time.Time{}, false
	}
	return ts[len(ts)-1], true
}

// longestGap is the longest time within [from, to] between two reads (or
// a read and an edge), and where it began.
func longestGap(ts []time.Time, from, to time.Time) (time.Duration, time.Time) {
	var (
		worst time.Duration
		at    time.Time
	)
	prev := from
	for _, x := range append(slices.Clone(ts), to) {
		if x.Before(from) {
			continue
		}
		if x.After(to) {
			x = to
		}
		if d := x.Sub(prev); d > worst {
			worst, at = d, prev
		}
		prev = x
		if !x.Before(to) {
			break
		}
	}
	return worst, at
}
