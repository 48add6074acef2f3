package config_test

import (
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

// A value that does not parse is refused naming the variable, the value
// and what is accepted, never in strconv's words.
func TestBadValuesNameWhatIsAccepted(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"MOLECULE_SSE=yes", `MOLECULE_SSE (--sse): "yes" is not a boolean; use true or false`},
		{"MOLECULE_PAGE_LIMIT=ten", `MOLECULE_PAGE_LIMIT (--page-limit): "ten" is not a whole number`},
		{"NATS_CONNECT_TIMEOUT=soon", `NATS_CONNECT_TIMEOUT (--nats-connect-timeout): "soon" is not a duration; use a number and a unit`},
		{"MOLECULE_POLL_INTERVAL=often", `MOLECULE_POLL_INTERVAL (--poll-interval): "often" is not a duration; use a number and a unit`},
	} {
		fl := config.BindFlags(flag.NewFlagSet("x", flag.ContinueOnError))
		_, err := config.Load(fl, []string{tc.env})
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "strconv") {
			t.Errorf("%s: %v; want %q", tc.env, err, tc.want)
		}
	}
}
