package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/stage"
)

// DefaultStartupTimeout is how long a stage waits at start-up for
// JetStream when MOLECULE_STARTUP_TIMEOUT is not set.
const DefaultStartupTimeout = 3 * time.Minute

// ErrStartupTimeout is matched by the error of a start-up that gave up
// waiting for JetStream (MOLECULE_STARTUP_TIMEOUT).
var ErrStartupTimeout = errors.New("relay: JetStream not ready within MOLECULE_STARTUP_TIMEOUT")

// startupAttempt bounds one try of the start-up's JetStream requests. A
// request to a stream without a leader, or to a server or leader that dies
// meanwhile, is never answered; the next try reaches the new one. A try
// that creates part of the topology and then times out is not lost: the
// next one finds what it created, each lookup answered in milliseconds by
// a group with a leader. A try in flight when the last group it waits for
// gets its leader runs out first, so the bound is what a restart during an
// election costs beyond the election: stage.AttemptTimeout, as for every
// request retried around a message. (At 10 s, a stage restarted during a
// node's restart spent 10 s on its first try alone; at 4 s, a replier
// restarted 0.7 s after a node kill ran 5.2 s after the last group it
// needed had a leader, make chaos-cluster.)
const startupAttempt = stage.AttemptTimeout

// startupPauseMax caps the pause between start-up tries: the tries are
// cheap (a group without a leader answers "no responders" at once or times
// out), and a longer pause only adds to the wait after the election.
const startupPauseMax = 500 * time.Millisecond

// waitJetStream runs attempt until it succeeds, fails for good (an answer
// no wait can change: see startupPermanent), ctx ends, or timeout passes.
// While the cluster has no quorum or elects leaders (after a node was
// lost: 4–9 s per group, nats-server raft.go minElectionTimeoutDefault and
// maxElectionTimeoutDefault) the JetStream API answers nothing, "no
// responders" or "temporarily unavailable"; a stage that exited then
// stayed down (under Kubernetes, CrashLoopBackOff added 10 s to 5 min per
// exit). So it waits, and says at warn level what for and why.
func waitJetStream(ctx context.Context, log *slog.Logger, timeout time.Duration, what string, attempt func(context.Context) error) error {
	if timeout <= 0 {
		timeout = DefaultStartupTimeout
	}
	start := time.Now()
	deadline := start.Add(timeout)
	pause := 250 * time.Millisecond
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, min(startupAttempt, max(time.Until(deadline), time.Second)))
		err := attempt(actx)
		cancel()
		if err == nil {
			if n > 1 {
				log.Info("nats: JetStream ready; starting", "ready", what, "waited", time.Since(start).Round(time.Millisecond), "attempts", n)
			}
			return nil
		}
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("stopped while waiting for %s: %w", what, err)
		case startupPermanent(err):
			return err
		case !time.Now().Before(deadline):
			return fmt.Errorf("%w (%s): still no %s after %d attempts: %w; the NATS cluster has no JetStream quorum or no leader for it: check that a majority of its nodes runs and that they see each other (nats server report jetstream)",
				ErrStartupTimeout, timeout, what, n, err)
		}
		log.Warn("nats: waiting for JetStream (a cluster without quorum, or electing leaders, answers nothing); retrying",
			"waiting_for", what, "error", err, "attempt", n, "gives_up_in", time.Until(deadline).Round(time.Second), "setting", "MOLECULE_STARTUP_TIMEOUT")
		// The last pause ends at the deadline, and a last try follows: a
		// cluster that answers "no responders" at once is still waited for
		// the whole timeout.
		t := time.NewTimer(min(pause, time.Until(deadline)))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("stopped while waiting for %s: %w", what, err)
		case <-t.C:
		}
		pause = min(2*pause, startupPauseMax)
	}
}

// startupPermanent says whether err is an answer that waiting cannot
// change: a topology that does not exist in lookup mode (an admin must
// create it), a user that may not do what it asked, or a closed
// connection. Timeouts, "no responders" (which nats.go reports as
// jetstream.ErrJetStreamNotEnabled), "JetStream system temporarily
// unavailable", and "not enabled for account" (a node that restarted
// answers so until its JetStream is up) are what a failover looks like,
// and are waited out.
func startupPermanent(err error) bool {
	for _, target := range []error{
		jetstream.ErrStreamNotFound, jetstream.ErrConsumerNotFound, jetstream.ErrBucketNotFound,
		nats.ErrAuthorization, nats.ErrPermissionViolation, nats.ErrConnectionClosed,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// metaLeaderAnswers asks for the account's JetStream info, which in a
// cluster only the meta leader answers (nats-server jetstream_api.go
// jsAccountInfoRequest); a node that knows it has none answers "JetStream
// system temporarily unavailable" (in its first 10 s nothing: the try
// times out). The topology's own requests cannot tell a cluster without
// quorum: a member of a stream group that lost its leader still answers
// STREAM.INFO (and so js.KeyValue) from its own copy (jsStreamInfoRequest),
// and a node that led a consumer answers its CONSUMER.INFO until it
// notices the lost quorum, 10–20 s later (raft.go lostQuorumCheck). A
// topology that exists is only looked up, in either mode, so without this
// a stage started on such a node found it and started.
func metaLeaderAnswers(ctx context.Context, js jetstream.JetStream) error {
	if _, err := js.AccountInfo(ctx); err != nil {
		return fmt.Errorf("JetStream meta leader (account info): %w", err)
	}
	return nil
}

// metaAttemptMin bounds a start-up's first ask of the meta leader. A meta
// leader answers it in milliseconds; during its election nobody answers
// (a node's first 10 s without one) and the try runs out. At startupAttempt
// (2 s) a stage restarted during a meta election started up to 2 s after
// the new leader was there: in make chaos-cluster, the slowed messages went
// on 2.4–3.1 s (median) after their own groups had leaders, against
// 0.3–0.4 s without the ask.
const metaAttemptMin = 250 * time.Millisecond

// metaCheck is metaLeaderAnswers over a start-up's tries: each try that
// ran out doubles the next one's bound, from metaAttemptMin up to the
// try's own, so a meta leader that is slow to answer (a loaded cluster)
// still gets the whole of a try.
type metaCheck struct{ bound time.Duration }

func newMetaCheck() *metaCheck { return &metaCheck{bound: metaAttemptMin} }

func (m *metaCheck) answers(ctx context.Context, js jetstream.JetStream) error {
	mctx, cancel := context.WithTimeout(ctx, m.bound)
	defer cancel()
	err := metaLeaderAnswers(mctx, js)
	if err != nil && mctx.Err() != nil && ctx.Err() == nil {
		m.bound = min(2*m.bound, startupAttempt)
	}
	return err
}
