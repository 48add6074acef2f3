package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

// A stage still running when the stop's wait gave up on it (the grace ran
// out) meets the connection its caller then closes, and returns "nats:
// connection closed": the end of a normal stop, which logged ERROR "stage
// stopped … connection closed". A stage failing so before any stop is
// still an error, and fails the run.
func TestNormalShutdownLogsNoError(t *testing.T) {
	for _, stopped := range []bool{true, false} {
		t.Run(fmt.Sprintf("stopped=%v", stopped), func(t *testing.T) {
			var logs bytes.Buffer
			rt := &Runtime{Cfg: &config.Config{}, Log: slog.New(slog.NewTextHandler(&logs, nil))}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st := rt.newStopper(ctx)
			defer st.close()
			st.watch(nil, nil)
			if stopped {
				cancel()
			}
			st.start("replier", func() error { return fmt.Errorf("stage: pull: %w", nats.ErrConnectionClosed) })
			err := st.wait()
			errorLogged := strings.Contains(logs.String(), "level=ERROR")
			switch {
			case stopped && (err != nil || errorLogged):
				t.Errorf("after a stop: Run's error %v, log:\n%s", err, logs.String())
			case !stopped && (!errors.Is(err, nats.ErrConnectionClosed) || !errorLogged):
				t.Errorf("without a stop: Run's error %v (want connection closed), log:\n%s", err, logs.String())
			}
		})
	}
}
