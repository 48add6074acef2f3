package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// peerClaim is the value of an events.PeerMessageKey: which activity row
// first carried the sender's messageId.
type peerClaim struct {
	ActivityID string    `json:"activity_id"`
	ClaimedAt  time.Time `json:"claimed_at"`
}

// claimPeerMessage de-duplicates an inbound peer message on the sender's
// A2A messageId before its handler runs. A sending relay (or any sender)
// that died after the platform accepted its POST and before it recorded
// that posts again with the same messageId, and the platform's poll queue
// writes a second row for it: different activity id, same message. The
// first row to claim the messageId owns it; its own redeliveries (and a
// dead-letter replay, which keeps the activity id) go on; any other row is
// a duplicate. The claim lives in the handled bucket (events.RecordTTL,
// file storage), so it outlasts the inbound stream's duplicate window and
// a NATS restart.
//
// It returns dup=true when the message is a duplicate, and an error when
// the claim could not be read or written (retry later).
func (d *Dispatcher) claimPeerMessage(runCtx context.Context, in *events.Inbound) (dup bool, holder string, err error) {
	if in.Source != events.SourcePeerAgent || in.MessageID == "" {
		return false, "", nil
	}
	key := events.PeerMessageKey(in.WorkspaceID, in.SourceWorkspaceID, in.MessageID)
	data, err := json.Marshal(peerClaim{ActivityID: in.ActivityID, ClaimedAt: time.Now().UTC()})
	if err != nil {
		return false, "", err
	}
	ctx, cancel := d.run.OpContext(runCtx)
	defer cancel()
	claimed := false
	err = stage.RetryRequest(ctx, func(ctx context.Context) error {
		_, err := d.topo.Handled.Create(ctx, key, data)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil
		}
		claimed = err == nil
		return err
	})
	if err != nil {
		return false, "", fmt.Errorf("dispatcher: claim peer messageId: %w", err)
	}
	if claimed {
		return false, "", nil // this write made the claim: nothing to read
	}
	// Claimed before: by another row, by an earlier delivery of this one,
	// or by a retried write of ours whose first answer was lost.
	entry, err := stage.RetryGet(ctx, d.topo.Handled, key)
	if err != nil {
		return false, "", fmt.Errorf("dispatcher: read peer messageId claim: %w", err)
	}
	var c peerClaim
	if err := json.Unmarshal(entry.Value(), &c); err != nil || c.ActivityID == "" {
		// Unreadable: let the message through rather than drop it.
		return false, "", nil
	}
	return c.ActivityID != in.ActivityID, c.ActivityID, nil
}

// peerClaimed acks a peer message whose messageId another activity row
// already carried; its handler does not run and nothing is replied.
func (d *Dispatcher) peerClaimed(next stage.Step[*message]) stage.Step[*message] {
	return func(runCtx context.Context, m *message) stage.Outcome {
		dup, holder, err := d.claimPeerMessage(runCtx, m.in)
		switch {
		case err != nil:
			m.Log.WarnContext(runCtx, "dispatcher: peer messageId claim failed; retrying later", "error", err)
			return stage.Retry(0)
		case dup:
			d.stats.peerDuplicates.Add(1)
			m.Log.InfoContext(runCtx, "dispatcher: peer message already received in another activity row; handler not run",
				"sender", m.in.SourceWorkspaceID, "first_activity", holder)
			return stage.Ack(ackLost)
		}
		return next(runCtx, m)
	}
}
