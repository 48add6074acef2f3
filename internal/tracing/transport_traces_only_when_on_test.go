package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// With tracing off the platform transport hands each request to the
// wrapped transport as it is (no otelhttp in between); with a provider
// installed the same transport records a client span per request and sends
// its traceparent.
func TestTransportTracesOnlyWhenTracingIsOn(t *testing.T) {
	traceparent := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		traceparent <- r.Header.Get("traceparent")
	}))
	defer srv.Close()
	var got *http.Request
	inner := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r
		return http.DefaultTransport.RoundTrip(r)
	})
	tr := Transport(inner)
	send := func() *http.Request {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return req
	}
	prevProp := otel.GetTextMapPropagator()
	otel.SetTextMapPropagator(propagation.TraceContext{})
	defer otel.SetTextMapPropagator(prevProp)

	otel.SetTracerProvider(noop.NewTracerProvider())
	if req := send(); got != req {
		t.Error("tracing off: the transport did not pass the request on as it is")
	}
	if tp := <-traceparent; tp != "" {
		t.Errorf("tracing off: traceparent %q sent", tp)
	}

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	otel.SetTracerProvider(tp)
	defer func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		_ = tp.Shutdown(context.Background())
	}()
	send()
	if tp := <-traceparent; tp == "" {
		t.Error("tracing on: no traceparent sent")
	}
	if n := len(rec.Ended()); n != 1 {
		t.Errorf("tracing on: %d spans ended, want 1 client span", n)
	}
}
