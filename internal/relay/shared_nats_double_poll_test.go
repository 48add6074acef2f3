package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// Two relay processes on one NATS without MOLECULE_POLLER_GROUP both poll
// the workspace, but share the streams and consumers: every message is
// answered once, by either replier. A process that sees a reply the other
// posted warns of the double poll and names MOLECULE_POLLER_GROUP, not of
// a second relay answering twice, and MOLECULE_SINGLETON=refuse does not
// stop it: there is nothing to refuse. Before, each took the other's
// replies for a second relay's, advised sharing a NATS (which they did),
// and with refuse both stopped polling, leaving the workspace unpolled.
func TestTwoProcessesOnOneNATSWarnOfDoublePollAndKeepPolling(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	type proc struct {
		logs pipelinetest.LogBuffer
		run  *pipelinetest.Running
	}
	start := func() *proc {
		p := &proc{}
		rt := openRelay(t, slog.New(slog.NewTextHandler(&p.logs, nil)),
			"MOLECULE_PLATFORM_URL="+w.Plat.URL(), "MOLECULE_WORKSPACE_ID="+w.Agent.ID, "MOLECULE_WORKSPACE_TOKEN="+w.Agent.Token,
			"MOLECULE_HANDLER=echo", "MOLECULE_POLL_INTERVAL=100ms", "MOLECULE_SINGLETON=refuse", "NATS_URL="+w.NATSURL())
		p.run = pipelinetest.Start(t, func(ctx context.Context) error { return rt.Run(ctx, relay.All) })
		return p
	}
	procs := []*proc{start(), start()}
	w.WaitSeeded(w.Agent.ID)

	const doublePoll, secondRelay = "polls this workspace too", "was not posted by this relay"
	warned := func() bool {
		for _, p := range procs {
			if strings.Contains(p.logs.String(), doublePoll) {
				return true
			}
		}
		return false
	}
	// Which replier posts a reply is the reply consumer's choice: send
	// until one process has seen a reply of the other's.
	sent := 0
	for deadline := time.Now().Add(30 * time.Second); !warned(); sent++ {
		if time.Now().After(deadline) {
			t.Fatalf("no double-poll warning after %d messages:\n%s\n%s", sent, procs[0].logs.String(), procs[1].logs.String())
		}
		w.SendCanvas(fmt.Sprintf("message %d", sent))
		w.WaitReplies(sent+1, 10*time.Second)
	}
	t.Logf("warned after %d messages", sent)
	// One more message after the warning is still answered, once, and
	// both processes are still running.
	w.SendCanvas("after the warning")
	w.WaitReplies(sent+1, 10*time.Second)
	for i, p := range procs {
		select {
		case <-p.run.Done():
			t.Fatalf("process %d stopped: %v", i, p.run.Err())
		default:
		}
		if err := p.run.Stop(); err != nil {
			t.Fatalf("process %d: %v", i, err)
		}
		logs := p.logs.String()
		if strings.Contains(logs, secondRelay) {
			t.Errorf("process %d took the other for a second relay:\n%s", i, logs)
		}
		if strings.Contains(logs, doublePoll) && !strings.Contains(logs, "MOLECULE_POLLER_GROUP") {
			t.Errorf("process %d's warning does not name MOLECULE_POLLER_GROUP:\n%s", i, logs)
		}
	}
	w.CheckExactlyOnce(t, w.Sent())
}
