package poller_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// seqRow is a feed row's id and seq.
type seqRow struct {
	ID  string `json:"id"`
	Seq int64  `json:"seq"`
}

// feedSeqs are the rows of the double's feed, committed or still pending.
func (e *env) feedSeqs() []seqRow {
	e.t.Helper()
	var out []seqRow
	for _, raw := range e.plat.Rows(e.ws.ID) {
		var r seqRow
		if err := json.Unmarshal(raw, &r); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// ackTestConfig re-reads 400 ms back every 100 ms: the double's late
// rows (100 ms) are found, and an ack waits 800 ms (two windows) for a
// row to be old enough.
var ackTestConfig = poller.Config{OverlapWindow: 400 * time.Millisecond, OverlapEvery: 100 * time.Millisecond}

// TestAckWaitsForLateRows: 50 canvas messages over 2 s, every 10th committed late
// with a seq lower than rows already read (moleculetest.WithLateCommit;
// enteros-core aeec8e47 activity.go:456, seq taken at insert). The poller
// acks (POST /activity/ack) only seqs whose every row is published to the
// inbound stream, never a late row still pending or unread, and in the
// end the acked seq covers every handled row: the double's retention
// would prune them after 7 days, and not the messages sent after the run.
func TestAckWaitsForLateRows(t *testing.T) {
	e := newEnv(t, moleculetest.WithLateCommit(0.1, 100*time.Millisecond))
	p := e.poller(ackTestConfig)
	e.runOnce(p) // registers and seeds: every message below is the poller's to deliver
	// One message every 40 ms for 2 s: acks fall while late rows are pending.
	sending := make(chan struct{})
	go func() {
		defer close(sending)
		pace := time.NewTicker(40 * time.Millisecond)
		defer pace.Stop()
		for i := range 50 {
			<-pace.C
			if st, _, err := e.plat.SendCanvas(ctx(t), e.ws.ID, fmt.Sprint("m", i)); err != nil || st != 200 {
				t.Errorf("send %d: %d %v", i, st, err)
				return
			}
		}
	}()

	acks, naiveHazards := 0, 0
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(20 * time.Second)
	for {
		res := e.runOnce(p)
		published := map[string]bool{}
		var maxPublished int64
		rows := e.feedSeqs()
		for _, m := range e.inbound() {
			published[m.ActivityID] = true
		}
		for _, r := range rows {
			if published[r.ID] {
				maxPublished = max(maxPublished, r.Seq)
			}
		}
		for _, r := range rows {
			if !published[r.ID] && r.Seq < maxPublished {
				naiveHazards++ // acking the highest seq seen would cover this row
				break
			}
		}
		if res.AckedSeq > 0 {
			acks++
			for _, r := range rows {
				if r.Seq <= res.AckedSeq && !published[r.ID] {
					t.Fatalf("acked seq %d covers row %s (seq %d), not published yet", res.AckedSeq, r.ID, r.Seq)
				}
			}
		}
		if len(published) == 50 && e.plat.AckedSeq(e.ws.ID) == maxPublished {
			<-sending
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("acked %d of %d published rows (max seq %d)", e.plat.AckedSeq(e.ws.ID), len(published), maxPublished)
		}
		<-tick.C
	}
	assertExactlyOnce(t, e.inbound(), e.messageRowIDs(e.ws.ID))
	if naiveHazards == 0 || acks < 2 {
		t.Errorf("%d acks, %d cycles with a late row below a published seq: the run does not exercise the rule", acks, naiveHazards)
	}

	e.sendCanvas(e.ws.ID, "after the run")
	e.sendCanvas(e.ws.ID, "after the run, too")
	at8 := time.Now().Add(8 * 24 * time.Hour)
	prunable := len(e.plat.Prunable(e.ws.ID, at8))
	if prunable != 50 {
		t.Errorf("%d rows prunable at +8 days, want the 50 handled ones (not the 2 sent after)", prunable)
	}
	sent := e.requests("POST", "/activity/ack")
	if sent != acks {
		t.Errorf("%d ack requests, %d acks reported", sent, acks)
	}
	t.Logf("measure: %d messages (5 late), %d acks sent, last_acked_seq %d, prunable at +8 days %d of %d rows (before the run: 0); cycles where acking the highest seq seen would have covered an unpublished row: %d",
		50, sent, e.plat.AckedSeq(e.ws.ID), prunable, len(e.feedSeqs()), naiveHazards)
}

// TestAckNotSentWhereThePlatformHasNone: a 2026-05 feed carries no seq, so
// the poller never asks; a 2026-08 platform answering the ack 404 is asked
// once, then not again.
func TestAckNotSentWhereThePlatformHasNone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		gen   moleculetest.Generation
		fault bool
		cfg   func(*poller.Config)
		want  int
	}{
		{"2026-05", moleculetest.Gen2026_05, false, nil, 0},
		{"404", moleculetest.Gen2026_08, true, nil, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, moleculetest.WithGeneration(tc.gen))
			if tc.fault {
				e.plat.InjectFault(moleculetest.Fault{Method: "POST", PathPrefix: "/workspaces/" + e.ws.ID + "/activity/ack", Status: 404, Body: `{"error":"not found"}`})
			}
			e.register(e.ws)
			cfg := ackTestConfig
			cfg.OverlapWindow = 50 * time.Millisecond
			cfg.OverlapEvery = 10 * time.Millisecond
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			p := e.poller(cfg)
			for i := range 3 {
				e.sendCanvas(e.ws.ID, fmt.Sprint("m", i))
			}
			e.runOnce(p)
			// Every row is old enough to ack after 2 windows; run on for 4 more
			// ack intervals.
			for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
				e.runOnce(p)
				waitTick := time.NewTimer(10 * time.Millisecond)
				<-waitTick.C
			}
			if n := e.requests("POST", "/activity/ack"); n != tc.want {
				t.Errorf("%d ack requests, want %d", n, tc.want)
			}
		})
	}
}

// TestAckNeverCoversTheNewestCheckpoint: a fresh runner resumes from the
// newest checkpoint row on the feed (checkpoint.go), so an ack must leave
// it to the 30-day sweep: a runner that restored it acks nothing at or
// above its seq until it has written a newer one, and then not that one.
func TestAckNeverCoversTheNewestCheckpoint(t *testing.T) {
	e := newEnv(t)
	cfg := poller.Config{OverlapWindow: 50 * time.Millisecond, OverlapEvery: 10 * time.Millisecond, ResumeFromCheckpoint: true}
	first := e.poller(cfg)
	e.runOnce(first)
	e.sendCanvas(e.ws.ID, "before the checkpoint")
	e.runOnce(first)
	if err := first.WriteCheckpoints(ctx(t), []string{e.ws.ID}); err != nil {
		t.Fatal(err)
	}
	checkpointSeq := func() (newest int64) {
		for _, raw := range e.plat.Rows(e.ws.ID) {
			var r struct {
				Method string `json:"method"`
				Seq    int64  `json:"seq"`
			}
			if err := json.Unmarshal(raw, &r); err != nil {
				t.Fatal(err)
			}
			if r.Method == "molecule-relay/checkpoint" {
				newest = max(newest, r.Seq)
			}
		}
		return newest
	}
	cp1 := checkpointSeq()

	// A fresh runner: an empty NATS store, the same platform.
	ns := natstest.Start(t)
	_, js := natstest.Connect(t, ns.ClientURL())
	topo, err := events.EnsureTopology(ctx(t), js, events.TopologyConfig{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Workspaces, cfg.PollInterval, cfg.Logger = []*molecule.Client{e.client(e.ws)}, 20*time.Millisecond, quietLogger()
	fresh, err := poller.New(js, topo, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.runOnce(fresh) // restores the checkpoint
	for i := range 3 {
		e.sendCanvas(e.ws.ID, fmt.Sprint("after ", i))
	}
	settle := func(p *poller.Poller) {
		for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
			if _, err := p.RunOnce(ctx(t)); err != nil {
				t.Fatal(err)
			}
			tick := time.NewTimer(10 * time.Millisecond)
			<-tick.C
		}
	}
	settle(fresh)
	if got := e.plat.AckedSeq(e.ws.ID); got >= cp1 {
		t.Fatalf("acked %d, at or above the restored checkpoint's seq %d", got, cp1)
	}
	if err := fresh.WriteCheckpoints(ctx(t), []string{e.ws.ID}); err != nil {
		t.Fatal(err)
	}
	cp2 := checkpointSeq()
	settle(fresh)
	got := e.plat.AckedSeq(e.ws.ID)
	if got <= cp1 || got >= cp2 {
		t.Errorf("acked %d after the second checkpoint, want above the first (%d) and below it (%d)", got, cp1, cp2)
	}
}

// TestAckCoversTheStoredCursorInALaterRun: a run that ends before its
// rows are old enough to ack (connect --once, a Lambda invocation, a
// restart) leaves them to the next one: its first fetch acks the stored
// cursor's row, which it never read itself (the cursor moved past every
// row before it only once they were settled).
func TestAckCoversTheStoredCursorInALaterRun(t *testing.T) {
	e := newEnv(t)
	cfg := poller.Config{OverlapWindow: 50 * time.Millisecond, OverlapEvery: 10 * time.Millisecond}
	first := e.poller(cfg)
	e.runOnce(first)
	for i := range 3 {
		e.sendCanvas(e.ws.ID, fmt.Sprint("m", i))
	}
	if r := e.runOnce(first); r.Published != 3 || r.AckedSeq != 0 {
		t.Fatalf("first run: %d published, acked %d; want 3 and no ack (the rows are new)", r.Published, r.AckedSeq)
	}
	var newest int64
	for _, r := range e.feedSeqs() {
		newest = max(newest, r.Seq)
	}
	// Past two overlap windows, and past the 1 s the later run's re-read
	// (since_secs, whole seconds) would read back: only the cursor says
	// what was handled.
	sent := time.Now()
	waitFor(t, 5*time.Second, "the rows to age", func() bool { return time.Since(sent) > 1100*time.Millisecond })
	later := e.poller(cfg)
	if r := e.runOnce(later); r.AckedSeq != newest {
		t.Errorf("the later run's first cycle acked %d, want the stored cursor's seq %d", r.AckedSeq, newest)
	}
	if e.plat.AckedSeq(e.ws.ID) != newest {
		t.Errorf("platform acked %d, want %d", e.plat.AckedSeq(e.ws.ID), newest)
	}
}
