// Checkpoint rows on the feed, which carry the cursor when its bucket is lost.

package poller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// A checkpoint is the relay's cursor written on the workspace's own feed,
// so that a runner with an empty store (an ephemeral CI machine) resumes
// where the last run stopped, with the platform as the only store: a
// self-report (POST /workspaces/:id/activity) of type agent_log, which the
// poller's a2a_receive queries and SSE wake-ups never see as a message.
const (
	checkpointType   = "agent_log"
	checkpointMethod = "molecule-relay/checkpoint"
	checkpointKey    = "molecule_relay_checkpoint"
	// checkpointScan is how many of the newest agent_log rows a restore
	// and a read-back look through for the newest checkpoint.
	checkpointScan = 50
	// checkpointReads bounds the read-back of a checkpoint just written:
	// the platform writes self-reports after answering (fire-and-forget).
	checkpointReads = 3
)

// ErrCheckpointNotConfirmed: a checkpoint was accepted but could not be
// read back from the feed.
var ErrCheckpointNotConfirmed = errors.New("poller: checkpoint written but not visible on the feed")

// Checkpoint is the request_body of a checkpoint row, under
// "molecule_relay_checkpoint".
type Checkpoint struct {
	V int `json:"v"`
	// Cursor is the activity id of the newest row handled ("" for a feed
	// that was empty), CursorCreatedAt its created_at.
	Cursor          string    `json:"cursor"`
	CursorCreatedAt time.Time `json:"cursor_created_at,omitzero"`
	// SavedAt is when the cursor was saved (relay clock): every row
	// created before it, minus the overlap slack, was handled.
	SavedAt time.Time `json:"saved_at"`
	// Instance is the relay instance that wrote it.
	Instance string `json:"instance,omitempty"`
	// Floor, FloorID and Recent are the cursor record's (store.go): a
	// fresh runner's overlap re-read must not publish again what the
	// previous run published (Recent) or left out on purpose (Floor).
	Floor   time.Time        `json:"floor,omitzero"`
	FloorID string           `json:"floor_id,omitempty"`
	Recent  map[string]int64 `json:"recent,omitempty"`
	// DeliveryMode and RegisteredAt are the registration the relay made
	// (the status record's): a fresh runner does not register again, as a
	// registration would un-pause a paused workspace.
	DeliveryMode string    `json:"delivery_mode,omitempty"`
	RegisteredAt time.Time `json:"registered_at,omitzero"`

	// seq is the checkpoint row's seq on the feed (2026-08; 0 before):
	// the poller never acks it (ack.go).
	seq int64
}

// CheckpointSummary is the summary of a checkpoint row: the line a person
// reads in the canvas Activity tab ("all" filter, shown as a LOG row). It
// says who wrote it, what it means and that nothing is to be done.
func CheckpointSummary(cp Checkpoint) string {
	upTo := "an empty feed"
	if !cp.CursorCreatedAt.IsZero() {
		upTo = "every message up to " + cp.CursorCreatedAt.UTC().Format("2006-01-02 15:04:05 UTC")
	}
	return "Molecule Relay bookmark: " + upTo +
		" is answered; the next run starts after it. Not a message, nothing to do."
}

// WriteCheckpoints writes the stored cursor of each workspace in ids as a
// checkpoint row on its feed and reads it back; one request each, paced
// like a fetch, plus the read-back. The caller decides when every message
// up to the cursor was answered (connect --once: at the end of a clean
// run). A workspace without a saved cursor is skipped.
func (p *Poller) WriteCheckpoints(ctx context.Context, ids []string) error {
	var errs []error
	for _, w := range p.ws {
		for _, id := range ids {
			if id == w.id {
				if err := p.writeCheckpoint(ctx, w); err != nil {
					w.log.WarnContext(ctx, "poller: checkpoint not written; a fresh runner would start from the previous one", "error", err)
					errs = append(errs, fmt.Errorf("workspace %s: %w", w.id, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

func (p *Poller) writeCheckpoint(ctx context.Context, w *workspace) error {
	cur, err := p.loadCursor(ctx, w.id)
	if err != nil || cur.UpdatedAt.IsZero() {
		return err
	}
	return p.writeCheckpointOf(ctx, w, cur, w.published.forCheckpoint(cur.Recent, time.Now()))
}

// CheckpointAnswered writes, on the feed of each workspace whose cursor
// moved since this process last wrote one, a checkpoint of the cursor as
// it is now, but only if answered, asked after the cursors were read,
// reports that every message published so far was answered or dead
// lettered (the dispatcher's and the replier's queues are empty): so a
// checkpoint never covers a message in flight. A long-running relay calls
// it every MOLECULE_CHECKPOINT_EVERY, so that one starting on an empty,
// lost or rolled-back store resumes there (issue 37). It returns whether
// the queues were empty.
func (p *Poller) CheckpointAnswered(ctx context.Context, answered func(context.Context) (bool, error)) (bool, error) {
	type snap struct {
		w      *workspace
		cur    *cursorEntry
		recent map[string]int64
		moves  uint64
	}
	var snaps []snap
	for _, w := range p.ws {
		if _, push := p.cfg.Push[w.id]; push {
			continue
		}
		// Each workspace's cursor is read once per process (a cursor an
		// earlier process moved), then only after this one moved it: at
		// 10,000 idle workspaces, reading them all at every tick was 3.6 %
		// of the relay's CPU (docs/fleet.md). Another process that moves
		// it (a poller-group member) writes its own checkpoint.
		moves := w.cursorMoves.Load()
		if w.cpLooked && moves == w.cpMoves {
			continue
		}
		cur, err := p.loadCursor(ctx, w.id)
		if err != nil {
			return false, err
		}
		if cur.UpdatedAt.IsZero() || cur.Cursor == w.cpWritten {
			w.cpLooked, w.cpMoves = true, moves
			continue
		}
		// Read before answered is asked: whatever they name was published
		// before, so an empty queue then means it was answered.
		snaps = append(snaps, snap{w, cur, w.published.forCheckpoint(cur.Recent, time.Now()), moves})
	}
	if len(snaps) == 0 {
		return true, nil
	}
	ok, err := answered(ctx)
	if err != nil || !ok {
		return ok, err
	}
	var errs []error
	for _, sn := range snaps {
		if err := p.writeCheckpointOf(ctx, sn.w, sn.cur, sn.recent); err != nil {
			sn.w.log.WarnContext(ctx, "poller: checkpoint not written; the next try is at the next interval", "error", err)
			errs = append(errs, fmt.Errorf("workspace %s: %w", sn.w.id, err))
			continue
		}
		sn.w.cpWritten = sn.cur.Cursor
		sn.w.cpLooked, sn.w.cpMoves = true, sn.moves
	}
	return true, errors.Join(errs...)
}

// writeCheckpointOf writes cur, with recent (what had been published when
// cur was read, published.forCheckpoint) as its Recent, as a checkpoint on
// w's feed.
func (p *Poller) writeCheckpointOf(ctx context.Context, w *workspace, cur *cursorEntry, recent map[string]int64) error {
	rec, _, err := loadStatus(ctx, p.topo.Status, w.id)
	if err != nil {
		return err
	}
	cp := Checkpoint{V: 1, DeliveryMode: rec.DeliveryMode, RegisteredAt: rec.RegisteredAt, Cursor: cur.Cursor, CursorCreatedAt: cur.CreatedAt, SavedAt: cur.UpdatedAt, Instance: p.cfg.InstanceID,
		Floor: cur.Floor, FloorID: cur.FloorID, Recent: recent}
	body, err := json.Marshal(map[string]Checkpoint{checkpointKey: cp})
	if err != nil {
		return err
	}
	if err := p.pace(ctx, w); err != nil {
		return err
	}
	err = w.c.ReportActivity(ctx, molecule.ActivityReport{ActivityType: checkpointType, Method: checkpointMethod,
		Summary: CheckpointSummary(cp), RequestBody: body, Status: "ok"})
	if err != nil {
		return fmt.Errorf("poller: write checkpoint: %w", err)
	}
	for i := range checkpointReads {
		got, err := p.latestCheckpoint(ctx, w)
		if err != nil {
			return fmt.Errorf("poller: read the checkpoint back: %w", err)
		}
		if got != nil && got.Cursor == cp.Cursor && got.SavedAt.Equal(cp.SavedAt) {
			w.acks.protect(got.seq)
			w.log.InfoContext(ctx, "poller: checkpoint written on the workspace's feed", "cursor", cp.Cursor)
			return nil
		}
		if i+1 < checkpointReads {
			t := time.NewTimer(time.Duration(200<<i) * time.Millisecond)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	}
	return ErrCheckpointNotConfirmed
}

// latestCheckpoint returns the newest checkpoint on w's feed, or nil.
func (p *Poller) latestCheckpoint(ctx context.Context, w *workspace) (*Checkpoint, error) {
	if err := p.pace(ctx, w); err != nil {
		return nil, err
	}
	page, err := w.c.Activity(ctx, molecule.ActivityQuery{Type: checkpointType, Limit: checkpointScan})
	if err != nil {
		return nil, err
	}
	for i := len(page.Rows) - 1; i >= 0; i-- { // rows are oldest first
		if cp := parseCheckpoint(page.Rows[i], w.id); cp != nil {
			return cp, nil
		}
	}
	return nil, nil
}

// parseCheckpoint reads a checkpoint row written by the workspace itself
// (source_id is forced to self, so a row from elsewhere is not ours).
func parseCheckpoint(row molecule.ActivityRow, self string) *Checkpoint {
	var raw struct {
		SourceID    *string                    `json:"source_id"`
		Method      string                     `json:"method"`
		RequestBody map[string]json.RawMessage `json:"request_body"`
	}
	if json.Unmarshal(row.JSON, &raw) != nil || raw.Method != checkpointMethod || raw.SourceID == nil || *raw.SourceID != self {
		return nil
	}
	var cp Checkpoint
	if json.Unmarshal(raw.RequestBody[checkpointKey], &cp) != nil || cp.V != 1 || cp.SavedAt.IsZero() {
		return nil
	}
	cp.seq = row.Seq
	return &cp
}

// restoreCheckpoint turns the newest checkpoint into the cursor of a
// workspace whose store has none (a fresh runner). It returns nil when
// there is no checkpoint.
func (p *Poller) restoreCheckpoint(ctx context.Context, w *workspace, cur *cursorEntry, res *WorkspaceResult) (*cursorEntry, error) {
	cp, err := p.coldCheckpoint(ctx, w)
	if err != nil {
		return nil, fmt.Errorf("poller: read the platform checkpoint: %w", err)
	}
	if cp == nil {
		return nil, nil
	}
	ncur, err := p.resumeAt(ctx, w, cur, cp, res)
	if err != nil {
		return nil, err
	}
	w.log.InfoContext(ctx, "poller: empty store; resuming from the checkpoint on the workspace's feed",
		"cursor", cp.Cursor, "saved_at", cp.SavedAt, "by_instance", cp.Instance)
	return ncur, nil
}

// resumeAt saves cp as w's cursor, replacing cur; its recent ids count as
// published, and the cursor record saved carries them.
func (p *Poller) resumeAt(ctx context.Context, w *workspace, cur *cursorEntry, cp *Checkpoint, res *WorkspaceResult) (*cursorEntry, error) {
	v := cursorValue{Cursor: cp.Cursor, CreatedAt: cp.CursorCreatedAt, UpdatedAt: cp.SavedAt, Generation: res.Generation.String(),
		Floor: cp.Floor, FloorID: cp.FloorID}
	w.published.add(recentRows(cp.Recent), time.Now())
	return p.saveCursor(ctx, w, cur, v)
}

// catchUpWithCheckpoint compares, once per process, the stored cursor with
// the newest checkpoint on w's feed. A cursor behind it is from a store
// that went back in time (a restored copy, a CI cache, a power cut that
// dropped unsynced writes): every row up to the checkpoint was answered,
// so the poller resumes from the checkpoint instead of answering them
// again. A cursor at or past it is kept.
func (p *Poller) catchUpWithCheckpoint(ctx context.Context, w *workspace, cur *cursorEntry, res *WorkspaceResult) (*cursorEntry, error) {
	cp, err := p.coldCheckpoint(ctx, w)
	if err != nil {
		return nil, fmt.Errorf("poller: read the platform checkpoint: %w", err)
	}
	w.caughtUp = true
	if cp == nil || cp.Cursor == "" || cp.Cursor == cur.Cursor || !cp.CursorCreatedAt.After(cur.CreatedAt) {
		return cur, nil
	}
	ncur, err := p.resumeAt(ctx, w, cur, cp, res)
	if err != nil {
		return nil, err
	}
	w.log.WarnContext(ctx, "poller: the store's cursor is behind the checkpoint on the workspace's feed (a restored or rolled-back store); resuming from the checkpoint",
		"store_cursor_at", cur.CreatedAt, "checkpoint_cursor_at", cp.CursorCreatedAt, "by_instance", cp.Instance)
	return ncur, nil
}

// coldCheckpoint is latestCheckpoint read once per process: a cold start
// needs it for the registration and for the seed.
func (p *Poller) coldCheckpoint(ctx context.Context, w *workspace) (*Checkpoint, error) {
	if w.cpRead {
		return w.cp, nil
	}
	cp, err := p.latestCheckpoint(ctx, w)
	if err != nil {
		return nil, err
	}
	w.cp, w.cpRead = cp, true
	if cp != nil {
		w.acks.protect(cp.seq)
	}
	return cp, nil
}

// registeredByCheckpoint reports whether a checkpoint says an earlier run
// registered w in poll mode; it then records that registration, so that a
// fresh runner does not register again (a registration un-pauses a paused
// workspace and marks it online). A failed read answers false: the
// workspace is registered as on any first start.
func (p *Poller) registeredByCheckpoint(ctx context.Context, w *workspace, set func(func(*statusRecord))) bool {
	if !p.cfg.ResumeFromCheckpoint {
		return false
	}
	cp, err := p.coldCheckpoint(ctx, w)
	if err != nil || cp == nil || cp.DeliveryMode != string(molecule.DeliveryPoll) {
		return false
	}
	at := cp.RegisteredAt
	set(func(r *statusRecord) { r.Registered, r.RegisteredAt, r.DeliveryMode = true, at, cp.DeliveryMode })
	w.log.InfoContext(ctx, "poller: an earlier run registered this workspace in poll mode (checkpoint on its feed); not registering again")
	return true
}
