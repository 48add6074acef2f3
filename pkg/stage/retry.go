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
	err := tryWrite(op)
	if err == nil {
		return nil
	}
	if permanent, ok := errors.AsType[*backoff.PermanentError](err); ok {
		return permanent.Err
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxInterval = 2 * time.Second
	b.MaxElapsedTime = 0
	first := err
	return backoff.Retry(func() error {
		if first != nil {
			err, first = first, nil
			return err
		}
		return tryWrite(op)
	}, backoff.WithContext(b, ctx))
}

// tryWrite is one try of RetryWrite: a closed connection is permanent.
func tryWrite(op func() error) error {
	err := op()
	if errors.Is(err, nats.ErrConnectionClosed) {
		return backoff.Permanent(err)
	}
	return err
}

// RetryCreate creates key in kv with RetryWrite: a transient failure is
// retried, a key that exists is not (jetstream.ErrKeyExists is returned
// at once, for the caller to read the record that won).
func RetryCreate(ctx context.Context, kv jetstream.KeyValue, key string, data []byte) (rev uint64, err error) {
	err = RetryWrite(ctx, func() error {
		var err error
		rev, err = kv.Create(ctx, key, data)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return backoff.Permanent(err)
		}
		return err
	})
	return rev, err
}
