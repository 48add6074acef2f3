// Reading the workspace's broadcasts into the inbound stream.

package poller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// Broadcasts (2026-08; docs/protocol.md, "Broadcasts"): another workspace
// of the org writes a broadcast_receive row to this workspace's feed.
// The feed's type filter takes one value (activity.go:471-474), so they
// are a second query, with a cursor of their own in the status record.
// They are read when the event stream announces one (BROADCAST_MESSAGE:
// no ACTIVITY_LOGGED announces the row), at a workspace's first cycle,
// and otherwise every BroadcastInterval at most, on the next cycle after
// it: an idle workspace adds one request per interval, not one per poll.

// broadcastType is the activity type of a broadcast received.
const broadcastType = "broadcast_receive"

// DefaultBroadcastInterval is Config.BroadcastInterval's default.
const DefaultBroadcastInterval = 5 * time.Minute

// broadcastEvent is the event the platform sends each recipient.
const broadcastEvent = "BROADCAST_MESSAGE"

// broadcastDue reports whether this cycle reads the broadcasts.
func (p *Poller) broadcastDue(w *workspace, now time.Time) bool {
	if p.cfg.BroadcastInterval < 0 {
		return false
	}
	return w.broadcastAsked.Load() || w.broadcastReadAt.IsZero() || now.Sub(w.broadcastReadAt) >= p.cfg.BroadcastInterval
}

// readBroadcasts delivers the broadcasts after the workspace's broadcast
// cursor, page by page, and records the new cursor with the cycle's
// status changes. Without a cursor (the first read, or the platform no
// longer knows it: 410) it reads the newest page and delivers what is
// newer than BacklogWindow or than this relay's registration, as a cold
// start of the message feed does. The published rows are recognised by
// the inbound stream's de-duplication if a status write is lost.
func (p *Poller) readBroadcasts(ctx context.Context, w *workspace, rec *statusRecord, res *WorkspaceResult, set func(func(*statusRecord))) error {
	w.broadcastAsked.Store(false) // an event from here on asks again
	started := time.Now()
	cursor := rec.BroadcastCursor
	for {
		q := molecule.ActivityQuery{Type: broadcastType, SinceID: cursor, Limit: p.cfg.PageLimit}
		page, err := p.activity(ctx, w, q, res)
		if errors.Is(err, molecule.ErrCursorLost) && cursor != "" {
			w.log.WarnContext(ctx, "poller: the platform no longer knows the broadcast cursor row (410); reading the newest broadcasts", "cursor", cursor)
			cursor = ""
			continue
		}
		if err != nil {
			w.broadcastAsked.Store(true) // not read: the next cycle tries again
			return fmt.Errorf("poller: read broadcasts: %w", err)
		}
		rows := page.Rows
		if cursor == "" {
			rows = p.coldBroadcasts(rows, w, rec, started)
		}
		if err := p.deliver(ctx, w, rows, &cursorValue{}, time.Now().UTC(), res); err != nil {
			w.broadcastAsked.Store(true)
			return err
		}
		newest := page.Newest()
		if newest == nil {
			break
		}
		cold := cursor == ""
		cursor = newest.ID
		if cold || !page.Full {
			break
		}
	}
	if cursor != rec.BroadcastCursor {
		c := cursor
		set(func(r *statusRecord) { r.BroadcastCursor = c })
		rec.BroadcastCursor = c
	}
	if w.broadcastReadAt.IsZero() {
		started = started.Add(-broadcastPhase(w.id, p.cfg.BroadcastInterval))
	}
	w.broadcastReadAt = started
	return nil
}

// broadcastPhase brings a workspace's second read forward by a share of
// the interval of its own (from its id), so a fleet that started together
// spreads its reads over the interval: 10,000 workspaces started at once
// read their broadcasts in the same seconds every 5 minutes, and a CPU
// figure taken over a window with those seconds in it was 13.6 % of a
// core against 9 % without (make bench-fleet, docs/fleet.md). The reads
// stay at most BroadcastInterval apart.
func broadcastPhase(id string, interval time.Duration) time.Duration {
	if interval <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return time.Duration(h.Sum64() % uint64(interval))
}

// coldBroadcasts are the rows of a read without cursor that are ours to
// deliver: created within BacklogWindow, or since this relay registered
// the workspace in poll mode (poller clock against the platform's).
func (p *Poller) coldBroadcasts(rows []molecule.ActivityRow, w *workspace, rec *statusRecord, now time.Time) []molecule.ActivityRow {
	floor := now.Add(-p.cfg.BacklogWindow)
	reg := w.registeredSince()
	if reg.IsZero() && rec.Registered && rec.DeliveryMode == string(molecule.DeliveryPoll) {
		reg = rec.RegisteredAt
	}
	if !reg.IsZero() && reg.Before(floor) {
		floor = reg
	}
	var out []molecule.ActivityRow
	for _, r := range rows {
		if !r.CreatedAt.Before(floor) {
			out = append(out, r)
		}
	}
	return out
}

// The row's summary cuts a message at 120 runes (workspace_broadcast.go:
// 157, 179-185); the event carries it whole. broadcastTexts keeps the
// events' messages a while, so that the row they announce reaches the
// handler with its whole text; a row whose event was missed keeps its
// summary.
const (
	broadcastTextsMax  = 32
	broadcastTextsKeep = 15 * time.Minute
	broadcastCut       = 120
)

// broadcastTexts is a workspace's recent BROADCAST_MESSAGE events.
type broadcastTexts struct {
	mu   sync.Mutex
	list []broadcastText
}

type broadcastText struct {
	senderID, summary, text string
	at                      time.Time
}

// note keeps an event's message under the summary its row carries.
func (b *broadcastTexts) note(data json.RawMessage, now time.Time) {
	var ev struct {
		Message  string `json:"message"`
		SenderID string `json:"sender_id"`
		Sender   string `json:"sender"`
	}
	if json.Unmarshal(data, &ev) != nil || ev.SenderID == "" {
		return
	}
	prefix := "Broadcast from " + ev.Sender + ": "
	t := broadcastText{senderID: ev.SenderID, summary: prefix + cutRunes(ev.Message, broadcastCut), text: prefix + ev.Message, at: now}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.list = append(b.list, t)
	if len(b.list) > broadcastTextsMax {
		b.list = b.list[len(b.list)-broadcastTextsMax:]
	}
}

// whole returns the whole text of a broadcast row from senderID with
// summary, and forgets it, or summary when no event announced it.
func (b *broadcastTexts) whole(senderID, summary string, now time.Time) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	kept := b.list[:0]
	text := summary
	for _, t := range b.list {
		switch {
		case now.Sub(t.at) > broadcastTextsKeep:
		case text == summary && t.senderID == senderID && t.summary == summary:
			text = t.text
		default:
			kept = append(kept, t)
		}
	}
	b.list = kept
	return text
}

// cutRunes is the platform's broadcastTruncate.
func cutRunes(s string, max int) string {
	if r := []rune(s); len(r) > max {
		return string(r[:max]) + "…"
	}
	return s
}
