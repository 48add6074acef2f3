package memory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/handler"
)

// What an operator does with the bucket (molecule-relay history): these
// work on kv directly, whether or not this process has memory on.

// Conversations lists the conversations of workspace that hold turns,
// sorted.
func Conversations(ctx context.Context, kv jetstream.KeyValue, workspace string) ([]string, error) {
	prefix := events.HistoryKey(workspace, "")
	lister, err := kv.ListKeysFiltered(ctx, prefix+">")
	if err != nil {
		return nil, fmt.Errorf("memory: list %s: %w", prefix+">", err)
	}
	var out []string
	for k := range lister.Keys() {
		out = append(out, strings.TrimPrefix(k, prefix))
	}
	// The lister stops its watcher itself once the keys are all read
	// (its Stop would then fail); a listing cut short shows as ctx's end.
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory: list %s: %w", prefix+">", err)
	}
	sort.Strings(out)
	return out, nil
}

// Read returns a conversation's turns; ok is false when it has none.
func Read(ctx context.Context, kv jetstream.KeyValue, workspace, conversation string) (turns []handler.Turn, ok bool, err error) {
	entry, err := kv.Get(ctx, events.HistoryKey(workspace, conversation))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if err := json.Unmarshal(entry.Value(), &turns); err != nil {
		return nil, true, fmt.Errorf("memory: conversation %s of %s is not a list of turns: %w", conversation, workspace, err)
	}
	return turns, true, nil
}

// Forget erases one conversation of workspace, or all of them when
// conversation is "", and returns the conversations erased. A purge
// removes every stored revision, not just the latest.
func Forget(ctx context.Context, kv jetstream.KeyValue, workspace, conversation string) ([]string, error) {
	convs := []string{conversation}
	if conversation == "" {
		var err error
		if convs, err = Conversations(ctx, kv, workspace); err != nil {
			return nil, err
		}
	} else if _, err := kv.Get(ctx, events.HistoryKey(workspace, conversation)); errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var done []string
	for _, c := range convs {
		if err := kv.Purge(ctx, events.HistoryKey(workspace, c)); err != nil {
			return done, fmt.Errorf("memory: forget %s of %s: %w", c, workspace, err)
		}
		done = append(done, c)
	}
	return done, nil
}
