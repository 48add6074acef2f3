package delegate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// maxCAS bounds the compare-and-set retries on one ask record: only the
// asker and the dispatcher's router write it, so a conflict is rare.
const maxCAS = 5

// open returns the question's record, creating it (pending) when it does
// not exist. A record of an earlier run is reused: answered, it is the
// answer; abandoned (that run timed out), it is pending again with this
// run's deadline. A record of another peer is ErrMismatch.
func (a *Asker) open(ctx context.Context, key, id string, s Scope, q handler.Question, deadline time.Time) (*events.AskRecord, error) {
	for range maxCAS {
		rec, rev, err := loadRecord(ctx, a.cfg.Asks, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			now := time.Now().UTC()
			rec = &events.AskRecord{State: events.AskPending, Workspace: s.Workspace, Peer: q.PeerID,
				Activity: s.Activity, MessageID: id, Deadline: deadline, CreatedAt: now}
			err = writeRecord(ctx, a.cfg.Asks, key, rec, 0)
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue
			}
			return rec, err
		case err != nil:
			return nil, err
		case rec.Peer != q.PeerID:
			return nil, fmt.Errorf("%w: question %d was asked of %s, now of %s", ErrMismatch, s.N, rec.Peer, q.PeerID)
		case rec.State == events.AskAnswered:
			return rec, nil
		}
		rec.State, rec.Deadline = events.AskPending, deadline
		if err = writeRecord(ctx, a.cfg.Asks, key, rec, rev); err == nil {
			return rec, nil
		} else if !isConflict(err) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("delegate: ask record %s kept changing", key)
}

// loadRecord reads an ask record and its revision.
func loadRecord(ctx context.Context, kv jetstream.KeyValue, key string) (*events.AskRecord, uint64, error) {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	var rec events.AskRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return nil, 0, fmt.Errorf("delegate: ask record %s unreadable: %w", key, err)
	}
	return &rec, e.Revision(), nil
}

// writeRecord creates the record (rev 0) or updates it at rev.
func writeRecord(ctx context.Context, kv jetstream.KeyValue, key string, rec *events.AskRecord, rev uint64) error {
	return writeJSON(ctx, kv, key, rec, rev)
}

// update applies change to the record until a compare-and-set holds;
// change returns false to leave the record as it is.
func update(ctx context.Context, kv jetstream.KeyValue, key string, change func(*events.AskRecord) bool) (*events.AskRecord, error) {
	for range maxCAS {
		rec, rev, err := loadRecord(ctx, kv, key)
		if err != nil {
			return nil, err
		}
		if !change(rec) {
			return rec, nil
		}
		if err = writeRecord(ctx, kv, key, rec, rev); err == nil {
			return rec, nil
		} else if !isConflict(err) {
			return nil, err
		}
	}
	return nil, fmt.Errorf("delegate: ask record %s kept changing", key)
}

// isConflict: another writer updated the record first.
func isConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}
