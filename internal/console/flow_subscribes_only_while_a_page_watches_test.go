package console_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/console"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// The live flow holds its NATS subscriptions only while a page watches
// it: a console nobody looks at costs the relay no message. While one
// watches, a message published on the inbound subject reaches the page's
// stream, without its text.
func TestFlowSubscribesOnlyWhileAPageWatches(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Options{})
	before := f.nc.NumSubscriptions()
	ctx, cancel := context.WithCancel(pipelinetest.Ctx(t))
	req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+"/api/flow/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.nc.NumSubscriptions(); got <= before {
		t.Fatalf("subscriptions while a page watches: %d, want more than %d", got, before)
	}
	in := `{"v":1,"workspace_id":"ws-1","activity_id":"act-9","source":"canvas_user","text":"` + secretText + `","created_at":"2026-01-01T00:00:00Z","polled_at":"2026-01-01T00:00:01Z"}`
	if err := f.nc.Publish(events.InboundSubject("ws-1"), []byte(in)); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	var data string
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok && strings.Contains(d, `"act-9"`) {
			data = d
			break
		}
	}
	if data == "" || strings.Contains(data, secretText) || !strings.Contains(data, "polled and published") {
		t.Fatalf("the page's stream carried %q: want the message's arrival, without its text", data)
	}
	cancel()
	resp.Body.Close()
	pipelinetest.Eventually(t, 5*time.Second, "the subscriptions dropped once no page watches", func() bool {
		return f.nc.NumSubscriptions() == before
	})
}
