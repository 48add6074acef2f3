package handler_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

func newRequest(text string) *handler.Request {
	return &handler.Request{
		Message: &events.Inbound{
			V:                 events.Version,
			WorkspaceID:       "35637291-d55e-4553-896c-13c2e02fe4f7",
			ActivityID:        "9b2f1c6e-0a5d-4e8b-a3f1-2c7d8e9f0a1b",
			Source:            events.SourcePeerAgent,
			SourceWorkspaceID: "e1f2a3b4-c5d6-4e7f-8a9b-0c1d2e3f4a5b",
			Text:              text,
			Raw:               []byte(`{"id":"9b2f1c6e-0a5d-4e8b-a3f1-2c7d8e9f0a1b","activity_type":"a2a_receive"}`),
			CreatedAt:         time.Date(2026, 5, 12, 9, 14, 3, 0, time.UTC),
			PolledAt:          time.Date(2026, 5, 12, 9, 14, 4, 0, time.UTC),
		},
		Delivery: 2,
		Deadline: time.Date(2026, 5, 12, 9, 19, 4, 0, time.UTC),
		Logger:   slog.New(slog.DiscardHandler),
		Progress: func() {},
	}
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustParse(t *testing.T, spec string, opts handler.Options) handler.Handler {
	t.Helper()
	h, err := handler.Parse(spec, opts)
	if err != nil {
		t.Fatalf("Parse(%q): %v", spec, err)
	}
	return h
}
