package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

var fleetLong = flag.Bool("fleet-long", false, "TestPollerGroupSharesAFleet: traffic for 45 s instead of 15 s")

const (
	fleetSize        = 300
	fleetPoll        = 2 * time.Second // every member polls each of its workspaces this often
	fleetMaxUnpolled = 10 * time.Second
	// A join moves workspaces without waiting for an expiry: the poll
	// interval and the hand-over (measured 2.8 to 3.8 s).
	fleetMaxJoinGap = 6 * time.Second
)

// Three poll processes in one group (MOLECULE_POLLER_GROUP) share 300
// workspaces on one NATS; under canvas traffic one is SIGKILLed and a
// fourth joins. Every message is answered exactly once, and no workspace
// goes unpolled (no activity read in the double's request log) for more
// than 10 s, the kill included.
func TestPollerGroupSharesAFleet(t *testing.T) {
	bin := relayBin(t)
	ns := natstest.Start(t)
	plat := moleculetest.NewServer(moleculetest.WithRequestLogLimit(1 << 20))
	t.Cleanup(plat.Close)
	ws := make([]moleculetest.Workspace, fleetSize)
	ids, tokens := make([]string, fleetSize), make([]string, fleetSize)
	for i := range ws {
		ws[i] = plat.CreateWorkspace(fmt.Sprintf("fleet-%03d", i))
		ids[i], tokens[i] = ws[i].ID, ws[i].Token
	}
	_, js := natstest.Connect(t, ns.ClientURL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	topo, err := events.EnsureTopology(ctx, js, events.TopologyConfig{})
	cancel()
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + dir,
		"NATS_URL=" + ns.ClientURL(),
		"MOLECULE_PLATFORM_URL=" + plat.URL(),
		"MOLECULE_WORKSPACE_IDS=" + strings.Join(ids, ","),
		"MOLECULE_WORKSPACE_TOKENS=" + strings.Join(tokens, ","),
		"MOLECULE_HANDLER=echo",
		"MOLECULE_TOPOLOGY=lookup",
		// A poll every 2 s per workspace, stream or not, so that the
		// request log shows every gap.
		"MOLECULE_SSE=false", "MOLECULE_POLL_INTERVAL=" + fleetPoll.String(), "MOLECULE_SAFETY_NET_INTERVAL=0",
		"MOLECULE_LOG_LEVEL=info",
	}
	g := startGroupStages(t, bin, dir, env)
	procs := g.procs

	seeded := func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		keys, err := topo.Cursors.ListKeys(ctx)
		if err != nil {
			return false
		}
		n := 0
		for range keys.Keys() {
			n++
		}
		return n == fleetSize
	}
	waitFleet(t, 90*time.Second, "every workspace registered and seeded by the group", seeded)
	steady := time.Now()
	groupWrites := func() uint64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := js.Stream(ctx, "KV_"+events.BucketPollerGroups)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	writesAtSteady := groupWrites()

	// Traffic: a message to a random workspace every 50 ms; a SIGKILL of
	// poll-1 after a third of it, a fourth member after two thirds.
	// The double lets one sender send 600 messages a minute.
	trafficFor, every := 15*time.Second, 50*time.Millisecond
	if *fleetLong {
		trafficFor, every = 45*time.Second, 110*time.Millisecond
	}
	var (
		sentMu sync.Mutex
		sent   = map[string]string{} // text → workspace
	)
	tctx, stopTraffic := context.WithTimeout(context.Background(), trafficFor)
	defer stopTraffic()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-tctx.Done():
				return
			case <-tick.C:
			}
			w := ws[rand.IntN(len(ws))]
			text := fmt.Sprintf("fleet message %d", i)
			code, _, err := plat.SendCanvas(context.Background(), w.ID, text)
			for code == 429 && tctx.Err() == nil {
				// The sender's own rate budget (600 a minute), spent by
				// the long form: the message was not queued; send it again.
				time.Sleep(time.Second)
				code, _, err = plat.SendCanvas(context.Background(), w.ID, text)
			}
			if code == 429 {
				return // the traffic's time is over
			}
			if err != nil || code != 200 {
				t.Errorf("send %q: %d %v", text, code, err)
				return
			}
			sentMu.Lock()
			sent[text] = w.ID
			sentMu.Unlock()
		}
	}()
	time.Sleep(trafficFor / 3)
	killedAt := time.Now()
	procs[2].Kill()
	time.Sleep(trafficFor / 3)
	joinedAt := time.Now()
	g.start("poll-4", "poll", inFleetGroup)
	procs = g.procs
	wg.Wait()

	waitFleet(t, 60*time.Second, "every message answered", func() bool {
		return len(answers(plat, ids)) >= len(sent)
	})
	end := time.Now()
	writes := groupWrites() - writesAtSteady
	got := answers(plat, ids)
	lost, twice := 0, 0
	for text, w := range sent {
		switch n := got["echo: "+text+"@"+w]; {
		case n == 0:
			lost++
		case n > 1:
			twice++
		}
	}
	if lost > 0 || twice > 0 || len(got) != len(sent) {
		t.Errorf("%d messages: %d lost, %d answered more than once, %d distinct answers", len(sent), lost, twice, len(got))
	}

	// The joiner took only released workspaces, none by an expiry.
	if strings.Contains(procs[len(procs)-1].Tail(1<<24), "took over the workspaces of a member counted dead") {
		t.Error("poll-4 took a workspace over by expiry when it joined, instead of waiting for its release")
	}

	// status shows the three live members, each polling its share.
	st := exec.Command(bin, "status", "--json")
	st.Env = append(append([]string{}, env...), inFleetGroup)
	out, err := st.Output()
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	var rep statusReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	share := map[string]int{}
	for _, m := range rep.PolledBy {
		share[m]++
	}
	if len(rep.PolledBy) != fleetSize || len(share) != 3 {
		t.Errorf("status: %d workspaces polled, by %d members (%v); want %d by 3", len(rep.PolledBy), len(share), share, fleetSize)
	}

	// A member takes over a workspace from a live member only if it
	// counted it dead wrongly; the member then logs that it stops it.
	for _, p := range procs[3:] {
		out := p.Tail(1 << 24)
		if i := strings.Index(out, "another member took over"); i >= 0 {
			t.Errorf("%s: a live member's workspace was taken over (polled twice meanwhile): %s", p.Name, strings.SplitN(out[i:], "\n", 2)[0])
		}
	}

	reqs := plat.Requests()
	worst, at, gaps := unpolled(reqs, ids, steady, end)
	// From the join on, the kill's hand-over is over (about 4 s after it,
	// 5 s before the join): the gaps are the join's. The workspaces that
	// move wait only for the old owner's release, not for an expiry.
	afterJoin, atJoin, _ := unpolled(reqs, ids, joinedAt, end)
	t.Logf("longest gap from the join on: %s (%s)", afterJoin.Round(time.Millisecond), atJoin.ws)
	if afterJoin > fleetMaxJoinGap {
		t.Errorf("workspace %s went unpolled for %s after poll-4 joined (bound %s: the poll interval and the hand-over)", atJoin.ws, afterJoin, fleetMaxJoinGap)
	}
	t.Logf("status: members' shares %v; the group's bucket took %d writes in %s (%.1f a second; a kill, a join and their hand-overs included)",
		share, writes, end.Sub(steady).Round(time.Second), float64(writes)/end.Sub(steady).Seconds())
	t.Logf("%d messages answered once each; poll-1 SIGKILLed %s after steady state; longest a workspace went unpolled: %s (%s, %s after the kill); gaps over 5 s: %d",
		len(sent), killedAt.Sub(steady).Round(time.Millisecond), worst.Round(time.Millisecond), at.ws, at.from.Sub(killedAt).Round(time.Millisecond), gaps)
	if worst > fleetMaxUnpolled {
		t.Errorf("workspace %s went unpolled for %s, from %s after the kill (bound %s)", at.ws, worst, at.from.Sub(killedAt), fleetMaxUnpolled)
	}
}

// answers counts the canvas replies, keyed "<text>@<workspace>".
func answers(plat *moleculetest.Server, ids []string) map[string]int {
	out := map[string]int{}
	for _, id := range ids {
		for _, n := range plat.Notifications(id) {
			out[n.Message+"@"+id]++
		}
	}
	return out
}

type gapAt struct {
	ws   string
	from time.Time
}

// unpolled is the longest time between two activity reads of one
// workspace (or the window's edges) within [from, to], where it was, and
// how many gaps exceeded 5 s.
func unpolled(reqs []moleculetest.RecordedRequest, ids []string, from, to time.Time) (time.Duration, gapAt, int) {
	polls := map[string][]time.Time{}
	for _, r := range reqs {
		id, rest, ok := strings.Cut(strings.TrimPrefix(r.Path, "/workspaces/"), "/")
		if ok && rest == "activity" && r.Method == "GET" && !r.At.Before(from) && !r.At.After(to) {
			polls[id] = append(polls[id], r.At)
		}
	}
	var (
		worst time.Duration
		at    gapAt
		over  int
	)
	for _, id := range ids {
		ts := append([]time.Time{from}, polls[id]...)
		sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
		ts = append(ts, to)
		for i := 1; i < len(ts); i++ {
			d := ts[i].Sub(ts[i-1])
			if d > 5*time.Second {
				over++
			}
			if d > worst {
				worst, at = d, gapAt{ws: id, from: ts[i-1]}
			}
		}
	}
	return worst, at, over
}

func waitFleet(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
