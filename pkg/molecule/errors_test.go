package molecule_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

func TestAPIErrorText(t *testing.T) {
	cases := []struct {
		err  *molecule.APIError
		want string
	}{
		{&molecule.APIError{Method: "GET", Path: "/workspaces/a/state", StatusCode: 401, Message: "invalid workspace auth token", Body: `{"error":"invalid workspace auth token"}`},
			"molecule: GET /workspaces/a/state: HTTP 401: invalid workspace auth token"},
		{&molecule.APIError{Method: "POST", Path: "/workspaces/a/notify", StatusCode: 500, Body: "oops"},
			"molecule: POST /workspaces/a/notify: HTTP 500: oops"},
		{&molecule.APIError{Method: "GET", Path: "/workspaces/a/state", StatusCode: 404},
			"molecule: GET /workspaces/a/state: HTTP 404: (empty body)"},
		{&molecule.APIError{Method: "GET", Path: "/x", StatusCode: 429, Message: "rate limit exceeded", RetryAfter: 58 * time.Second},
			"molecule: GET /x: HTTP 429: rate limit exceeded (retry after 58s)"},
	}
	for _, tc := range cases {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
		// Built outside the client, an APIError matches no sentinel.
		if tc.err.Unwrap() != nil {
			t.Errorf("Unwrap() = %v", tc.err.Unwrap())
		}
	}
}

func TestErrorHelpers(t *testing.T) {
	ae := &molecule.APIError{StatusCode: 503, RetryAfter: 30 * time.Second}
	wrapped := fmt.Errorf("replier: %w", ae)
	if molecule.StatusOf(wrapped) != 503 || molecule.RetryAfterOf(wrapped) != 30*time.Second {
		t.Fatalf("StatusOf/RetryAfterOf through a wrap = %d, %v", molecule.StatusOf(wrapped), molecule.RetryAfterOf(wrapped))
	}
	for _, err := range []error{nil, errors.New("plain"), molecule.ErrInvalidArgument} {
		if molecule.StatusOf(err) != 0 || molecule.RetryAfterOf(err) != 0 {
			t.Fatalf("helpers on %v are not zero", err)
		}
	}
}
