package molecule_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// sseServer answers the event stream with frames, then holds the stream
// open until the request ends (hold) or closes it.
func sseServer(t *testing.T, frames string, hold bool) *wireServer {
	return newWire(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("X-RateLimit-Limit", "600")
		w.Header().Set("X-RateLimit-Remaining", "599")
		w.WriteHeader(200)
		io.WriteString(w, frames)
		w.(http.Flusher).Flush()
		if hold {
			<-r.Context().Done()
		}
	})
}

func TestStreamEventsFraming(t *testing.T) {
	frames := ": ping\n\n" +
		"data: {\"type\":\"ACTIVITY_LOGGED\",\"timestamp\":1795282012149,\"data\":{\"method\":\"message/send\"}}\n\n" +
		"event: ignored\nid: 3\nretry: 10\n" +
		"data: {\"type\":\"AGENT_MESSAGE\",\r\n" +
		"data: \"timestamp\":2,\"data\":{}}\r\n\r\n" +
		"data: not json\n\n" +
		"data:{\"type\":\"NO_SPACE\",\"timestamp\":3}\n\n" +
		"data: {\"type\":\"UNTERMINATED\"}\n"
	ws := sseServer(t, frames, false)
	c := wireClient(t, ws.URL, nil)
	var got []molecule.Event
	err := c.StreamEvents(context.Background(), func(e molecule.Event) { got = append(got, e) })
	if !errors.Is(err, molecule.ErrStreamEnded) {
		t.Fatalf("err = %v; want ErrStreamEnded", err)
	}
	var types []string
	for _, e := range got {
		types = append(types, e.Type)
	}
	if strings.Join(types, ",") != "ACTIVITY_LOGGED,AGENT_MESSAGE,NO_SPACE" {
		t.Fatalf("events = %v", types)
	}
	if got[0].Timestamp != 1795282012149 || string(got[0].Data) != `{"method":"message/send"}` {
		t.Fatalf("first event = %+v", got[0])
	}
	r := ws.last(t)
	if r.Path != "/workspaces/"+wireWS+"/events/stream" || r.Header.Get("Accept") != "text/event-stream" ||
		r.Header.Get("Authorization") != "Bearer "+wireToken {
		t.Fatalf("request = %s %v", r.Path, r.Header)
	}
	if !c.RateLimit().Known {
		t.Fatal("stream answer's rate limit not recorded")
	}
}

func TestStreamEventsEndsWithContext(t *testing.T) {
	ws := sseServer(t, ": ping\n\ndata: {\"type\":\"A\"}\n\n", true)
	c := wireClient(t, ws.URL, func(c *molecule.Config) { c.RequestTimeout = time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- c.StreamEvents(ctx, func(e molecule.Event) {
			if e.Type == "A" {
				cancel()
			}
		})
	}()
	select {
	case err := <-errc:
		// RequestTimeout does not apply to the stream: only the cancel ends it.
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v; want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("StreamEvents did not return after cancel")
	}
}

func TestStreamEventsErrors(t *testing.T) {
	ws := newWire(t, jsonAnswer(401, `{"error":"invalid workspace auth token"}`))
	c := wireClient(t, ws.URL, nil)
	err := c.StreamEvents(context.Background(), func(molecule.Event) { t.Error("event on a 401") })
	if !errors.Is(err, molecule.ErrUnauthorized) {
		t.Fatalf("err = %v", err)
	}

	long := "data: {\"type\":\"" + strings.Repeat("x", 4096) + "\"}\n\n"
	ws2 := sseServer(t, long, false)
	c2 := wireClient(t, ws2.URL, func(c *molecule.Config) { c.MaxResponseBytes = 1024 })
	err = c2.StreamEvents(context.Background(), func(molecule.Event) { t.Error("oversized event delivered") })
	if !errors.Is(err, molecule.ErrResponseTooLarge) {
		t.Fatalf("err = %v", err)
	}

	c3 := wireClient(t, "http://127.0.0.1:1", nil)
	if err := c3.StreamEvents(context.Background(), func(molecule.Event) {}); !errors.Is(err, molecule.ErrPlatformUnavailable) {
		t.Fatalf("refused = %v", err)
	}
}
