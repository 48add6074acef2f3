package handler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// Parse builds a built-in handler from the spec string the CLI takes
// (--handler, MOLECULE_HANDLER).
func ExampleParse() {
	h, err := handler.Parse("echo", handler.Options{})
	if err != nil {
		panic(err)
	}
	reply, err := h.Handle(context.Background(), &handler.Request{
		Message:  &events.Inbound{WorkspaceID: "ws", ActivityID: "a1", Text: "hello"},
		Delivery: 1,
		Progress: func() {},
	})
	fmt.Println(reply, err)
	// Output: echo: hello <nil>
}

// An exec: handler runs a program without a shell; the message arrives on
// its stdin as JSON ({"message": {...}, "delivery": n}) and its stdout is
// the reply.
func ExampleParse_exec() {
	h, err := handler.Parse(`exec:tr a-z A-Z`, handler.Options{})
	if err != nil {
		panic(err)
	}
	reply, err := h.Handle(context.Background(), &handler.Request{
		Message:  &events.Inbound{WorkspaceID: "ws", ActivityID: "a1", Text: "hi"},
		Delivery: 1,
		Progress: func() {},
	})
	fmt.Println(strings.HasPrefix(reply, `{"MESSAGE":{"V":0,"WORKSPACE_ID":"WS"`), err)
	// Output: true <nil>
}

// A Go program passes its own function. Wrapping ErrPermanent sends the
// message to the dead-letter stream without retries.
func ExampleFunc() {
	h := handler.Func(func(ctx context.Context, req *handler.Request) (string, error) {
		if req.Message.Text == "" {
			return "", fmt.Errorf("%w: empty message", handler.ErrPermanent)
		}
		req.Progress() // still alive; call it during long work
		return "you said " + req.Message.Text, nil
	})

	reply, _ := h.Handle(context.Background(), &handler.Request{Message: &events.Inbound{Text: "hi"}, Progress: func() {}})
	fmt.Println(reply)
	_, err := h.Handle(context.Background(), &handler.Request{Message: &events.Inbound{}, Progress: func() {}})
	fmt.Println(errors.Is(err, handler.ErrPermanent))
	// Output:
	// you said hi
	// true
}
