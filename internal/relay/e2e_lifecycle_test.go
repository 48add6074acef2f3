package relay_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// pollerStatus reads the poller's recorded status of workspace ws.
func pollerStatus(t *testing.T, p *poller.Poller, ws string) poller.WorkspaceStatus {
	t.Helper()
	all, err := p.Status(pipelinetest.Ctx(t))
	if err != nil {
		t.Fatalf("poller status: %v", err)
	}
	for _, s := range all {
		if s.WorkspaceID == ws {
			return s
		}
	}
	t.Fatalf("poller has no status for %s", ws)
	return poller.WorkspaceStatus{}
}

// byToken counts the double's recorded requests made with tok whose path
// contains part, and how many of them were answered status (0: any).
func byToken(w *pipelinetest.World, tok, part string, status int) int {
	n := 0
	for _, r := range w.Plat.Requests() {
		if r.Header.Get("Authorization") == "Bearer "+tok && strings.Contains(r.Path, part) && (status == 0 || r.Status == status) {
			n++
		}
	}
	return n
}

// stopPollerExpecting stops the pipeline's poller, checks its Run error
// against want (nil: no error), and takes it out of the pipeline so that
// Pipeline.Stop checks only the other stages.
func stopPollerExpecting(t *testing.T, pl *pipelinetest.Pipeline, want error) {
	t.Helper()
	err := pl.PollerRun.Stop()
	pl.PollerRun = nil
	switch {
	case want == nil && err != nil:
		t.Errorf("poller Run: %v, want nil", err)
	case want != nil && !errors.Is(err, want):
		t.Errorf("poller Run: %v, want an error matching %v", err, want)
	}
}

// Guarantee 5, paused: while the workspace is paused the poller fetches
// nothing but keeps sending heartbeats; once it is resumed the messages
// queued meanwhile flow, each answered once.
func TestE2EPausedWorkspace(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	pl := w.StartPipeline(pipelinetest.PipelineConfig{Poller: poller.Config{HeartbeatInterval: 150 * time.Millisecond}})
	w.WaitSeeded(w.Agent.ID)
	w.SendMixed("before pause", 3)
	w.WaitReplies(3, 15*time.Second)

	w.Plat.Pause(w.Agent.ID)
	pipelinetest.Eventually(t, 10*time.Second, "the poller to see the pause", func() bool {
		return pollerStatus(t, pl.Poller, w.Agent.ID).Paused
	})
	fetches := w.Requests(http.MethodGet, "/workspaces/"+w.Agent.ID+"/activity", 0)
	beats := w.Plat.Status(w.Agent.ID).Heartbeats
	w.SendMixed("while paused", 4) // the platform keeps queueing
	pipelinetest.Eventually(t, 10*time.Second, "three more heartbeats while paused", func() bool {
		return w.Plat.Status(w.Agent.ID).Heartbeats >= beats+3
	})
	if got := w.Requests(http.MethodGet, "/workspaces/"+w.Agent.ID+"/activity", 0); got != fetches {
		t.Errorf("%d activity fetches while paused, want none", got-fetches)
	}
	if got := pl.Recorder.Started(); got != 3 {
		t.Errorf("handler ran %d times while paused, want the 3 from before the pause", got)
	}

	w.Plat.Resume(w.Agent.ID)
	w.WaitReplies(7, 15*time.Second)
	waitDrained(t, w, 10*time.Second)
	pl.Stop(t)
	sent := w.Sent()
	checkHandledOnce(t, pl.Recorder, sent)
	w.CheckExactlyOnce(t, sent)
	if got := w.Plat.Status(w.Agent.ID).Registrations; got != 1 {
		t.Errorf("registrations = %d, want 1", got)
	}
}

// Guarantee 5, removed and token rejected: a workspace deleted on the
// platform, or one whose token the platform refuses while it exists, is
// stopped with a clear error and never (re-)registered, while the other
// workspace of the same poller goes on being served.
func TestE2EStoppedWorkspaces(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// setup returns the second workspace as the relay is configured
		// with it, and breaks it (before or after the first poll).
		setup            func(w *pipelinetest.World, second moleculetest.Workspace) (configured moleculetest.Workspace, breakAfterSeed func())
		stopped          string
		want             error
		registrations    int
		platformStatusOK func(string) bool
	}{
		{
			name: "removed",
			setup: func(w *pipelinetest.World, second moleculetest.Workspace) (moleculetest.Workspace, func()) {
				return second, func() { w.Plat.Delete(second.ID) }
			},
			stopped: poller.StoppedRemoved, want: molecule.ErrWorkspaceRemoved, registrations: 1,
			platformStatusOK: func(s string) bool { return s == "removed" },
		},
		{
			name: "token rejected (wrong token, workspace exists)",
			setup: func(w *pipelinetest.World, second moleculetest.Workspace) (moleculetest.Workspace, func()) {
				wrong := second
				wrong.Token = strings.Repeat("x", len(second.Token))
				return wrong, nil
			},
			stopped: poller.StoppedTokenRejected, want: poller.ErrTokenRejected, registrations: 0,
			platformStatusOK: func(s string) bool { return s != "removed" },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
			second, breakIt := tc.setup(w, w.Plat.CreateWorkspace("relay-agent-2"))
			pl := w.StartPipeline(pipelinetest.PipelineConfig{Poller: poller.Config{
				Workspaces: []*molecule.Client{w.Client(w.Agent), w.Client(second)},
			}})
			w.WaitSeeded(w.Agent.ID)
			if breakIt != nil {
				w.WaitSeeded(second.ID)
				breakIt()
			}
			pipelinetest.Eventually(t, 10*time.Second, "the broken workspace to be stopped", func() bool {
				return pollerStatus(t, pl.Poller, second.ID).Stopped == tc.stopped
			})
			fetches := byToken(w, second.Token, "/activity", 0)

			// The healthy workspace is still served by the same poller.
			w.SendMixed("still served", 6)
			w.WaitReplies(6, 15*time.Second)
			waitDrained(t, w, 10*time.Second)
			select {
			case <-pl.PollerRun.Done():
				t.Fatalf("poller Run returned while a workspace was still healthy: %v", pl.PollerRun.Err())
			default:
			}
			if got := byToken(w, second.Token, "/activity", 0); got != fetches {
				t.Errorf("%d activity requests for the stopped workspace after it stopped, want none", got-fetches)
			}
			stopPollerExpecting(t, pl, tc.want)
			pl.Stop(t)

			if got := w.Plat.Status(second.ID).Registrations; got != tc.registrations {
				t.Errorf("registrations of the stopped workspace = %d, want %d (never re-registered)", got, tc.registrations)
			}
			if st := w.Plat.Status(second.ID).Status; !tc.platformStatusOK(st) {
				t.Errorf("platform status of the stopped workspace = %q", st)
			}
			sent := w.Sent()
			checkHandledOnce(t, pl.Recorder, sent)
			w.CheckExactlyOnce(t, sent)
		})
	}
}

// Guarantee 5, 410: the platform pruned the cursor row. The poller resets,
// re-seeds and goes on; nothing is lost or answered twice.
func TestE2ECursorLost410(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Peers: 1})
	pl := w.StartPipeline(pipelinetest.PipelineConfig{
		Poller: poller.Config{OverlapWindow: 30 * time.Second, OverlapEvery: 200 * time.Millisecond},
	})
	w.WaitSeeded(w.Agent.ID)
	w.SendMixed("before prune", 6)
	w.WaitReplies(6, 15*time.Second)
	waitDrained(t, w, 10*time.Second)
	sentBefore := w.Sent() // remembered after the rows are gone

	w.Plat.PruneRows(w.Agent.ID, time.Now().Add(time.Second))
	pipelinetest.Eventually(t, 10*time.Second, "a 410 on the pruned cursor", func() bool {
		return w.Requests(http.MethodGet, "/activity", http.StatusGone) > 0
	})
	w.SendMixed("after prune", 6)
	w.WaitReplies(12, 15*time.Second)
	waitDrained(t, w, 10*time.Second)
	select {
	case <-pl.PollerRun.Done():
		t.Fatalf("poller Run returned after the 410: %v", pl.PollerRun.Err())
	default:
	}
	pl.Stop(t)

	sent := w.Sent()
	if len(sentBefore) != 6 || len(sent) != 12 {
		t.Fatalf("%d messages before the prune and %d in all, want 6 and 12", len(sentBefore), len(sent))
	}
	checkHandledOnce(t, pl.Recorder, sent)
	w.CheckExactlyOnce(t, sent)
}

// Guarantee 5, 429: a small rate limit shared by the poller, the replier
// and the heartbeat (one token, one bucket), which both stages pace
// themselves by, plus 429 answers injected on the feed and on notify so
// that backing off is exercised whatever the pacing achieves. The poller
// backs off and keeps running, the replier retries after Retry-After,
// every message is answered once, and heartbeats keep getting through.
func TestE2ERateLimited429(t *testing.T) {
	t.Parallel()
	const n = 10
	w := pipelinetest.New(t, pipelinetest.Options{
		Peers:    1,
		Platform: []moleculetest.Option{moleculetest.WithRateLimit(10, time.Second)},
	})
	pl := w.StartPipeline(pipelinetest.PipelineConfig{
		Poller: poller.Config{PollInterval: 50 * time.Millisecond, RateReserve: 3, HeartbeatInterval: 300 * time.Millisecond},
	})
	w.WaitSeeded(w.Agent.ID)
	retryAfter := http.Header{"Retry-After": []string{"1"}}
	for _, p := range []string{"/workspaces/" + w.Agent.ID + "/activity", "/workspaces/" + w.Agent.ID + "/notify"} {
		w.Plat.InjectFault(moleculetest.Fault{PathPrefix: p, Status: http.StatusTooManyRequests, Header: retryAfter,
			Body: `{"error":"rate limit exceeded","retry_after":1}`, Count: 2})
	}
	w.SendMixed("limited", n)
	w.WaitReplies(n, 30*time.Second)
	waitDrained(t, w, 15*time.Second)

	var limited, beatsAfter429 int
	var first429 time.Time
	limitedPaths := map[string]int{}
	for _, r := range w.Plat.Requests() {
		if r.Header.Get("Authorization") != "Bearer "+w.Agent.Token {
			continue
		}
		if r.Status == http.StatusTooManyRequests {
			if limited == 0 {
				first429 = r.At
			}
			limited++
			limitedPaths[r.Method+" "+strings.ReplaceAll(r.Path, w.Agent.ID, ":self")]++
		}
		if r.Path == "/registry/heartbeat" && r.Status == http.StatusOK && limited > 0 && r.At.After(first429) {
			beatsAfter429++
		}
	}
	if limitedPaths["GET /workspaces/:self/activity"] < 2 || limitedPaths["POST /workspaces/:self/notify"] < 2 {
		t.Fatalf("the injected 429s were not all met: %v", limitedPaths)
	}
	start := time.Now()
	pipelinetest.Eventually(t, 10*time.Second, "a heartbeat accepted after the 429s", func() bool {
		for _, r := range w.Plat.Requests() {
			if r.Path == "/registry/heartbeat" && r.Status == http.StatusOK && r.At.After(start) {
				return true
			}
		}
		return false
	})
	select {
	case <-pl.PollerRun.Done():
		t.Fatalf("poller Run returned under rate limiting: %v", pl.PollerRun.Err())
	default:
	}
	pl.Stop(t)
	sent := w.Sent()
	checkHandledOnce(t, pl.Recorder, sent)
	w.CheckExactlyOnce(t, sent)
	t.Logf("%d answers 429 on the agent's token (%v); %d heartbeats accepted after the first one before the drain", limited, limitedPaths, beatsAfter429)
}

// Guarantee 5, OLD platform: poll mode is refused with a clear error and
// no fetch loop: the only activity request is the generation probe, and
// later runs (new processes sharing the status bucket) ask nothing more.
func TestE2EOldPlatformRefusesPollMode(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Platform: []moleculetest.Option{moleculetest.WithGeneration(moleculetest.Gen2026_04)}})
	p := w.NewPoller(w.Proc(), poller.Config{})
	run := pipelinetest.Start(t, p.Run)
	select {
	case <-run.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("poller Run did not stop on an OLD platform")
	}
	if err := run.Err(); !errors.Is(err, molecule.ErrOldPlatform) {
		t.Fatalf("Run: %v, want an error matching molecule.ErrOldPlatform", err)
	}
	probes := w.Requests(http.MethodGet, "/activity", 0)
	if probes != 1 {
		t.Errorf("%d activity requests, want exactly the one probe", probes)
	}
	for range 3 {
		res, err := w.NewPoller(w.Proc(), poller.Config{}).RunOnce(pipelinetest.Ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		r := res.Workspaces[0]
		if !r.Stopped || !errors.Is(r.Err, molecule.ErrOldPlatform) || r.Generation != molecule.GenerationOld {
			t.Errorf("one-shot run on OLD: stopped %v, generation %s, err %v", r.Stopped, r.Generation, r.Err)
		}
	}
	if got := w.Requests(http.MethodGet, "/activity", 0); got != probes {
		t.Errorf("%d more activity requests from later runs, want none (the OLD verdict is remembered)", got-probes)
	}
	if got := w.Plat.Status(w.Agent.ID).Registrations; got != 0 {
		t.Errorf("registrations = %d, want 0", got)
	}
	st := pollerStatus(t, p, w.Agent.ID)
	if st.Stopped != poller.StoppedOldPlatform || st.Generation != "old" {
		t.Errorf("status: stopped %q generation %q, want %q and old", st.Stopped, st.Generation, poller.StoppedOldPlatform)
	}
}
