package handler_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/handler"
)

func TestBriefDropsWhatTheHandlerSaid(t *testing.T) {
	const secret = "my bank PIN is 4711"
	cases := []struct {
		err  error
		want string
	}{
		{fmt.Errorf("wrapped: %w", &handler.StatusError{URL: "http://127.0.0.1:1/agent", Code: 422, Message: `{"input":"` + secret + `"}`}),
			"handler: POST http://127.0.0.1:1/agent: 422 Unprocessable Entity"},
		{&handler.ExitError{Program: "./agent.sh", Code: 1, Stderr: "cannot answer: " + secret},
			"handler: exec ./agent.sh: exit status 1"},
		{errors.New("a Go handler's own words"), "a Go handler's own words"},
	}
	for _, tc := range cases {
		got := handler.Brief(tc.err)
		if strings.Contains(got, "4711") || !strings.HasPrefix(got, tc.want) {
			t.Errorf("Brief(%q) = %q; want it to start %q and hold nothing the handler said", tc.err, got, tc.want)
		}
	}
}
