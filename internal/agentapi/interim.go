package agentapi

// Interim messages, effectively once (docs/agentapi.md "Interim
// messages"): the n-th interim of an inbound message has a stable id,
// InterimID(activity, n). A peer interim is sent with that id as its
// messageId, so a re-run of the handler after a redelivery sends the same
// message again and the platform's push queue and a receiving Molecule
// Relay (internal/dispatcher/peerdedupe.go) de-duplicate it. A canvas interim (notify has no idempotency key) is
// recorded in the handled bucket before it is posted and skipped by a
// re-run that finds the record: a crash between the record and the post
// loses that interim rather than posting it twice.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/stage"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// interimA2ATimeout is the X-Timeout of a peer interim: a push-mode peer
// that takes longer gets it from the platform's queue (202, a success)
// instead of holding the handler.
const interimA2ATimeout = 5 * time.Second

// InterimID is the stable id of the n-th (1-based) interim message sent
// while handling activityID.
func InterimID(activityID string, n int64) string {
	return events.NameUUID(fmt.Sprintf("molecule-relay/interim/%s/%d", activityID, n))
}

// InterimResult says what became of one interim message.
type InterimResult struct {
	// ID is InterimID of the message.
	ID string `json:"id"`
	// N is its 1-based number within the handler run.
	N int64 `json:"n"`
	// Duplicate is true when an earlier run of the handler already
	// recorded this canvas interim: nothing was posted now.
	Duplicate bool `json:"duplicate"`
}

// interimRecord is the value of an InterimKey.
type interimRecord struct {
	N  int64     `json:"n"`
	At time.Time `json:"at"`
}

// Interim posts an interim message to the conversation now.
func (s *Session) Interim(ctx context.Context, m handler.Interim) error {
	_, err := s.interim(ctx, m)
	return err
}

func (s *Session) interim(ctx context.Context, m handler.Interim) (InterimResult, error) {
	ctx, cancel, err := s.scoped(ctx)
	if err != nil {
		return InterimResult{}, err
	}
	defer cancel()
	peer := s.in.Source == events.SourcePeerAgent
	if err := checkInterim(m, peer); err != nil {
		return InterimResult{}, err
	}
	if g := s.srv.cfg.LoopGuard; peer && g != nil {
		if why := g(&s.in); why != "" {
			return InterimResult{}, fmt.Errorf("%w (%s)", ErrLoopGuard, why)
		}
	}
	c, err := s.client()
	if err != nil {
		return InterimResult{}, err
	}
	s.postMu.Lock() // numbered and posted in call order
	defer s.postMu.Unlock()
	if err := s.takeBudget(ctx, c); err != nil {
		return InterimResult{}, err // not numbered: nothing was tried
	}
	n := s.interims.Add(1)
	res := InterimResult{ID: InterimID(s.in.ActivityID, n), N: n}
	if peer {
		return res, s.sendPeer(ctx, c, res.ID, m)
	}
	if res.Duplicate, err = s.record(ctx, res); err != nil || res.Duplicate {
		return res, err
	}
	if f := s.srv.cfg.BeforeNotify; f != nil {
		f(s.in.WorkspaceID, m.Text)
	}
	_, err = c.Notify(ctx, m.Text, events.MoleculeAttachments(m.Attachments))
	return res, err
}

func checkInterim(m handler.Interim, peer bool) error {
	if m.Text == "" && (!peer || len(m.Attachments) == 0) {
		return fmt.Errorf("%w: an interim message needs \"text\" (a peer's may carry attachments alone)", ErrBadRequest)
	}
	for i, a := range m.Attachments {
		if a.URI == "" || a.Name == "" {
			return fmt.Errorf("%w: attachments[%d] needs a uri and a name", ErrBadRequest, i)
		}
	}
	return nil
}

// sendPeer sends the interim to the peer that sent the message, as an
// answer the peer's loop guard does not answer (metadata.in_reply_to).
// No in_reply_to_message_id: an asking relay must not take it for the
// final answer.
func (s *Session) sendPeer(ctx context.Context, c *molecule.Client, id string, m handler.Interim) error {
	_, err := c.SendA2A(ctx, molecule.A2AMessage{
		To:          s.in.SourceWorkspaceID,
		Text:        m.Text,
		MessageID:   id,
		InReplyTo:   s.in.ActivityID,
		ContextID:   s.in.ContextID,
		TaskID:      s.in.TaskID,
		Metadata:    map[string]any{"relay_hops": s.in.Hops + 1, "relay_interim": true},
		Attachments: events.MoleculeAttachments(m.Attachments),
		Timeout:     interimA2ATimeout,
	})
	return err
}

// record creates the interim's record; duplicate says an earlier run of
// the handler created it.
func (s *Session) record(ctx context.Context, res InterimResult) (duplicate bool, err error) {
	kv := s.srv.cfg.Records
	if kv == nil {
		return false, ErrNoRecords
	}
	data, err := json.Marshal(interimRecord{N: res.N, At: time.Now().UTC()})
	if err != nil {
		return false, err
	}
	key := events.InterimKey(s.in.WorkspaceID, res.ID)
	_, err = stage.RetryCreate(ctx, kv, key, data)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return true, nil
	}
	return false, err
}

// takeBudget spends one request of the workspace's rate budget, waiting
// for the window to reset when it is at the reserve, unless the reset
// comes after the handler's deadline.
func (s *Session) takeBudget(ctx context.Context, c *molecule.Client) error {
	for {
		d := c.TakeBudget(s.srv.cfg.RateReserve)
		if d <= 0 {
			return nil
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
			return &budgetError{wait: d}
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}
