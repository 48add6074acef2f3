package relay

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
)

// streamTransport carries the workspaces' event streams over plain
// HTTP/1.1 on a connection of their own, read on the caller's goroutine.
// Through net/http's Transport every held stream costs two goroutines
// more than its reader (the connection's readLoop and writeLoop, 8 KiB
// of stack each once grown) and a 4 KiB read buffer, for a connection
// that carries one request and then only reads: at 1,000 workspaces that
// was 2,000 of the idle relay's 3,000 goroutines (docs/performance.md "An
// idle fleet"). A stream is long-lived and never reused, so it needs none
// of the pool.
//
// It serves a GET to an http:// URL that reaches the platform directly.
// An https:// URL (HTTP/2 usually multiplexes the streams over a few
// connections there) and a request through a proxy go to pooled, the
// shared transport.
type streamTransport struct {
	pooled *http.Transport
}

// streamReadBuffer is the buffer the response is read through: it holds
// the status line and headers; an idle stream then carries ~100-byte
// heartbeat echoes, and the SSE reader keeps its own line buffer.
const streamReadBuffer = 1 << 10

func (t streamTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "http" || req.Method != http.MethodGet || req.Body != nil && req.Body != http.NoBody {
		return t.pooled.RoundTrip(req)
	}
	if t.pooled.Proxy != nil {
		proxy, err := t.pooled.Proxy(req)
		if err != nil || proxy != nil {
			return t.pooled.RoundTrip(req)
		}
	}
	ctx := req.Context()
	port := req.URL.Port()
	if port == "" {
		port = "80"
	}
	dial := t.pooled.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	conn, err := dial(ctx, "tcp", net.JoinHostPort(req.URL.Hostname(), port))
	if err != nil {
		return nil, err
	}
	// The caller's context ends the stream: closing the connection
	// unblocks a read in progress (no goroutine waits for it).
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	fail := func(err error) (*http.Response, error) {
		stop()
		conn.Close()
		if cerr := ctx.Err(); cerr != nil {
			return nil, cerr
		}
		return nil, err
	}
	if err := req.Write(conn); err != nil {
		return fail(err)
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(conn, streamReadBuffer), req)
	if err != nil {
		return fail(err)
	}
	resp.Body = &streamBody{ReadCloser: resp.Body, conn: conn, stop: stop}
	return resp, nil
}

// CloseIdleConnections passes http.Client.CloseIdleConnections on to the
// pool (a stream holds no idle connection).
func (t streamTransport) CloseIdleConnections() { t.pooled.CloseIdleConnections() }

// streamBody is a stream's body; Close closes its connection (the body's
// own Close would first read an endless stream to its end).
type streamBody struct {
	io.ReadCloser
	conn net.Conn
	stop func() bool
}

func (b *streamBody) Close() error {
	b.stop()
	if err := b.conn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
