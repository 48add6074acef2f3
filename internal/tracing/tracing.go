// Package tracing carries OpenTelemetry trace context through the relay:
// W3C traceparent/tracestate in the NATS headers of every envelope, one
// span per stage step (poll → publish → handle → reply-publish → post) and
// the trace id in log lines. It uses only the OpenTelemetry API: with no
// SDK installed (the default, and every Lambda build) spans record nothing
// and an incoming traceparent is passed on unchanged. Setup installs the
// SDK when the standard OTEL_* variables ask for it.
package tracing

import (
	"context"
	"log/slog"
	"slices"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Scope names the relay's tracer.
const Scope = "github.com/molecule-ai/molecule-relay"

// propagator is W3C trace context, whatever the global propagator is: the
// NATS headers are the relay's own wire format.
var propagator = propagation.TraceContext{}

// unset is the global tracer provider before anyone installs one: while
// it is still the global provider, tracing is off.
var unset = otel.GetTracerProvider()

// Start starts a span named name under ctx's span (from the global tracer
// provider, so a provider installed later is used). With no provider
// installed it allocates nothing: ctx comes back unchanged (an incoming
// traceparent is passed on as is) with a span that records nothing.
func Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if off() {
		return ctx, noop.Span{}
	}
	// The copy keeps attrs from escaping, so callers' attribute slices
	// stay on their stack on the path above.
	return otel.GetTracerProvider().Tracer(Scope).Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(slices.Clone(attrs)...))
}

// off reports whether tracing is off: no tracer provider installed, or a
// no-op one.
func off() bool {
	tp := otel.GetTracerProvider()
	_, isNoop := tp.(noop.TracerProvider)
	return tp == unset || isNoop
}

// Header returns NATS headers carrying ctx's trace context (traceparent,
// tracestate), or nil when ctx has none: set it as nats.Msg.Header.
func Header(ctx context.Context) nats.Header {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	h := nats.Header{}
	propagator.Inject(ctx, carrier(h))
	return h
}

// Extract returns ctx with the trace context of a received message's
// headers as its remote parent (ctx unchanged when there is none).
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return propagator.Extract(ctx, carrier(h))
}

// Log returns log with ctx's trace id, when ctx has one.
func Log(ctx context.Context, log *slog.Logger) *slog.Logger {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return log
	}
	return log.With("trace_id", sc.TraceID().String())
}

// carrier is a TextMapCarrier over NATS headers with the exact lowercase
// W3C keys (nats.Header, unlike http.Header, is case-sensitive).
type carrier nats.Header

func (c carrier) Get(k string) string { return nats.Header(c).Get(k) }
func (c carrier) Set(k, v string)     { nats.Header(c).Set(k, v) }
func (c carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// Inject adds ctx's trace context to h (which must not be nil).
func Inject(ctx context.Context, h nats.Header) { propagator.Inject(ctx, carrier(h)) }
