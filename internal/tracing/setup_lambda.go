//go:build lambda.norpc

package tracing

import (
	"context"
	"net/http"
)

// Setup installs nothing in a Lambda build: the SDK and the OTLP exporter
// would not fit the bootstrap's size budget. The functions still pass an
// incoming traceparent on to the envelopes they publish.
func Setup(context.Context, string) (func(context.Context) error, error) {
	return func(context.Context) error { return nil }, nil
}

// Transport is rt: no otelhttp in a Lambda build.
func Transport(rt http.RoundTripper) http.RoundTripper { return rt }
