// Notify rows not written by this relay (another relay answers the workspace).

package poller

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// NotifyLedger remembers how many canvas replies of each text this
// process posted, so that the poller can tell a notify row on the feed
// that is not ours. Two relays with separate stores on one workspace both
// answer every message; each sees the other's replies on the feed and
// neither has them in its records. The platform's notify row carries
// nothing but the text (extra keys of the POST are dropped, PROTOCOL
// §5/§12), so a twin with an identical handler posts rows identical to
// ours: the ledger counts, and a text seen on the feed more often than we
// posted it is someone else's. It is safe for concurrent use and bounded
// (the oldest entries go first).
type NotifyLedger struct {
	mu     sync.Mutex
	start  time.Time
	posted map[[32]byte]int // our posts per workspace and text
	onFeed map[[32]byte]int // distinct notify rows seen per workspace and text
	rows   map[string]bool  // notify rows already counted (overlap re-reads)
	order  [][32]byte
	rowIDs []string
}

// notifyLedgerCap bounds a NotifyLedger's texts and its counted rows.
const notifyLedgerCap = 10000

// NewNotifyLedger returns an empty ledger; rows created before now are
// not judged (an earlier run of this relay posted them).
func NewNotifyLedger() *NotifyLedger {
	return &NotifyLedger{start: time.Now(), posted: map[[32]byte]int{}, onFeed: map[[32]byte]int{}, rows: map[string]bool{}}
}

func ledgerKey(ws, text string) [32]byte { return sha256.Sum256([]byte(ws + "\x00" + text)) }

// Note records a reply about to be posted (replier.Config.BeforeNotify).
// A retried post is noted again: counting it twice only makes a foreign
// row harder to see, never invents one.
func (l *NotifyLedger) Note(ws, text string) {
	k := ledgerKey(ws, text)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.posted[k]; !ok {
		l.order = append(l.order, k)
	}
	l.posted[k]++
	for len(l.order) > notifyLedgerCap {
		delete(l.posted, l.order[0])
		delete(l.onFeed, l.order[0])
		l.order = l.order[1:]
	}
}

// foreign counts the notify row id of ws, created at created with reply
// text, and reports whether the feed now holds more rows with that text,
// posted after this ledger started, than this process posted.
func (l *NotifyLedger) foreign(ws, id, text string, created time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if created.Before(l.start) || l.rows[id] {
		return false
	}
	l.rows[id] = true
	l.rowIDs = append(l.rowIDs, id)
	for len(l.rowIDs) > notifyLedgerCap {
		delete(l.rows, l.rowIDs[0])
		l.rowIDs = l.rowIDs[1:]
	}
	k := ledgerKey(ws, text)
	l.onFeed[k]++
	return l.onFeed[k] > l.posted[k]
}

// checkForeignNotify warns once per workspace when a notify row on its
// feed was not posted by this relay: a second relay answers the workspace,
// or, when Config.OtherPoller finds one, another process on this NATS
// polls it too.
func (p *Poller) checkForeignNotify(ctx context.Context, w *workspace, row molecule.ActivityRow) {
	l := p.cfg.OwnNotify
	if l == nil || w.warnedForeign.Load() {
		return
	}
	var r struct {
		ResponseBody struct {
			Result string `json:"result"`
		} `json:"response_body"`
	}
	if json.Unmarshal(row.JSON, &r) != nil || !l.foreign(w.id, row.ID, r.ResponseBody.Result, row.CreatedAt) {
		return
	}
	if p.cfg.OtherPoller != nil {
		if other, ok := p.cfg.OtherPoller(ctx, w.id); ok {
			if w.warnedShared.CompareAndSwap(false, true) {
				w.log.WarnContext(ctx, "poller: another relay process on this NATS polls this workspace too, without MOLECULE_POLLER_GROUP: "+
					"each message is still answered once (the processes share the streams and consumers), but the workspace is polled twice, "+
					"at twice the platform requests. Give the processes one MOLECULE_POLLER_GROUP so that one of them polls it",
					"activity_id", row.ID, "instance", p.cfg.InstanceID, "other_instance", other)
			}
			return
		}
	}
	if w.warnedForeign.CompareAndSwap(false, true) {
		action := "Run one relay per workspace, or run the relays on one NATS (NATS_URL) with one MOLECULE_POLLER_GROUP; MOLECULE_SINGLETON=refuse stops a relay that sees this"
		if p.cfg.RefuseSecondRelay {
			action = "MOLECULE_SINGLETON=refuse: this relay stops polling the workspace; run one relay per workspace, or run the relays on one NATS (NATS_URL) with one MOLECULE_POLLER_GROUP"
		}
		// The platform's notify row names no sender, so the other relay
		// cannot be named; its heartbeats carry its own instance id.
		w.log.WarnContext(ctx, "poller: a reply on this workspace's feed was not posted by this relay; "+
			"another relay with its own store (or an agent) is probably answering the same workspace, and every message may be answered twice. "+action,
			"activity_id", row.ID, "instance", p.cfg.InstanceID)
	}
}
