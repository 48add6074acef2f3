package poller_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/replier"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// Several workspaces of one SaaS org share ONE rate-limit bucket: the NEW
// platform keys it by X-Molecule-Org-Id, which every request of the org
// carries (docs/protocol.md §2). Run over several windows
// of that bucket, with messages arriving on all three workspaces, the
// poller's header pacing (and, in the second case, the replier's notifies
// through molecule.Client.TakeBudget on the same clients, as pkg/relay wires
// them) must never meet a 429, every workspace must keep heartbeating, and
// every message must be published. Reserves are the production defaults.
func TestSharedOrgBucketPacingNeverTrips429(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replies bool
	}{
		{"poller", false},
		// This case met a heartbeat 429 in about 1 run in 4 while each
		// client kept its own view of the bucket (each could take "the
		// last" request) and the replier's reserve was not per workspace.
		{"poller and replier", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testSharedOrgBucket(t, tc.replies)
		})
	}
}

func testSharedOrgBucket(t *testing.T, replies bool) {
	const (
		org       = "org-shared-bucket"
		limit     = 60
		window    = 2 * time.Second
		heartbeat = time.Second // two a window per workspace, as 30 s in a 60 s window
		steady    = 5 * time.Second
		sendEvery = 100 * time.Millisecond
	)
	e := newEnv(t, moleculetest.WithRateLimit(limit, window))
	wss := []moleculetest.Workspace{e.ws, e.plat.CreateWorkspace("agent-b"), e.plat.CreateWorkspace("agent-c")}
	// One budget for the org's bucket, as pkg/relay shares it.
	budget := molecule.NewRateBudget()
	withOrg := func(c *molecule.Config) { c.OrgID, c.RateBudget = org, budget }
	clients := make([]*molecule.Client, len(wss))
	byToken := map[string]string{} // bearer → workspace id
	for i, ws := range wss {
		clients[i] = e.client(ws, withOrg)
		byToken["Bearer "+ws.Token] = ws.ID
	}
	p := e.poller(poller.Config{Workspaces: clients, PollInterval: 10 * time.Millisecond, HeartbeatInterval: heartbeat})

	if replies {
		e.echoReplies(t, clients)
	}
	run(t, p)
	for _, ws := range wss {
		e.waitSeeded(ws.ID)
	}

	// Canvas messages carry neither bearer nor org header: they land in the
	// IP bucket, not the org's, and cost the workspaces nothing.
	start := time.Now()
	sent := map[string]int{}
	for i := 0; time.Since(start) < steady; i++ {
		ws := wss[i%len(wss)].ID
		e.sendCanvas(ws, fmt.Sprintf("m%d", i))
		sent[ws]++
		time.Sleep(sendEvery)
	}
	total := 0
	for _, n := range sent {
		total += n
	}
	waitFor(t, 20*time.Second, "every message published", func() bool { return streamCount(t, e.topo.Inbound) >= uint64(total) })
	if replies {
		waitFor(t, 20*time.Second, "every reply notified", func() bool {
			for _, ws := range wss {
				if len(e.plat.Notifications(ws.ID)) < sent[ws.ID] {
					return false
				}
			}
			return true
		})
	}
	elapsed := time.Since(start)

	var want []string
	for _, ws := range wss {
		want = append(want, e.messageRowIDs(ws.ID)...)
	}
	assertExactlyOnce(t, e.inbound(), want)

	// Every request of the workspaces' clients, by endpoint and status.
	type key struct{ endpoint, status string }
	counts := map[key]int{}
	var limited []string
	var inBucket []time.Time
	beats := map[string][]time.Time{} // accepted heartbeats per workspace
	for _, r := range e.plat.Requests() {
		ws, ours := byToken[r.Header.Get("Authorization")]
		if !ours {
			continue // canvas sends: IP bucket
		}
		if got := r.Header.Get("X-Molecule-Org-Id"); got != org {
			t.Errorf("%s %s without the org header (%q): it would not share the bucket", r.Method, r.Path, got)
		}
		ep := r.Method + " " + strings.Replace(r.Path, ws, ":id", 1)
		counts[key{ep, fmt.Sprint(r.Status)}]++
		inBucket = append(inBucket, r.At)
		if r.Status == http.StatusTooManyRequests {
			limited = append(limited, fmt.Sprintf("%s %s (%s) at +%s", r.Method, r.Path, ws, r.At.Sub(start).Round(time.Millisecond)))
		}
		if r.Path == "/registry/heartbeat" && r.Status == http.StatusOK {
			beats[ws] = append(beats[ws], r.At)
		}
	}
	keys := make([]key, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].endpoint+keys[i].status < keys[j].endpoint+keys[j].status })
	var summary strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&summary, "\n  %-36s %s × %d", k.endpoint, k.status, counts[k])
	}
	peak, windows := replayWindows(inBucket, window)
	t.Logf("%d messages on %d workspaces in %s (%s steady), %d requests in the org bucket (limit %d per %s), %d windows, busiest %d:%s",
		total, len(wss), elapsed.Round(time.Millisecond), steady, len(inBucket), limit, window, windows, peak, summary.String())

	if len(limited) > 0 {
		t.Errorf("%d requests of the shared bucket answered 429:\n  %s", len(limited), strings.Join(limited, "\n  "))
	}
	// Heartbeats: every workspace, about every interval, none refused.
	for _, ws := range wss {
		b := beats[ws.ID]
		var gap time.Duration
		for i := 1; i < len(b); i++ {
			gap = max(gap, b[i].Sub(b[i-1]))
		}
		if least := int(elapsed/heartbeat) - 1; len(b) < least || gap > 2*heartbeat {
			t.Errorf("workspace %s: %d accepted heartbeats in %s (want >= %d), longest gap %s (want <= %s)",
				ws.ID, len(b), elapsed.Round(time.Millisecond), least, gap.Round(time.Millisecond), 2*heartbeat)
		}
	}
	// The bucket was really contended: a window was spent down to the
	// pollers' reserve (DefaultRateReserve per workspace sharing it), so
	// the pacing had to hold them back (unpaced, a 10 ms loop over three
	// workspaces asks thousands of times).
	floor := limit - poller.DefaultRateReserve*len(wss)
	if n := len(inBucket); n < 2*floor || peak < floor {
		t.Errorf("%d requests in the org bucket, at most %d in one window: the limit was never approached, the test proves nothing", n, peak)
	}
}

// replayWindows replays the double's fixed window (it starts at the first
// request after the previous one expired) over the arrival times of one
// bucket's requests: how many windows there were and the most requests one
// of them held.
func replayWindows(at []time.Time, window time.Duration) (peak, windows int) {
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	var start time.Time
	n := 0
	for _, t := range at {
		if windows == 0 || t.Sub(start) >= window {
			start, n = t, 0
			windows++
		}
		n++
		peak = max(peak, n)
	}
	return peak, windows
}

// echoReplies runs a replier on the poller's clients (as pkg/relay shares
// them) and answers every published inbound message with a canvas reply,
// the dispatcher's job, so that notifies draw on the org bucket alongside
// polls and heartbeats while the poller runs. The replier stops at the
// test's end.
func (e *env) echoReplies(t *testing.T, clients []*molecule.Client) {
	t.Helper()
	byID := map[string]*molecule.Client{}
	for _, c := range clients {
		byID[c.WorkspaceID()] = c
	}
	r, err := replier.New(e.js, e.topo, byID, replier.Config{
		Config: stage.Config{Logger: quietLogger(), RetryBase: 50 * time.Millisecond, RetryMax: 2 * time.Second}, NotifyTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatalf("replier.New: %v", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = r.Run(rctx) }()

	in := make(chan *nats.Msg, 1024)
	sub, err := e.nc.ChanSubscribe(events.SubjectInboundPrefix+".>", in)
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-rctx.Done():
				return
			case m := <-in:
				msg, err := events.DecodeInbound(m.Data)
				if err != nil {
					t.Errorf("inbound: %v", err)
					continue
				}
				rep := events.Reply{WorkspaceID: msg.WorkspaceID, ActivityID: msg.ActivityID, Source: events.SourceCanvasUser,
					Text: "re: " + msg.Text, MessageID: events.ReplyMessageID(msg.ActivityID), Hops: 1, HandledAt: time.Now().UTC()}
				data, err := rep.Marshal()
				if err != nil {
					t.Errorf("reply: %v", err)
					continue
				}
				nm := nats.NewMsg(events.ReplySubject(rep.WorkspaceID))
				nm.Data = data
				nm.Header.Set(nats.MsgIdHdr, events.ReplyMsgID(rep.WorkspaceID, rep.ActivityID))
				if _, err := e.js.PublishMsg(rctx, nm); err != nil && rctx.Err() == nil {
					t.Errorf("publish reply: %v", err)
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = sub.Unsubscribe()
		cancel()
		wg.Wait()
	})
}
