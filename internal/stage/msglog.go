package stage

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// MessageLogger returns log.With(attrs...) for one message, built only
// when something is actually logged. A stage names every message in its
// logs (workspace, activity, delivery), but most messages log nothing at
// the enabled level; an eager With formats the attributes into a new
// handler for each of them (about ten allocations per stage).
//
// The output is the same as log.With's: the first Handle, WithAttrs or
// WithGroup builds log.Handler().WithAttrs(attrs) once and uses it from
// then on. Enabled asks log's handler directly: a slog handler's level
// does not depend on its attributes (true of the text and JSON handlers
// and of internal/lambdafn's).
func MessageLogger(log *slog.Logger, attrs ...slog.Attr) *slog.Logger {
	h := &msgAttrs{base: log.Handler()}
	if len(attrs) > len(h.buf) {
		// Eager, as log.With. The clone keeps attrs from escaping, so
		// callers' variadic slices stay on their stack on the path below.
		return slog.New(h.base.WithAttrs(slices.Clone(attrs)))
	}
	h.n = copy(h.buf[:], attrs)
	return slog.New(h)
}

// msgAttrs is the deferred With of MessageLogger.
type msgAttrs struct {
	base slog.Handler
	buf  [6]slog.Attr
	n    int
	once sync.Once
	with slog.Handler // base.WithAttrs(buf[:n]), set by once
}

func (h *msgAttrs) handler() slog.Handler {
	h.once.Do(func() { h.with = h.base.WithAttrs(h.buf[:h.n]) })
	return h.with
}

func (h *msgAttrs) Enabled(ctx context.Context, l slog.Level) bool {
	return h.base.Enabled(ctx, l)
}

func (h *msgAttrs) Handle(ctx context.Context, r slog.Record) error {
	return h.handler().Handle(ctx, r)
}

func (h *msgAttrs) WithAttrs(as []slog.Attr) slog.Handler { return h.handler().WithAttrs(as) }

func (h *msgAttrs) WithGroup(name string) slog.Handler { return h.handler().WithGroup(name) }
