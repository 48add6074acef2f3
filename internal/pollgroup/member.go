package pollgroup

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// claim is what the watch last showed of a workspace's claim.
type claim struct {
	owner string
	rev   uint64
}

// polling is a workspace this member polls.
type polling struct {
	cancel context.CancelFunc
	// leaving: stopped because the workspace moved to another member;
	// its claim is released when the poll has ended.
	leaving bool
}

type ended struct {
	ws  string
	err error
}

// member is one membership's state. Only serve's goroutine touches it,
// but for the poll goroutines, which report on ended.
type member struct {
	ctx       context.Context
	kv        jetstream.KeyValue
	cfg       Config
	log       *slog.Logger
	deadAfter time.Duration

	seen    map[string]time.Time // member instance → when its key last changed, on our clock
	memRevs map[string]uint64    // member instance → revision of its key
	claims  map[string]claim     // workspace → its claim
	polls   map[string]*polling
	failed  map[string]bool // stopped by itself: claimed, not started again
	ended   chan ended

	// The assignment, computed again only when the live members change.
	liveKey string
	live    int
	mine    map[string]bool
}

func newMember(ctx context.Context, kv jetstream.KeyValue, cfg Config) *member {
	return &member{ctx: ctx, kv: kv, cfg: cfg, log: cfg.Logger, deadAfter: 2 * cfg.TTL,
		seen: map[string]time.Time{}, memRevs: map[string]uint64{}, claims: map[string]claim{},
		polls: map[string]*polling{}, failed: map[string]bool{}, ended: make(chan ended, len(cfg.Workspaces)+1)}
}

// apply records a change the watch delivered.
func (m *member) apply(e jetstream.KeyValueEntry) {
	rest, ok := strings.CutPrefix(e.Key(), m.cfg.Group+".")
	if !ok {
		return
	}
	gone := e.Operation() != jetstream.KeyValuePut
	switch {
	case strings.HasPrefix(rest, "m."):
		id := rest[2:]
		if gone {
			delete(m.seen, id)
			delete(m.memRevs, id)
			return
		}
		m.seen[id], m.memRevs[id] = time.Now(), e.Revision()
	case strings.HasPrefix(rest, "c."):
		ws := rest[2:]
		if c, ok := m.claims[ws]; ok && c.rev > e.Revision() {
			return // our own later write is already recorded
		}
		if gone {
			delete(m.claims, ws)
			return
		}
		owner := string(e.Value())
		m.claims[ws] = claim{owner: owner, rev: e.Revision()}
		if p := m.polls[ws]; p != nil && owner != m.cfg.Instance {
			// Another member took it over (it counted us dead): stop at once.
			m.log.Warn("poller group: another member took over a workspace this member polled; stopping it", "workspace", ws, "member", owner)
			p.cancel()
		}
	}
}

// reconcile makes what this member polls agree with the assignment.
func (m *member) reconcile(now time.Time) {
	m.assign(now)
	for _, ws := range m.cfg.Workspaces {
		c, claimed := m.claims[ws]
		ours := claimed && c.owner == m.cfg.Instance
		switch {
		case m.mine[ws] && !ours && (!claimed || !m.isLive(c.owner, now)):
			m.take(ws, c, claimed)
		case m.mine[ws] && ours && m.polls[ws] == nil && !m.failed[ws]:
			m.start(ws) // claimed by an earlier membership of this process
		case !m.mine[ws] && m.polls[ws] != nil && !m.polls[ws].leaving:
			m.polls[ws].leaving = true
			m.polls[ws].cancel()
		case !m.mine[ws] && ours && m.polls[ws] == nil:
			m.release(ws, c) // a failed workspace, or one never started
		}
	}
	m.forgetDead(now)
}

// assign computes which workspaces are this member's, when the live
// members changed.
func (m *member) assign(now time.Time) {
	live := sortedLive(m.seen, m.cfg.Instance, now, m.deadAfter)
	key := strings.Join(live, ",")
	if key == m.liveKey {
		return
	}
	m.liveKey, m.live = key, len(live)
	m.mine = make(map[string]bool, len(m.cfg.Workspaces)/len(live)+1)
	for _, ws := range m.cfg.Workspaces {
		if Owner(ws, live) == m.cfg.Instance {
			m.mine[ws] = true
		}
	}
	m.log.Info("poller group: members changed", "members", len(live), "assigned", len(m.mine), "of", len(m.cfg.Workspaces))
}

func (m *member) isLive(id string, now time.Time) bool {
	if id == m.cfg.Instance {
		return true
	}
	t, ok := m.seen[id]
	return ok && now.Sub(t) < m.deadAfter
}

// take claims ws (create, or compare-and-set over a dead member's claim)
// and starts polling it. A lost race leaves it to the winner.
func (m *member) take(ws string, c claim, claimed bool) {
	var (
		rev uint64
		err error
	)
	if claimed {
		rev, err = m.kv.Update(m.ctx, claimKey(m.cfg.Group, ws), []byte(m.cfg.Instance), c.rev)
	} else {
		rev, err = m.kv.Create(m.ctx, claimKey(m.cfg.Group, ws), []byte(m.cfg.Instance))
	}
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			m.refresh(ws)
			return
		}
		if m.ctx.Err() == nil {
			m.log.Warn("poller group: could not claim a workspace; trying again", "workspace", ws, "error", err)
		}
		return
	}
	if claimed {
		m.log.Info("poller group: took over the workspace of a member counted dead", "workspace", ws, "member", c.owner)
	}
	m.claims[ws] = claim{owner: m.cfg.Instance, rev: rev}
	delete(m.failed, ws)
	m.start(ws)
}

// refresh reads a claim another member wrote before the watch shows it.
func (m *member) refresh(ws string) {
	e, err := m.kv.Get(m.ctx, claimKey(m.cfg.Group, ws))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		delete(m.claims, ws)
	case err == nil:
		m.claims[ws] = claim{owner: string(e.Value()), rev: e.Revision()}
	}
}

func (m *member) start(ws string) {
	ctx, cancel := context.WithCancel(m.ctx)
	m.polls[ws] = &polling{cancel: cancel}
	m.log.Debug("poller group: polling a workspace", "workspace", ws)
	go func() {
		err := m.cfg.Poll(ctx, ws)
		cancel()
		m.ended <- ended{ws: ws, err: err}
	}()
}

// onEnded: a poll ended. One that moved away releases its claim now that
// nothing of it runs; one that stopped by itself keeps it.
func (m *member) onEnded(ev ended) {
	p := m.polls[ev.ws]
	delete(m.polls, ev.ws)
	c, ok := m.claims[ev.ws]
	switch {
	case p != nil && p.leaving && ok && c.owner == m.cfg.Instance:
		m.release(ev.ws, c)
	case ev.err != nil && m.ctx.Err() == nil:
		m.failed[ev.ws] = true
		m.log.Error("poller group: a workspace stopped by itself; this member keeps its claim and does not poll it again", "workspace", ev.ws, "error", ev.err)
	}
}

// release deletes our claim, with its revision: a claim another member
// took meanwhile stays.
func (m *member) release(ws string, c claim) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := m.kv.Delete(ctx, claimKey(m.cfg.Group, ws), jetstream.LastRevision(c.rev)); err != nil {
		m.log.Warn("poller group: could not release a workspace; the next owner takes it when this member's lease expires", "workspace", ws, "error", err)
		return
	}
	delete(m.claims, ws)
	delete(m.failed, ws)
}

// forgetDead deletes the key of a member dead for two DeadAfter, so the
// bucket does not keep every instance that ever crashed.
func (m *member) forgetDead(now time.Time) {
	for id, t := range m.seen {
		if id == m.cfg.Instance || now.Sub(t) < 2*m.deadAfter {
			continue
		}
		err := m.kv.Delete(m.ctx, memberKey(m.cfg.Group, id), jetstream.LastRevision(m.memRevs[id]))
		if err == nil || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			delete(m.seen, id)
			delete(m.memRevs, id)
		}
	}
}

// leave stops every poll, waits for them, and releases their claims.
func (m *member) leave() {
	for _, p := range m.polls {
		p.leaving = true
		p.cancel()
	}
	for len(m.polls) > 0 {
		m.onEnded(<-m.ended)
	}
	for ws, c := range m.claims {
		if c.owner == m.cfg.Instance {
			m.release(ws, c)
		}
	}
}
