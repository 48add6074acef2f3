package configerr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/configerr"
)

func TestAPackagesConfigErrorMatchesItselfAndTheOneSentinel(t *testing.T) {
	dispatcher, replier := configerr.For("dispatcher"), configerr.For("replier")
	err := fmt.Errorf("%w: concurrency must be >= 1", dispatcher)
	if !errors.Is(err, dispatcher) || !errors.Is(err, configerr.ErrInvalid) {
		t.Errorf("%v does not match its package's error and ErrInvalid", err)
	}
	if errors.Is(err, replier) {
		t.Errorf("%v matches another package's error", err)
	}
	if !errors.Is(err, configerr.For("dispatcher")) {
		t.Errorf("%v does not match its package's error made again", err)
	}
	if got := err.Error(); got != "dispatcher: invalid configuration: concurrency must be >= 1" {
		t.Errorf("text %q", got)
	}
}
