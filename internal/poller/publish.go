// Publishing the feed's rows to the inbound stream (skips, dead letters, acks).

package poller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/dlq"
	"github.com/molecule-ai/molecule-relay/internal/tracing"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Skip reasons: rows that are never published but that the cursor passes.
const (
	// SkipOwnNotify is the agent's own /notify output (method "notify").
	SkipOwnNotify = molecule.SkipOwnNotify
	// SkipUpload is a chat upload manifest (method "chat_upload_receive").
	SkipUpload = molecule.SkipUpload
	// SkipSelf is a message the agent sent itself, when AllowSelf is off.
	SkipSelf = molecule.SkipSelf
	// SkipOtherType is a row whose activity_type is not a2a_receive.
	SkipOtherType = "not_a2a_receive"
	// SkipBeforeSeed is a row that was already in the feed at the cold
	// start and older than BacklogWindow, met again by a window re-read.
	SkipBeforeSeed = "before_seed"
)

// skipReason says why a parsed row is not delivered, or "".
func skipReason(m *molecule.Message, allowSelf bool) string {
	if m.ActivityType != "" && m.ActivityType != activityType && m.Kind != molecule.KindBroadcast {
		return SkipOtherType
	}
	return m.Skip(allowSelf)
}

// deliver publishes rows (oldest first) asynchronously, each with
// Nats-Msg-Id <workspace>:<activity id>, and waits for every ack. Rows
// below the cursor's floor (backlog left undelivered at a cold start) are
// passed. Skipped
// rows are counted; malformed rows go to the dead-letter stream. Any
// failure returns an error, and the caller then does not advance the
// cursor.
func (p *Poller) deliver(ctx context.Context, w *workspace, rows []molecule.ActivityRow, floor *cursorValue, polledAt time.Time, res *WorkspaceResult) (err error) {
	defer func() { w.acks.note(rows, err == nil) }()
	var futures []pendingPublish
	for _, row := range rows {
		pub, err := p.publishRow(ctx, w, row, floor, polledAt, res)
		if err != nil {
			return err
		}
		if pub != nil {
			futures = append(futures, *pub)
		}
	}
	if len(futures) == 0 {
		return nil
	}
	acked, err := p.awaitAcks(ctx, futures, res)
	w.published.add(acked, time.Now())
	return err
}

// pendingPublish is a publish of deliver whose acknowledgement is awaited.
type pendingPublish struct {
	f          jetstream.PubAckFuture
	activity   string
	createdAt  time.Time
	deadLetter bool
}

// publishRow publishes one row asynchronously: its inbound envelope, or a
// dead letter when it does not parse. A row that is skipped (before the
// floor, published already, our own notify, or skipped by kind) is
// counted and publishes nothing (nil).
func (p *Poller) publishRow(ctx context.Context, w *workspace, row molecule.ActivityRow, floor *cursorValue, polledAt time.Time, res *WorkspaceResult) (*pendingPublish, error) {
	if floor.excluded(row.ID, row.CreatedAt) {
		res.Skipped[SkipBeforeSeed]++
		return nil, nil
	}
	if w.published.recognises(row, floor) {
		res.Skipped[SkipPublished]++
		return nil, nil
	}
	if row.Method == "notify" && row.ID != "" {
		// Our own replies (half of a busy feed): skipped without the full
		// parse, as ParseRow would classify them (KindOwnNotify).
		res.Skipped[SkipOwnNotify]++
		p.checkForeignNotify(ctx, w, row)
		return nil, nil
	}
	m, perr := row.Parse(w.id) // reuses the split Activity made
	if perr != nil {
		return p.deadLetterRow(ctx, w, row, perr, res)
	}
	if reason := skipReason(m, p.cfg.AllowSelf); reason != "" {
		res.Skipped[reason]++
		return nil, nil
	}
	if m.ActivityID == "" {
		m.ActivityID = row.ID
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = row.CreatedAt
	}
	if m.Kind == molecule.KindBroadcast {
		m.Text = w.broadcastTexts.whole(m.SourceID, m.Summary, time.Now())
	}
	data, err := events.NewInbound(w.id, m, polledAt).Marshal()
	if err != nil {
		return nil, fmt.Errorf("poller: encode inbound %s: %w", m.ActivityID, err)
	}
	pctx, span := tracing.Start(ctx, "publish", trace.SpanKindProducer, attribute.String("molecule.activity_id", m.ActivityID))
	f, err := p.js.PublishMsgAsync(&nats.Msg{Subject: events.InboundSubject(w.id), Data: data, Header: tracing.Header(pctx)},
		jetstream.WithMsgID(events.InboundMsgID(w.id, m.ActivityID)), jetstream.WithExpectStream(events.StreamInbound))
	span.End()
	if err != nil {
		return nil, fmt.Errorf("poller: publish inbound %s: %w", m.ActivityID, err)
	}
	return &pendingPublish{f: f, activity: m.ActivityID, createdAt: row.CreatedAt}, nil
}

// deadLetterRow publishes the dead letter of a row that does not parse,
// named by its id or, without one, by a hash of its content.
func (p *Poller) deadLetterRow(ctx context.Context, w *workspace, row molecule.ActivityRow, perr error, res *WorkspaceResult) (*pendingPublish, error) {
	res.Malformed++
	id := row.ID
	if id == "" {
		sum := sha256.Sum256(row.JSON)
		id = "sha256-" + hex.EncodeToString(sum[:12])
	}
	w.log.WarnContext(ctx, "poller: malformed activity row; sent to the dead-letter stream and skipped", "activity_id", id, "error", perr)
	dl := events.DeadLetter{
		Stage: events.StagePoller, WorkspaceID: w.id, ActivityID: row.ID, Reason: events.ReasonMalformed,
		Error: perr.Error(), Deliveries: 1, OriginalSubject: events.InboundSubject(w.id),
		Envelope: row.JSON, FailedAt: time.Now().UTC(),
	}
	f, err := dlq.PublishAsync(ctx, p.js, dl, "malformed:"+events.InboundMsgID(w.id, id))
	if err != nil {
		return nil, fmt.Errorf("poller: dead letter of row %s: %w", id, err)
	}
	return &pendingPublish{f: f, activity: id, deadLetter: true}, nil
}

// awaitAcks waits for every publish's acknowledgement (at most
// PublishTimeout in all) and counts the inbound ones as published or
// duplicates; it returns the inbound rows acknowledged, and the first
// failure.
func (p *Poller) awaitAcks(ctx context.Context, futures []pendingPublish, res *WorkspaceResult) (acked []recentID, err error) {
	timer := time.NewTimer(p.cfg.PublishTimeout)
	defer timer.Stop()
	var firstErr error
	for _, pf := range futures {
		select {
		case ack := <-pf.f.Ok():
			switch {
			case pf.deadLetter:
				continue
			case ack.Duplicate:
				res.Duplicates++
			default:
				res.Published++
			}
			acked = append(acked, recentID{pf.activity, pf.createdAt})
		case err := <-pf.f.Err():
			if firstErr == nil {
				firstErr = fmt.Errorf("poller: publish of activity %s not acknowledged: %w", pf.activity, err)
			}
		case <-timer.C:
			return acked, fmt.Errorf("poller: publish acknowledgements not received within %s", p.cfg.PublishTimeout)
		case <-ctx.Done():
			return acked, ctx.Err()
		}
	}
	return acked, firstErr
}
