package molecule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// doWithRetry sends an idempotent GET, retrying on 429, 502, 503, 504 and
// transport failures up to MaxRetries times. The wait is the platform's
// Retry-After when it gave one, else jittered exponential backoff
// (RetryBaseInterval, doubling, ±25 %, capped at MaxBackoff). A wait the
// context's deadline cannot accommodate, or a Retry-After longer than
// MaxBackoff, is not slept: the last error is returned at once.
func (c *Client) doWithRetry(ctx context.Context, r request) (*response, error) {
	pol := &retryPolicy{
		exp:     newExponential(c.cfg.RetryBaseInterval, c.cfg.MaxBackoff),
		max:     c.cfg.MaxBackoff,
		ctx:     ctx,
		nowFunc: time.Now,
	}
	var (
		last     *response
		lastErr  error
		attempts int
	)
	op := func() (*response, error) {
		attempts++
		resp, err := c.attempt(ctx, r)
		last, lastErr = resp, err
		pol.hint = 0
		if err == nil {
			return resp, nil
		}
		if !retryable(ctx, err) {
			return resp, backoff.Permanent(err)
		}
		pol.hint = RetryAfterOf(err)
		return resp, err
	}
	notify := func(err error, wait time.Duration) {
		c.log.LogAttrs(ctx, slog.LevelDebug, "molecule: retrying GET",
			slog.String("path", r.path), slog.Int("attempt", attempts),
			slog.Duration("wait", wait), slog.String("error", err.Error()))
	}
	b := backoff.WithContext(backoff.WithMaxRetries(pol, uint64(c.cfg.MaxRetries)), ctx)
	resp, err := backoff.RetryNotifyWithData(op, b, notify)
	if err != nil && lastErr != nil && !errors.Is(err, lastErr) {
		// The context ended while waiting: say why, and what failed last.
		return last, fmt.Errorf("%w (last attempt: %w)", err, lastErr)
	}
	return resp, err
}

// retryable reports whether a GET that failed with err may be re-sent.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	return errors.Is(err, ErrRateLimited) || errors.Is(err, ErrPlatformUnavailable)
}

// newExponential is the backoff between GET retries when the platform gave
// no Retry-After: base, 2×base, 4×base, … ±25 %, capped at max.
func newExponential(base, max time.Duration) *backoff.ExponentialBackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(base),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0.25),
		backoff.WithMaxInterval(max),
		backoff.WithMaxElapsedTime(0),
	)
}

// retryPolicy is the BackOff of doWithRetry: exponential, overridden by the
// platform's Retry-After (hint), and stopping rather than sleeping past the
// context's deadline.
type retryPolicy struct {
	exp     *backoff.ExponentialBackOff
	max     time.Duration
	ctx     context.Context
	hint    time.Duration
	nowFunc func() time.Time
}

// NextBackOff returns the next wait or backoff.Stop.
func (p *retryPolicy) NextBackOff() time.Duration {
	d := p.exp.NextBackOff()
	if d == backoff.Stop {
		return backoff.Stop
	}
	if d > p.max {
		d = p.max
	}
	if p.hint > 0 {
		if p.hint > p.max {
			return backoff.Stop
		}
		d = p.hint
	}
	if dl, ok := p.ctx.Deadline(); ok && p.nowFunc().Add(d).After(dl) {
		return backoff.Stop
	}
	return d
}

// Reset restarts the exponential sequence.
func (p *retryPolicy) Reset() {
	p.exp.Reset()
	p.hint = 0
}
