package stage

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RetryDelay is the NakWithDelay delay before delivery+1:
// min(maxDelay, base*2^(delivery-1)), with ±20% jitter. Plain Nak ignores a
// consumer's BackOff (nats-server#4726), so the stages compute the delay.
func RetryDelay(base, maxDelay time.Duration, delivery uint64) time.Duration {
	if delivery < 1 {
		delivery = 1
	}
	d := base
	for i := uint64(1); i < delivery && d < maxDelay; i++ {
		d *= 2
	}
	d = min(d, maxDelay)
	jitter := 0.8 + 0.4*rand.Float64()
	return time.Duration(float64(d) * jitter)
}

// RetryWrite retries a JetStream write with exponential backoff (50 ms up
// to 2 s between tries) until it succeeds, returns a backoff.Permanent
// error, the connection is closed, or ctx ends.
//
// The first try runs before any backoff state is built: almost every
// write succeeds at once, and the backoff, its context wrapper, timer and
// closures cost about five allocations per write. After a failed first
// try the backoff loop starts as backoff.Retry would have continued it:
// its first "try" returns that failure, so the next real one comes after
// the first wait.
func RetryWrite(ctx context.Context, op func() error) error {
	return retry(ctx, 2*time.Second, func() error { return tryWrite(op) })
}

// retry runs try until it succeeds, returns a backoff.Permanent error, or
// ctx ends, waiting from 50 ms up to maxWait between tries. The first try
// runs before any backoff state is built (see RetryWrite).
func retry(ctx context.Context, maxWait time.Duration, try func() error) error {
	err := try()
	if err == nil {
		return nil
	}
	if permanent, ok := errors.AsType[*backoff.PermanentError](err); ok {
		return permanent.Err
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxInterval = maxWait
	b.MaxElapsedTime = 0
	first := err
	err = backoff.Retry(func() error {
		if first != nil {
			err, first = first, nil
			return err
		}
		return try()
	}, backoff.WithContext(b, ctx))
	if permanent, ok := errors.AsType[*backoff.PermanentError](err); ok {
		return permanent.Err
	}
	return err
}

// tryWrite is one try of RetryWrite: a closed connection is permanent.
func tryWrite(op func() error) error {
	err := op()
	if errors.Is(err, nats.ErrConnectionClosed) {
		return backoff.Permanent(err)
	}
	return err
}

// AttemptTimeout bounds one try of RetryRequest.
//
// A JetStream request whose server or stream/consumer leader dies before
// it answers is never answered: nats.go does not fail the requests in
// flight when it reconnects, and a new leader does not answer what its
// predecessor received. Bounded only by the operation's context
// (StoreTimeout, 30 s), such a request held a message for half a minute
// after a node was killed, while the new leader, elected within seconds,
// would have answered a second try at once. The requests retried this way
// are idempotent (a create, a publish with a message id, an ack, a read),
// so a try that timed out but was applied only makes the next one find
// its own result.
const AttemptTimeout = 2 * time.Second

// RetryRequest is RetryWrite for an operation that takes its context:
// each try runs with its own AttemptTimeout inside ctx, and the wait
// between tries grows from 50 ms to at most 500 ms, so that a group whose
// leader is being elected (4–9 s after a crash, nats-server raft.go
// minElectionTimeoutDefault/maxElectionTimeoutDefault) is written to
// within half a second of having one; a try against a group without a
// leader is answered at once ("no responders") or times out, and costs
// the cluster nothing else.
//
// Inside a Runner.OpContext a try's timer is its only one, set at the
// earlier of AttemptTimeout and the operation's deadline; a wait between
// tries starts the operation's own (opContext).
func RetryRequest(ctx context.Context, op func(ctx context.Context) error) error {
	return retry(ctx, 500*time.Millisecond, func() error {
		actx, cancel, opCtx := attempt(ctx, AttemptTimeout)
		defer endAttempt(opCtx, cancel)
		return tryWrite(func() error { return op(actx) })
	})
}

// RetryCreate creates key in kv with RetryRequest: a transient failure is
// retried, a key that exists is not (jetstream.ErrKeyExists is returned
// at once, for the caller to read the record that won; after a try that
// timed out but was applied, that is this caller's own record).
func RetryCreate(ctx context.Context, kv jetstream.KeyValue, key string, data []byte) (rev uint64, err error) {
	err = RetryRequest(ctx, func(ctx context.Context) error {
		var err error
		rev, err = kv.Create(ctx, key, data)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return backoff.Permanent(err)
		}
		return err
	})
	return rev, err
}

// RetryGet reads key from kv with RetryRequest: a read that fails or
// meets no answer (a bucket whose leader is being elected) is tried again
// until ctx ends; jetstream.ErrKeyNotFound is an answer and returned at
// once.
func RetryGet(ctx context.Context, kv jetstream.KeyValue, key string) (entry jetstream.KeyValueEntry, err error) {
	err = RetryRequest(ctx, func(ctx context.Context) error {
		var err error
		entry, err = kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return backoff.Permanent(err)
		}
		return err
	})
	return entry, err
}
