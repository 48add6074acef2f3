package relay_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	relay "github.com/molecule-ai/molecule-relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// A Go handler's error that wraps relay.ErrPermanent dead-letters the
// message on its first delivery, and the one-shot run says so
// (ErrIncomplete, with the report).
func TestGoHandlerPermanentErrorIsDeadLettered(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{})
	var calls atomic.Int32
	r := open(t, func(*relay.Context, *relay.Message) (relay.Answer, error) {
		calls.Add(1)
		return relay.Answer{}, fmt.Errorf("%w: cannot read this", relay.ErrPermanent)
	}, settings(w)...)
	if rep, err := r.Once(pipelinetest.Ctx(t), 200*time.Millisecond); err != nil {
		t.Fatalf("first Once: %v %+v", err, rep)
	}
	w.SendCanvas("garbled")
	rep, err := r.Once(pipelinetest.Ctx(t), 200*time.Millisecond)
	if !errors.Is(err, relay.ErrIncomplete) || rep == nil || rep.OK() || rep.DeadLettered != 1 {
		t.Fatalf("Once: %v %+v; want ErrIncomplete and one dead letter", err, rep)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("handler called %d times, want once", n)
	}
	if d := w.DeadLetters(); len(d) != 1 || d[0].DeadLetter == nil || d[0].DeadLetter.Reason != "permanent_error" {
		t.Errorf("dead letters %+v", d)
	}
}
