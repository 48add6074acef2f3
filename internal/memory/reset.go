package memory

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// ResetCanvas starts the canvas conversations of workspace afresh (the
// platform's "New session", docs/memory.md "A new session"): each one
// ("canvas" and every "canvas-ctx-<id>") gets a forget marker, so no read
// serves a turn from before it, while the turns stay in the stream until
// its limits drop them, as the platform keeps its rows. A conversation
// held only by the history bucket of an earlier version is deleted there
// (a bucket takes no marker; Load would carry it over). Peer and self
// conversations are not touched. It returns the conversations reset.
func ResetCanvas(ctx context.Context, js jetstream.JetStream, topo *events.Topology, workspace string) ([]string, error) {
	convs, err := Conversations(ctx, js, topo, workspace)
	if err != nil {
		return nil, err
	}
	var done []string
	for _, c := range convs {
		if c != events.ConversationCanvas && !strings.HasPrefix(c, events.ConversationCanvas+"-") {
			continue
		}
		if topo.Memory != nil {
			subj := events.MemorySubject(workspace, c)
			if _, err := js.Publish(ctx, subj, forgetMarker, jetstream.WithExpectStream(topo.Memory.CachedInfo().Config.Name)); err != nil {
				return done, fmt.Errorf("memory: reset %s of %s: %w", c, workspace, err)
			}
		}
		if _, ok, err := readLegacy(ctx, topo.History, workspace, c); err == nil && ok {
			if err := topo.History.Purge(ctx, events.HistoryKey(workspace, c)); err != nil {
				return done, fmt.Errorf("memory: reset %s of %s in %s: %w", c, workspace, events.BucketHistory, err)
			}
		}
		done = append(done, c)
	}
	return done, nil
}
