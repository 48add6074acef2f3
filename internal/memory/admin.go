package memory

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// What an operator does with memory (molecule-relay history): these work
// on the topology's memory stream (and the history bucket of an earlier
// version, where it exists), whether or not this process has memory on.

// Conversations lists the conversations of workspace that hold turns,
// sorted: those of the stream and those the history bucket of an earlier
// version still holds.
func Conversations(ctx context.Context, js jetstream.JetStream, topo *events.Topology, workspace string) ([]string, error) {
	set := map[string]bool{}
	if topo.Memory != nil {
		filter := events.MemoryWorkspaceSubjects(workspace)
		info, err := topo.Memory.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return nil, fmt.Errorf("memory: list %s: %w", filter, err)
		}
		prefix := strings.TrimSuffix(filter, ">")
		for subj, n := range info.State.Subjects {
			conv := strings.TrimPrefix(subj, prefix)
			if n == 1 {
				// Maybe only the marker a forget left.
				if _, ok, err := readStream(ctx, js, topo, workspace, conv); err != nil {
					return nil, err
				} else if !ok {
					continue
				}
			}
			set[conv] = true
		}
	}
	if topo.History != nil {
		prefix := events.HistoryKey(workspace, "")
		lister, err := topo.History.ListKeysFiltered(ctx, prefix+">")
		if err != nil {
			return nil, fmt.Errorf("memory: list %s: %w", prefix+">", err)
		}
		for k := range lister.Keys() {
			set[strings.TrimPrefix(k, prefix)] = true
		}
		// The lister stops its watcher itself once the keys are all read
		// (its Stop would then fail); a listing cut short shows as ctx's end.
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("memory: list %s: %w", prefix+">", err)
		}
	}
	out := make([]string, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out, nil
}

// Read returns every turn the stream holds of a conversation, oldest
// first and each once (or, for a conversation not carried over yet, the
// history bucket's); ok is false when it has none.
func Read(ctx context.Context, js jetstream.JetStream, topo *events.Topology, workspace, conversation string) (turns []handler.Turn, ok bool, err error) {
	if turns, ok, err = readStream(ctx, js, topo, workspace, conversation); err != nil || ok {
		return turns, ok, err
	}
	return readLegacy(ctx, topo.History, workspace, conversation)
}

// readStream is Read of the stream alone.
func readStream(ctx context.Context, js jetstream.JetStream, topo *events.Topology, workspace, conversation string) ([]handler.Turn, bool, error) {
	if topo.Memory == nil {
		return nil, false, nil
	}
	info := topo.Memory.CachedInfo()
	g := newDirectGetter(js.Conn(), info.Config.Name, batchOf(info.Config.MaxMsgsPerSubject))
	defer g.close()
	turns, err := g.turns(ctx, events.MemorySubject(workspace, conversation))
	return turns, len(turns) > 0, err
}

// Forget erases one conversation of workspace, or all of them when
// conversation is "", from the stream (a purge of its subject, then a
// forget marker for the stages that hold it in their read cache) and from
// the history bucket of an earlier version, and returns the conversations
// erased.
func Forget(ctx context.Context, js jetstream.JetStream, topo *events.Topology, workspace, conversation string) ([]string, error) {
	convs := []string{conversation}
	if conversation == "" {
		var err error
		if convs, err = Conversations(ctx, js, topo, workspace); err != nil {
			return nil, err
		}
	} else if _, ok, err := Read(ctx, js, topo, workspace, conversation); err != nil {
		return nil, err
	} else if !ok {
		return nil, nil
	}
	var done []string
	for _, c := range convs {
		if topo.Memory != nil {
			subj := events.MemorySubject(workspace, c)
			if err := topo.Memory.Purge(ctx, jetstream.WithPurgeSubject(subj)); err != nil {
				return done, fmt.Errorf("memory: forget %s of %s: %w", c, workspace, err)
			}
			// Running stages read a conversation from the last message
			// they hold on (readcache.go) and cannot see a purge: the
			// marker tells them to drop what they hold.
			if _, err := js.Publish(ctx, subj, forgetMarker, jetstream.WithExpectStream(topo.Memory.CachedInfo().Config.Name)); err != nil {
				return done, fmt.Errorf("memory: forget %s of %s: %w", c, workspace, err)
			}
		}
		if _, ok, err := readLegacy(ctx, topo.History, workspace, c); err == nil && ok {
			// A purge removes every stored revision, not just the latest.
			if err := topo.History.Purge(ctx, events.HistoryKey(workspace, c)); err != nil {
				return done, fmt.Errorf("memory: forget %s of %s in %s: %w", c, workspace, events.BucketHistory, err)
			}
		}
		done = append(done, c)
	}
	return done, nil
}
