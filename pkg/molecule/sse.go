package molecule

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
)

// maxSSELine caps one SSE line (an ACTIVITY_LOGGED frame carries the full
// request body, so it may be large).
const maxSSELine = 4 << 20

// sseInitialBuffer is the first size of an event stream's line buffer.
const sseInitialBuffer = 1 << 10

// StreamEvents holds GET /workspaces/:self/events/stream and calls fn for
// each event until ctx ends or the stream breaks; it returns the reason.
// It does not reconnect: callers do, with backoff.
//
// It returns ctx.Err() when ctx ends, an error matching ErrStreamEnded when
// the platform closes the stream, one matching ErrPlatformUnavailable when
// the connection breaks, and an *APIError for a non-200 answer. fn runs on
// the reading goroutine; a slow fn delays the stream. A frame whose data is
// not an event is logged and skipped.
func (c *Client) StreamEvents(ctx context.Context, fn func(Event)) error {
	r := request{
		method:    http.MethodGet,
		path:      c.selfPath("/events/stream"),
		accept:    "text/event-stream",
		noTimeout: true,
	}
	resp, err := c.openStreamAside(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	err = readSSE(resp.Body, min(int64(maxSSELine), c.cfg.MaxResponseBytes), func(data []byte) {
		var ev Event
		if err := json.Unmarshal(data, &ev); err != nil {
			c.log.LogAttrs(ctx, slog.LevelWarn, "molecule: skipping an event stream frame that is not an event",
				slog.Int("bytes", len(data)), slog.String("error", err.Error()))
			return
		}
		fn(ev)
	})
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if err == nil {
		return fmt.Errorf("%w: %s %s", ErrStreamEnded, r.method, r.path)
	}
	return fmt.Errorf("%w: %s %s: %w", ErrPlatformUnavailable, r.method, r.path, err)
}

// openStreamAside opens the event stream on a goroutine that ends once it
// is open. Opening (dial, request, headers) needs a deep stack, reading
// the stream a shallow one, and a goroutine keeps the stack it grew while
// it lives: the caller holds the stream for hours, one per workspace of a
// fleet, so it should not carry the open's stack all that time
// (docs/performance.md "An idle fleet").
func (c *Client) openStreamAside(ctx context.Context, r request) (resp *http.Response, err error) {
	opened := make(chan struct{})
	go func() {
		defer close(opened)
		resp, err = c.openStream(ctx, c.cfg.StreamHTTPClient, r, c.cfg.MaxResponseBytes)
	}()
	<-opened
	return resp, err
}

// readSSE parses text/event-stream framing from r, calling emit with the
// data of each event (multi-line data joined with "\n"). Comments (": ping")
// and fields other than data are ignored. It returns nil at EOF.
func readSSE(r io.Reader, maxLine int64, emit func([]byte)) error {
	sc := bufio.NewScanner(r)
	// The scanner doubles its buffer for a longer line, up to maxLine: an
	// idle stream carries only heartbeat echoes (about 100 bytes), a
	// message's ACTIVITY_LOGGED grows the buffer once to its size, and a
	// relay holds one stream per workspace, so a 64 KiB start cost 64 MB
	// at a thousand workspaces (issue 27).
	sc.Buffer(make([]byte, 0, min(sseInitialBuffer, maxLine)), int(maxLine))
	var (
		data    []byte
		hasData bool
	)
	for sc.Scan() {
		line := bytes.TrimSuffix(sc.Bytes(), []byte{'\r'})
		if len(line) == 0 {
			if hasData {
				emit(data)
			}
			data, hasData = nil, false
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, found := bytes.Cut(line, []byte{':'})
		if found {
			value = bytes.TrimPrefix(value, []byte{' '})
		}
		if string(field) != "data" {
			continue
		}
		if hasData {
			data = append(data, '\n')
		}
		data = append(data, value...)
		hasData = true
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%w: an event stream line exceeds %d bytes", ErrResponseTooLarge, maxLine)
		}
		return err
	}
	return nil
}
