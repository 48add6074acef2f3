package events

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/nats-io/nats.go/jetstream"
)

// ensureStream creates the stream of want, or updates it only when its
// configuration differs from want. Every stage ensures the topology when it
// starts, so most calls find the stream as it should be; sending an update
// anyway makes the server rewrite the stream's store config while other
// stages create consumers on it, which nats-server v2.15.2 does without a
// lock (fileStore.UpdateConfig against fileStore.ConsumerStore, a data race
// the race detector reports in TestEnsureTopologyConcurrent).
func ensureStream(ctx context.Context, js jetstream.JetStream, want jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := js.Stream(ctx, want.Name)
	switch {
	case err == nil:
		if configHolds(s.CachedInfo().Config, want) {
			return s, nil
		}
	case errors.Is(err, jetstream.ErrStreamNotFound):
		s, err := js.CreateStream(ctx, want)
		if err == nil || !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return s, err
		}
		// Another stage created it meanwhile, with another configuration:
		// update it below.
	default:
		return nil, fmt.Errorf("look up stream %s: %w", want.Name, err)
	}
	return js.CreateOrUpdateStream(ctx, want)
}

// ensureConsumer creates or updates the durable consumer of want on
// stream, sending the update only when the configuration differs, for the
// same reason as ensureStream.
func ensureConsumer(ctx context.Context, js jetstream.JetStream, stream string, want jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	c, err := js.Consumer(ctx, stream, want.Durable)
	if err == nil && configHolds(c.CachedInfo().Config, want) {
		return c, nil
	}
	if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil, fmt.Errorf("look up consumer %s: %w", want.Durable, err)
	}
	return js.CreateOrUpdateConsumer(ctx, stream, want)
}

// configHolds reports whether the server's configuration got already is
// want: every field want sets is equal in got. A zero numeric, string,
// pointer, slice, map or struct field of want means "the server's default"
// and is taken from got; booleans and the jetstream enums (storage,
// retention, ack policy...) are compared as they are, since their zero
// value is a choice (AllowDirect false on a replicated bucket, for
// instance).
func configHolds[T jetstream.StreamConfig | jetstream.ConsumerConfig](got, want T) bool {
	g := reflect.ValueOf(got)
	w := reflect.ValueOf(&want).Elem()
	for i := range w.NumField() {
		f := w.Field(i)
		if f.IsZero() && defaultable(f.Type()) {
			f.Set(g.Field(i))
		}
	}
	return reflect.DeepEqual(got, want)
}

func defaultable(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Bool:
		return false
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		// Builtin numbers and durations have server defaults; the jetstream
		// package's named integers are enums.
		return t.PkgPath() != reflect.TypeFor[jetstream.StreamConfig]().PkgPath()
	default:
		return true
	}
}
