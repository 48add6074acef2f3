package lambdafn

import (
	"context"
	"errors"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/stage"
)

// Lambda sends SIGTERM when it shuts an execution environment down, and
// SIGKILL after the runtime's share of the 2 s shutdown phase: 500 ms
// with an internal extension, which lambda.WithEnableSIGTERM registers
// (docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html,
// "Shutdown phase"; github.com/aws-samples/graceful-shutdown-with-aws-lambda).
// Usually it comes between invocations, but an invocation that timed out
// or crashed resets the environment the same way, with the invocation's
// goroutine still running. Close fits its work into that budget:
// sigtermInvocationWait for the invocation in progress to hand back what
// it holds, then broker.CloseFlushTimeout for the connection's flush.
const sigtermInvocationWait = 150 * time.Millisecond

// errSIGTERM is the cause of an invocation's context cut by Close.
var errSIGTERM = errors.New("lambdafn: SIGTERM: the execution environment is shutting down")

// inflight is the invocation in progress, as Close sees it.
type inflight struct {
	cut  context.CancelCauseFunc
	done chan struct{} // closed once the invocation released f.mu
}

// begin registers an invocation: its context, which Close cuts, and the
// end to call once f.mu is released. The cut ends the context and its
// stop limit (stage.WithStopLimit) at once: a handler in flight, which
// outlives the end of its run's context, is cut too and its message
// handed back.
func (f *Function) begin(ctx context.Context) (context.Context, func()) {
	limit, cut := context.WithCancelCause(context.WithoutCancel(ctx))
	ctx, cancel := context.WithCancelCause(stage.WithStopLimit(ctx, limit))
	context.AfterFunc(limit, func() { cancel(context.Cause(limit)) })
	in := &inflight{cut: cut, done: make(chan struct{})}
	f.sig.Lock()
	f.inflight = in
	f.sig.Unlock()
	return ctx, func() {
		f.sig.Lock()
		if f.inflight == in {
			f.inflight = nil
		}
		f.sig.Unlock()
		cut(nil)
		cancel(nil)
		close(in.done)
	}
}

// setRuntime replaces f.rt (under f.mu) and publishes its connection for
// Close.
func (f *Function) setRuntime(rt *relay.Runtime) {
	f.rt = rt
	if rt == nil {
		f.conn.Store(nil)
		return
	}
	f.conn.Store(rt.Conn)
}

// Close is the SIGTERM handler: the execution environment ends. An
// invocation in progress is cut: its stage stops as at its deadline and
// hands back the messages it holds (at once, not after their AckWait).
// If it returns within sigtermInvocationWait, the runtime is closed as
// between invocations; if not, only its NATS connection is flushed and
// closed under it (no wait for f.mu, which it holds), and what it still
// holds comes back after the consumers' AckWait. Either way the
// connection's last acks and publishes reach the server first
// (broker.Conn.Close).
func (f *Function) Close() {
	f.sig.Lock()
	in := f.inflight
	f.sig.Unlock()
	if in != nil {
		in.cut(errSIGTERM)
		select {
		case <-in.done:
		case <-time.After(sigtermInvocationWait):
		}
	}
	if !f.mu.TryLock() {
		f.log.Warn("SIGTERM: the execution environment ends during an invocation that did not stop in time; closing its NATS connection under it (what it holds comes back after the consumers' AckWait)",
			"waited", sigtermInvocationWait)
		if c := f.conn.Load(); c != nil {
			c.Close()
		}
		return
	}
	defer f.mu.Unlock()
	f.log.Info("SIGTERM: the execution environment ends; closing the NATS connection", "connected", f.rt != nil, "invocation_cut", in != nil)
	if f.rt != nil {
		f.rt.Close()
		f.setRuntime(nil)
	}
}
