package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// Earlier versions kept a conversation as one JSON list of turns under
// events.HistoryKey in the key-value bucket events.BucketHistory. Nothing
// writes there any more; a conversation the stream does not hold yet is
// read from there and carried over (carryOver), so a relay upgraded in
// place keeps its conversations. The bucket empties itself by its TTL.

// carryOver reads a conversation from the history bucket of an earlier
// version and seeds the stream with it: create-only, so it lands before
// any later turn, and with a Nats-Msg-Id, so two readers at once store it
// once. It returns the turns read (none when the bucket holds none). A
// seed that fails is not an error of the read: the turns are returned,
// and the next read carries them over again.
func (s *Store) carryOver(ctx context.Context, workspace, conversation string) ([]handler.Turn, error) {
	turns, ok, err := readLegacy(ctx, s.legacy, workspace, conversation)
	if err != nil || !ok || len(turns) == 0 {
		return nil, err
	}
	turns = dedupe(s.clipAll(turns))
	_ = s.seed(ctx, workspace, conversation, turns, "mem:legacy:"+events.HistoryKey(workspace, conversation))
	return turns, nil
}

// readLegacy is a conversation's value in the history bucket; ok is false
// when there is no bucket or it has no such key.
func readLegacy(ctx context.Context, kv jetstream.KeyValue, workspace, conversation string) (turns []handler.Turn, ok bool, err error) {
	if kv == nil {
		return nil, false, nil
	}
	entry, err := kv.Get(ctx, events.HistoryKey(workspace, conversation))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("memory: read %s of %s: %w", events.BucketHistory, workspace, err)
	}
	if json.Unmarshal(entry.Value(), &turns) != nil {
		return nil, false, nil // unreadable: nothing to carry over
	}
	return turns, true, nil
}
