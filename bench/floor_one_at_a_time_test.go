package bench_test

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

var (
	flagOneAtATime = flag.Bool("floor-one-at-a-time", false,
		"run BenchmarkFloorOneAtATime (make bench-one-at-a-time; about 3 minutes a count): skipped without it")
	flagTrickleMsgs     = flag.Int("floor-trickle-msgs", 300, "BenchmarkFloorOneAtATime: messages per run, each sent after the previous one is done and a pause")
	flagFloorIdleWindow = flag.Duration("floor-idle-window", 10*time.Second,
		"BenchmarkFloorOneAtATime: the process's CPU per second is first measured over this long without messages, after a 2 s settle (idle_us/s); 0 skips it")
)

// oneAtATimeTimeout is how long one message may take before the run fails.
const oneAtATimeTimeout = 10 * time.Second

// BenchmarkFloorOneAtATime is BenchmarkFloor in the shape users meet: the
// platform's rate limit lets a workspace post about ten replies a second
// (docs/protocol.md §2), so messages come one at a time. Each message is
// sent after the previous one is done (its design's last operation) and a
// pause of 50-149 ms, as BenchmarkIdleLatency sends them, so the embedded
// server is idle when it comes. Set beside BenchmarkIdleLatency's
// relay_us/msg it says how much of the relay's one-at-a-time cost any
// design with these streams and records pays. docs/performance.md, "The
// floor one message at a time".
//
// Per run it reports idle_us/s (the process's CPU per second over a quiet
// window before the messages), relay_us/msg (the window's whole CPU per
// message, idle work included), net_us/msg (relay_us/msg less idle_us/s
// times the window's length per message), file_kb/msg (bytes dirtied in
// files: the file store's writes), nats_in/msg, nats_out/msg and load1.
func BenchmarkFloorOneAtATime(b *testing.B) {
	if !*flagOneAtATime {
		b.Skip("one-at-a-time floor: run with -floor-one-at-a-time (make bench-one-at-a-time)")
	}
	if *flagTrickleMsgs < 1 {
		b.Fatalf("-floor-trickle-msgs %d: the run needs at least one message", *flagTrickleMsgs)
	}
	runFloor(b, floorDesignsNamed(b, "handoff", "records", "shipped"),
		func(b *testing.B, d floorDesign) { d.oneAtATime(b, *flagTrickleMsgs) },
		func(b *testing.B, sink *httpSink) { sink.oneAtATime(b, *flagTrickleMsgs) })
}

// oneAtATime relays n messages through the design's operations, one at a
// time, and reports the process's CPU (server and clients) per message.
func (d floorDesign) oneAtATime(b *testing.B, n int) {
	w := startFloorWorld(b)
	p := loadFloorPayloads(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// done gets each message's id after its design's last operation.
	done := make(chan string, 1)
	finish := func(id string) {
		select {
		case done <- strings.TrimPrefix(id, "ws."):
		default:
			b.Errorf("message %s done while the previous one's end was unread", id)
		}
	}
	stopD := consumeWith(b, ctx, w.inbound, *flagEchoConc, func(m jetstream.Msg) {
		d.dispatch(ctx, b, w, p, m)
		if !d.replyStream {
			finish(m.Headers().Get(jetstream.MsgIDHeader))
		}
	})
	defer stopD()
	if d.replyStream {
		defer d.consumeReplies(ctx, b, w, p, finish)()
	}
	send := func(id string) {
		publishOne(ctx, b, w.poller, p.inbound, id)
		select {
		case got := <-done:
			if got != id {
				b.Fatalf("sent message %s, but message %s was done", id, got)
			}
		case <-time.After(oneAtATimeTimeout):
			b.Fatalf("message %s not done within %s: lost or stuck", id, oneAtATimeTimeout)
		}
	}
	send("one-warm-up") // consumers' pulls and the records' buckets warm
	natsMsgs := func() (in, out int64) {
		v := w.varz(b)
		return v.InMsgs, v.OutMsgs
	}
	m := measureOneAtATime(b, n, natsMsgs, func(i int) { send(fmt.Sprintf("one-%d", i)) })
	m.report(b)
	record(b.Name(), m)
}

// publishOne publishes one inbound message as the poller does (async, with
// its Nats-Msg-Id) and awaits its ack.
func publishOne(ctx context.Context, b *testing.B, js jetstream.JetStream, data []byte, id string) {
	m := &nats.Msg{Subject: "FLOOR_IN.ws", Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, id)
	f, err := js.PublishMsgAsync(m)
	if err != nil {
		b.Fatalf("publish %s: %v", id, err)
	}
	select {
	case <-f.Ok():
	case err := <-f.Err():
		b.Fatalf("publish %s: %v", id, err)
	case <-time.After(oneAtATimeTimeout):
		b.Fatalf("publish %s: no ack within %s", id, oneAtATimeTimeout)
	case <-ctx.Done():
	}
}

// oneAtATime posts n replies one at a time and reports this process's CPU
// per POST: the client's share of a reply's HTTP round trip where replies
// come one at a time (the pooled connection stays open between them).
func (s *httpSink) oneAtATime(b *testing.B, n int) {
	hc := httpClient(true)
	post := func(int) {
		ctx, cancel := context.WithTimeout(context.Background(), oneAtATimeTimeout)
		defer cancel()
		if err := s.post(ctx, hc); err != nil {
			b.Fatalf("POST: %v", err)
		}
	}
	post(-1) // the connection open
	m := measureOneAtATime(b, n, nil, post)
	m.report(b)
	record(b.Name(), m)
}

// measureOneAtATime measures the process's CPU per second over a quiet
// window, then runs send for messages 0..n-1, each after a pause of 50-149
// ms (so sends do not line up with any timer, as in BenchmarkIdleLatency),
// and returns the run's figures. natsMsgs, if not nil, reads the server's
// messages in and out.
func measureOneAtATime(b *testing.B, n int, natsMsgs func() (in, out int64), send func(i int)) metrics {
	idle := idleSelfCPU(*flagFloorIdleWindow)
	var in0, out0 int64
	if natsMsgs != nil {
		in0, out0 = natsMsgs()
	}
	load0, cpu0, file0, t0 := loadavg(), selfCPU(), fileWrites(), time.Now()
	b.ResetTimer()
	for i := range n {
		pause := time.NewTimer(time.Duration(50+(i*37)%100) * time.Millisecond)
		<-pause.C
		send(i)
	}
	b.StopTimer()
	wall, cpu, file := time.Since(t0), selfCPU()-cpu0, fileWrites()-file0
	gross := float64(cpu.Microseconds()) / float64(n)
	m := metrics{
		"idle_us/s":    idle,
		"relay_us/msg": gross,
		// What the messages add to the idle work the window would have
		// had without them.
		"net_us/msg":  gross - idle*wall.Seconds()/float64(n),
		"file_kb/msg": float64(file) / 1024 / float64(n),
		"load1":       (load0 + loadavg()) / 2,
	}
	if natsMsgs != nil {
		in1, out1 := natsMsgs()
		m["nats_in/msg"] = float64(in1-in0) / float64(n)
		m["nats_out/msg"] = float64(out1-out0) / float64(n)
	}
	return m
}

// idleSelfCPU returns this process's CPU per second over a window without
// messages, after a 2 s settle for what the last message started.
func idleSelfCPU(window time.Duration) float64 {
	if window <= 0 {
		return 0
	}
	time.Sleep(2 * time.Second)
	cpu0 := selfCPU()
	time.Sleep(window)
	return float64((selfCPU() - cpu0).Microseconds()) / window.Seconds()
}
