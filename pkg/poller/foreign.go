package poller

import (
	"crypto/sha256"
	"encoding/json"
	"sync"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// NotifyLedger remembers the canvas replies this process posted, so that
// the poller can tell its own notify rows from someone else's. Two relays
// with separate stores on one workspace both answer every message; each
// sees the other's replies on the feed and neither has them in its
// records. It is safe for concurrent use and bounded (the oldest entries
// go first).
type NotifyLedger struct {
	mu    sync.Mutex
	start time.Time
	seen  map[[32]byte]time.Time
	order [][32]byte
}

// notifyLedgerCap bounds a NotifyLedger.
const notifyLedgerCap = 10000

// NewNotifyLedger returns an empty ledger; rows created before now are
// not judged (an earlier run of this relay posted them).
func NewNotifyLedger() *NotifyLedger {
	return &NotifyLedger{start: time.Now(), seen: map[[32]byte]time.Time{}}
}

func ledgerKey(ws, text string) [32]byte { return sha256.Sum256([]byte(ws + "\x00" + text)) }

// Note records a reply about to be posted (replier.Config.BeforeNotify).
func (l *NotifyLedger) Note(ws, text string) {
	k := ledgerKey(ws, text)
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen[k]; !ok {
		l.order = append(l.order, k)
	}
	l.seen[k] = time.Now()
	for len(l.order) > notifyLedgerCap {
		delete(l.seen, l.order[0])
		l.order = l.order[1:]
	}
}

// foreign reports whether a notify row of ws, created at created with
// reply text, was posted after this ledger started but not by us.
func (l *NotifyLedger) foreign(ws, text string, created time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if created.Before(l.start) {
		return false
	}
	_, ok := l.seen[ledgerKey(ws, text)]
	return !ok
}

// checkForeignNotify warns once per workspace when a notify row on its
// feed was not posted by this relay.
func (p *Poller) checkForeignNotify(w *workspace, row molecule.ActivityRow) {
	l := p.cfg.OwnNotify
	if l == nil || w.warnedForeign.Load() {
		return
	}
	var r struct {
		ResponseBody struct {
			Result string `json:"result"`
		} `json:"response_body"`
	}
	if json.Unmarshal(row.JSON, &r) != nil || !l.foreign(w.id, r.ResponseBody.Result, row.CreatedAt) {
		return
	}
	if w.warnedForeign.CompareAndSwap(false, true) {
		w.log.Warn("poller: a reply on this workspace's feed was not posted by this relay; another relay (or agent) is probably answering the same workspace, and every message may be answered twice. Run one relay per workspace, or let the relays share one NATS (NATS_URL)",
			"activity_id", row.ID, "instance", p.cfg.InstanceID)
	}
}
