//go:build !lambda.norpc

package tracing

import (
	"context"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
)

// Enabled reports whether the OTEL_* variables of environ ask for traces:
// an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or ..._TRACES_ENDPOINT) or
// OTEL_TRACES_EXPORTER=otlp, and neither OTEL_SDK_DISABLED=true nor
// OTEL_TRACES_EXPORTER=none. Off by default.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || getenv("OTEL_TRACES_EXPORTER") == "none" {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" ||
		getenv("OTEL_TRACES_EXPORTER") == "otlp"
}

// Setup installs the OpenTelemetry SDK with the OTLP/HTTP exporter (which
// reads the OTEL_EXPORTER_OTLP_* variables itself) when Enabled, with
// service.name from OTEL_SERVICE_NAME or serviceName. shutdown flushes
// the spans; it is a no-op when tracing is off.
func Setup(ctx context.Context, serviceName string) (shutdown func(context.Context) error, err error) {
	if !Enabled(os.Getenv) {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, err
	}
	res, err := resource.Merge(resource.NewSchemaless(semconv.ServiceName(serviceName)), resource.Environment())
	if err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	return tp.Shutdown, nil
}

// Transport wraps the platform client's transport with otelhttp while
// tracing is on (a tracer provider installed, as Start decides per call): a
// client span per request, traceparent on the request. While it is off, a
// request goes straight to rt: otelhttp would still build its attribute
// sets and metric options for every request, and wrap every response body,
// to record nothing (12 % of an idle fleet's CPU at 1,000 workspaces,
// docs/performance.md "An idle fleet"). Nothing is lost: with tracing off
// the global propagator is the no-op one, so otelhttp injected nothing.
func Transport(rt http.RoundTripper) http.RoundTripper {
	return &transport{plain: rt, traced: otelhttp.NewTransport(rt)}
}

type transport struct{ plain, traced http.RoundTripper }

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if off() {
		return t.plain.RoundTrip(r)
	}
	return t.traced.RoundTrip(r)
}

// CloseIdleConnections passes http.Client.CloseIdleConnections on to rt.
func (t *transport) CloseIdleConnections() {
	if c, ok := t.plain.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
