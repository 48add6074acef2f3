package tracing_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// One canvas message through a relay.Runtime (poller, dispatcher, replier,
// NATS between them) makes one trace: poll → publish → handle →
// reply-publish → reply → post, each the child of the one before (handle
// and reply across NATS, through the traceparent header), with otelhttp client spans
// for the platform requests, and the trace id in the stages' log lines.
// With direct posting (the default), the dispatcher posts the reply in its
// own slot: its reply and post spans are under the handle span, and there
// is no reply-publish.
func TestOneTraceFromPollToPost(t *testing.T) {
	for _, tc := range []struct {
		direct string
		want   string
	}{
		{"true", "post < reply < handle < publish < poll"},
		{"false", "post < reply < reply-publish < handle < publish < poll"},
	} {
		t.Run("MOLECULE_DIRECT_POST="+tc.direct, func(t *testing.T) { testOneTrace(t, tc.direct, tc.want) })
	}
}

func testOneTrace(t *testing.T, direct, want string) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	defer func() { _ = tp.Shutdown(context.Background()) }()

	w := pipelinetest.New(t, pipelinetest.Options{})
	cfg, err := config.Load(nil, []string{
		"MOLECULE_PLATFORM_URL=" + w.Plat.URL(),
		"MOLECULE_WORKSPACE_ID=" + w.Agent.ID,
		"MOLECULE_WORKSPACE_TOKEN=" + w.Agent.Token,
		"MOLECULE_HANDLER=echo",
		"MOLECULE_POLL_INTERVAL=200ms",
		"NATS_URL=" + w.NATSURL(),
		"MOLECULE_DIRECT_POST=" + direct,
	})
	if err == nil {
		err = cfg.Validate(config.NeedPlatform | config.NeedHandler)
	}
	if err != nil {
		t.Fatal(err)
	}
	var logs pipelinetest.LogBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	rt, err := relay.Open(pipelinetest.Ctx(t), cfg, log)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer rt.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx, relay.All) }()
	defer func() { cancel(); <-done }()
	w.WaitSeeded(w.Agent.ID)
	w.SendCanvas("trace me")
	w.WaitReplies(1, 20*time.Second)

	// A parent span ends after its children: the dispatcher's handle span
	// (and the poller's poll span) may still be open when the replier's
	// post has ended. Wait for the whole chain.
	var post sdktrace.ReadOnlySpan
	var chain string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("span chain seen: %q", chain)
		}
	})
	pipelinetest.Eventually(t, 10*time.Second, "the span chain "+want, func() bool {
		post, chain = postChain(t, rec.Ended())
		return chain == want
	})
	if reply := spanByID(rec.Ended(), post.Parent().SpanID()); direct == "false" && (reply == nil || !reply.Parent().IsRemote()) {
		t.Error("the reply span's parent is not remote: the context did not cross NATS in the headers")
	}
	httpUnderPost := false
	for _, s := range rec.Ended() {
		if s.SpanKind() == trace.SpanKindClient && s.Parent().SpanID() == post.SpanContext().SpanID() &&
			strings.Contains(s.InstrumentationScope().Name, "otelhttp") {
			httpUnderPost = true
		}
	}
	if !httpUnderPost {
		t.Error("no otelhttp client span under the post span: the platform client is not instrumented")
	}
	checkLogTraceID(t, &logs, post.SpanContext().TraceID().String())
}

// checkLogTraceID: the dispatcher's and the replier's log lines about the
// message carry its trace id. The replier logs the post after its span
// ended, so the line may come a moment after the span: wait for it.
func checkLogTraceID(t *testing.T, logs *pipelinetest.LogBuffer, traceID string) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stages that logged trace_id %s: %v\n%s", traceID, stagesLogging(logs.String(), traceID), logs.String())
		}
	})
	pipelinetest.Eventually(t, 10*time.Second, "log lines with the trace id from the dispatcher and the replier", func() bool {
		stages := stagesLogging(logs.String(), traceID)
		return stages["dispatcher"] && stages["replier"]
	})
}

// stagesLogging returns the stages that wrote a log line carrying traceID.
func stagesLogging(logs, traceID string) map[string]bool {
	stages := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil || m["trace_id"] != traceID {
			continue
		}
		if s, ok := m["stage"].(string); ok {
			stages[s] = true
		}
	}
	return stages
}

// spanByID returns the ended span with id, or nil.
func spanByID(ended []sdktrace.ReadOnlySpan, id trace.SpanID) sdktrace.ReadOnlySpan {
	for _, s := range ended {
		if s.SpanContext().SpanID() == id {
			return s
		}
	}
	return nil
}

// postChain finds the ended post span and names its ended ancestors,
// nearest first ("post < reply-publish < ..."); every one must be in the
// post's trace.
func postChain(t *testing.T, ended []sdktrace.ReadOnlySpan) (sdktrace.ReadOnlySpan, string) {
	t.Helper()
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	var post sdktrace.ReadOnlySpan
	for _, s := range ended {
		byID[s.SpanContext().SpanID()] = s
		if s.Name() == "post" {
			post = s
		}
	}
	if post == nil {
		return nil, ""
	}
	var chain []string
	for s := post; s != nil; s = byID[s.Parent().SpanID()] {
		if s.SpanContext().TraceID() != post.SpanContext().TraceID() {
			t.Fatalf("span %s is in another trace", s.Name())
		}
		chain = append(chain, s.Name())
	}
	return post, strings.Join(chain, " < ")
}
