package tracing

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

const untracedChild = "TRACING_TEST_UNTRACED_CHILD"

// With tracing off, Start allocates nothing and passes an incoming
// traceparent on unchanged. "Off" is checked twice: no provider ever
// installed (a fresh process: other tests here install one, and the
// global provider cannot be reset) and a no-op provider installed.
func TestStartUntracedAllocatesNothing(t *testing.T) {
	if os.Getenv(untracedChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestStartUntracedAllocatesNothing$", "-test.count", "1")
		cmd.Env = append(os.Environ(), untracedChild+"=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("with no provider installed: %v\n%s", err, out)
		}
		otel.SetTracerProvider(noop.NewTracerProvider())
	} else if otel.GetTracerProvider() != unset {
		t.Fatal("the child process has a tracer provider installed")
	}
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": parent})
	allocs := testing.AllocsPerRun(100, func() {
		c, span := Start(ctx, "publish", trace.SpanKindProducer, attribute.String("molecule.activity_id", "a1"))
		span.End()
		if c != ctx {
			t.Fatal("Start changed the context with tracing off")
		}
	})
	if allocs != 0 {
		t.Errorf("Start with tracing off: %v allocations, want 0", allocs)
	}
	h := Header(ctx)
	if got := h.Get("traceparent"); got != parent {
		t.Errorf("traceparent passed on = %q, want %q", got, parent)
	}
}
