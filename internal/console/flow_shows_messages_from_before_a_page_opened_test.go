package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/console"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// A page that opens the flow sees the messages handled and answered
// before it opened (read back from the handled and reply records and the
// dead letters), not only those that arrive while it watches; opening
// the live stream afterwards reads them again without doubling a step.
func TestFlowShowsMessagesFromBeforeAPageOpened(t *testing.T) {
	t.Parallel()
	f := newFixture(t, console.Options{})
	ctx := pipelinetest.Ctx(t)
	handledAt := time.Now().Add(-time.Minute).UTC()
	put := func(kv, key string, v any) {
		b, _ := json.Marshal(v)
		bucket, err := f.js.KeyValue(ctx, kv)
		if err == nil {
			_, err = bucket.Put(ctx, key, b)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	reply, _ := json.Marshal(map[string]any{"v": 1, "workspace_id": "ws-1", "activity_id": "act-2", "text": "an earlier answer"})
	put(events.BucketHandled, events.HandledKey("ws-1", "act-2"), events.HandledRecord{Outcome: events.OutcomeReplied, Reply: reply, Delivery: 1, HandledAt: handledAt})
	put(events.BucketReplies, events.ReplyKey("ws-1", "act-2"), events.ReplyRecord{State: events.StateSent, Route: events.RouteNotify, SentAt: handledAt.Add(time.Second), Attempts: 1})

	byActivity := func(body string) map[string]console.Message {
		var v struct{ Messages []console.Message }
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("flow %s: %v", body, err)
		}
		out := map[string]console.Message{}
		for _, m := range v.Messages {
			out[m.Activity] = m
		}
		return out
	}
	c := browserClient(t)
	_, body := f.do(t, c, "GET", "/api/flow", "")
	got := byActivity(body)
	if m := got["act-2"]; m.State != "answered" || len(m.Steps) != 2 {
		t.Fatalf("the answered message from before the page: %+v, want answered, with its handler run and its answer", m)
	}
	if m := got["act-1"]; m.State != "dead_letter" {
		t.Fatalf("the dead letter from before the page: %+v", m)
	}
	if strings.Contains(body, secretText) {
		t.Fatal("the flow carries a body")
	}

	// The page's live stream reads the history again: nothing doubles.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(sctx, "GET", f.srv.URL+"/api/flow/stream", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if !bufio.NewScanner(resp.Body).Scan() {
		t.Fatal("the stream said nothing")
	}
	_, body = f.do(t, c, "GET", "/api/flow", "")
	if m := byActivity(body)["act-2"]; len(m.Steps) != 2 {
		t.Fatalf("after the stream opened: %d steps %+v, want the same 2", len(m.Steps), m.Steps)
	}
}
