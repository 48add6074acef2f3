package pollgroup

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/kvlease"
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
	ctx context.Context
	kv  jetstream.KeyValue
	cfg Config
	log *slog.Logger

	// Liveness is counted in this member's own renewals as the watch
	// delivers them, not on a clock: renewals counts them, and lastAt
	// holds, per member, the count when its key last changed. A member
	// whose key missed deadRenewals of ours (2 TTL) is dead. A view that
	// is behind (a slow watch, a loop busy with KV requests) is behind for
	// our renewals too, so it never counts a live member dead.
	renewals uint64
	lastAt   map[string]uint64
	memRevs  map[string]uint64 // member instance → revision of its key
	// probeOn: the subject each member answers liveness probes on, as its
	// key names it (probe.go); probes: what they found.
	probeOn map[string]string
	probes  *prober
	claims  map[string]claim // workspace → its claim, as the watch showed it
	// contested: a claim we tried to write failed on a newer one that the
	// watch has not shown yet; wait for it.
	contested map[string]bool
	// released: the revision of each claim we deleted; the watch may
	// still deliver it, and must not make it ours again.
	released map[string]uint64
	// leaveBy bounds the releases of a leaving member, all together.
	leaveBy time.Time
	polls   map[string]*polling
	failed  map[string]bool // stopped by itself: claimed, not started again
	ended   chan ended
	// toRelease: our claims to delete at the next flushReleases (their
	// polls ended), all in one round of parallel requests.
	toRelease map[string]claim
	// handing: the workspaces being handed to another live member (since
	// when): stopped or released, their new owner's claim not seen yet.
	handing map[string]time.Time

	// The assignment, computed again only when the live members change.
	liveKey   string
	loggedKey string // the members of the last "members changed" line
	mine      map[string]bool
	inSet     map[string]bool // cfg.Workspaces as a set
}

func newMember(ctx context.Context, kv jetstream.KeyValue, cfg Config, probes *prober) *member {
	return &member{ctx: ctx, kv: kv, cfg: cfg, log: cfg.Logger,
		lastAt: map[string]uint64{}, memRevs: map[string]uint64{}, probeOn: map[string]string{}, probes: probes,
		claims: map[string]claim{}, contested: map[string]bool{}, released: map[string]uint64{},
		polls: map[string]*polling{}, failed: map[string]bool{}, toRelease: map[string]claim{}, handing: map[string]time.Time{},
		ended: make(chan ended, len(cfg.Workspaces)+1), inSet: setOf(cfg.Workspaces)}
}

func setOf(ids []string) map[string]bool {
	in := make(map[string]bool, len(ids))
	for _, id := range ids {
		in[id] = true
	}
	return in
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
		m.probes.forget(id)
		if gone {
			delete(m.lastAt, id)
			delete(m.memRevs, id)
			delete(m.probeOn, id)
			return
		}
		if id == m.cfg.Instance {
			m.renewals++
		}
		m.lastAt[id], m.memRevs[id] = m.renewals, e.Revision()
		m.probeOn[id] = kvlease.Probe(e.Value())
	case strings.HasPrefix(rest, "c."):
		ws := rest[2:]
		delete(m.contested, ws)
		if c, ok := m.claims[ws]; (ok && c.rev > e.Revision()) || e.Revision() <= m.released[ws] {
			return // our own later write, or our release, is already recorded
		}
		if gone {
			delete(m.claims, ws)
			return
		}
		owner := string(e.Value())
		m.claims[ws] = claim{owner: owner, rev: e.Revision()}
		if owner != m.cfg.Instance {
			delete(m.handing, ws) // its new owner has it: the window has room
		}
		if p := m.polls[ws]; p != nil && owner != m.cfg.Instance {
			// Another member took it over (it counted us dead): stop at once.
			m.log.Warn("poller group: another member took over a workspace this member polled; stopping it", "workspace", ws, "member", owner)
			p.cancel()
		}
	}
}

// drain applies every change the watch holds already: liveness is
// judged on the newest view, never on one that is behind because this
// loop was busy with KV requests. It reports whether it met the end of
// the initial values.
func (m *member) drain(updates <-chan jetstream.KeyValueEntry) (synced bool) {
	for {
		select {
		case e, ok := <-updates:
			if !ok {
				return synced
			}
			if e == nil {
				synced = true
			} else {
				m.apply(e)
			}
		default:
			return synced
		}
	}
}

// writesPerPass bounds the claims one reconcile writes: a member that
// joins a group of 10,000 workspaces must not leave its loop (the watch)
// unattended for long. Written all at once (claimConcurrency), a pass is
// one round trip; at 64 a pass, a joiner took its 3,333 workspaces in 52
// passes, the last 21 s after its old owner released it (make
// chaos-group, two loaded cores).
const writesPerPass = 256

// reconcile makes what this member polls agree with the assignment. It
// reports whether claims are left to write (call it again soon).
func (m *member) reconcile() (more bool) {
	m.probeSuspects()
	m.assign()
	m.expireHandovers(time.Now())
	var takes []claimWrite
	for _, ws := range m.cfg.Workspaces {
		c, claimed := m.claims[ws]
		ours := claimed && c.owner == m.cfg.Instance
		switch {
		case m.mine[ws] && !ours && m.polls[ws] == nil && !m.contested[ws] && (!claimed || !m.isLive(c.owner)):
			if len(takes) == writesPerPass {
				more = true
				continue
			}
			takes = append(takes, claimWrite{ws: ws, prior: c, claimed: claimed})
		case m.mine[ws] && ours && m.polls[ws] == nil && !m.failed[ws]:
			m.start(ws) // claimed by an earlier membership of this process
		case !m.mine[ws] && m.polls[ws] != nil && !m.polls[ws].leaving:
			m.handOver(ws) // or, with the window full, a later pass
		case !m.mine[ws] && ours && m.polls[ws] == nil:
			m.toRelease[ws] = c // a failed workspace, or one never started
		}
	}
	m.take(takes)
	m.forgetDead()
	m.sweepOrphans()
	return more
}

// handoverWindow bounds the workspaces a member hands to live members at
// once (a member joined): each is stopped and released, and the window
// has room again once the watch shows its new owner's claim; the rest are
// polled by this member meanwhile. Handed all at once, a joiner's 3,333
// workspaces of 10,000 each waited behind all the others for the stop,
// the release, the claim and the first poll: 28 to 37 s unpolled on two
// loaded cores (make chaos-group). Two members handing to one joiner
// keep about as many in flight as the joiner starts at once.
const handoverWindow = 128

// handoverPatience: a workspace handed over whose new owner has not
// claimed it within this long leaves the window (that owner may have
// died; the assignment gives it to another or back).
const handoverPatience = 10 * time.Second

// handOver stops polling ws, which moved to another live member, when the
// window has room; its claim is released once the poll ended (onEnded).
func (m *member) handOver(ws string) {
	if len(m.handing) >= handoverWindow {
		return
	}
	m.handing[ws] = time.Now()
	m.polls[ws].leaving = true
	m.polls[ws].cancel()
}

// expireHandovers frees the window of hand-overs that waited longer than
// handoverPatience, and of workspaces that are this member's again or
// left the set.
func (m *member) expireHandovers(now time.Time) {
	for ws, at := range m.handing {
		if now.Sub(at) > handoverPatience || m.mine[ws] || !m.inSet[ws] {
			delete(m.handing, ws)
		}
	}
}

// sweepOrphans deletes the claims dead members left on workspaces that
// have since left the set (removed from the registry while their owner
// was dying): take only claims workspaces of the set, so without this
// they would stay in the bucket for good. The live member the assignment
// would give such a workspace deletes its claim, by compare-and-delete.
func (m *member) sweepOrphans() {
	var live []string
	writes := 0
	for ws, c := range m.claims {
		if m.inSet[ws] || c.owner == m.cfg.Instance || m.isLive(c.owner) {
			continue
		}
		if live == nil {
			live = m.liveMembers()
		}
		if Owner(ws, live) != m.cfg.Instance || writes == writesPerPass {
			continue
		}
		writes++
		err := m.kv.Delete(m.ctx, claimKey(m.cfg.Group, ws), jetstream.LastRevision(c.rev))
		if err == nil || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			delete(m.claims, ws) // gone, or changed: the watch shows what is there
		}
	}
}

// assign computes which workspaces are this member's, when the live
// members changed.
func (m *member) assign() {
	live := m.liveMembers()
	key := strings.Join(live, ",")
	if key == m.liveKey {
		return
	}
	m.liveKey = key
	m.mine = make(map[string]bool, len(m.cfg.Workspaces)/len(live)+1)
	for _, ws := range m.cfg.Workspaces {
		if Owner(ws, live) == m.cfg.Instance {
			m.mine[ws] = true
		}
	}
	if key == m.loggedKey { // the workspace set changed (setWorkspaces), not the members
		m.log.Debug("poller group: workspace set changed", "assigned", len(m.mine), "of", len(m.cfg.Workspaces))
		return
	}
	m.loggedKey = key
	m.log.Info("poller group: members changed", "members", len(live), "assigned", len(m.mine), "of", len(m.cfg.Workspaces))
}

// deadRenewals: a member is dead once its key missed this many renewals
// of ours, 2 TTL (we renew every TTL/4).
const deadRenewals = 8

func (m *member) isLive(id string) bool {
	at, ok := m.lastAt[id]
	return id == m.cfg.Instance || (ok && m.renewals-at <= deadRenewals && !m.probes.gone(id, at))
}

// probeSuspects asks the members whose keys missed probeAfter of our
// renewals, and name a probe subject, whether they are still there (our
// own key never misses one: it is what counts them).
func (m *member) probeSuspects() {
	for id, at := range m.lastAt {
		missed := m.renewals - at
		if subject := m.probeOn[id]; subject != "" && missed >= probeAfter && missed <= deadRenewals {
			m.probes.ask(m.ctx, id, subject, at)
		}
	}
}

// onProbe takes a probe's answer (serve's loop).
func (m *member) onProbe(r probeResult) {
	if m.probes.record(r) {
		m.log.Info("poller group: a member that missed its renewals no longer answers on NATS; counting it dead", "member", r.member)
	}
}

// liveMembers returns the live members, sorted (a stable key for caching
// the assignment).
func (m *member) liveMembers() []string {
	live := []string{m.cfg.Instance}
	for id := range m.lastAt {
		if id != m.cfg.Instance && m.isLive(id) {
			live = append(live, id)
		}
	}
	sort.Strings(live)
	return live
}

// claimWrite is one claim a reconcile pass writes, and how it went.
type claimWrite struct {
	ws      string
	prior   claim // the dead member's claim replaced, when claimed
	claimed bool
	rev     uint64
	err     error
}

// claimConcurrency bounds the claim writes and deletes in flight at once:
// one after another, a member taking over 1,600 workspaces from a dead
// one, or handing 1,600 to a joiner, waited 1,600 round trips of a loaded
// server (tens of seconds at 10,000 workspaces on two cores). At 64, a
// pass of 256 claims took four rounds of 140 ms, and a survivor's 1,700
// takeovers 3.9 s; a pass is now one round.
const claimConcurrency = writesPerPass

// parallel runs f(0) … f(n-1), at most claimConcurrency at once, and waits.
func parallel(n int, f func(i int)) {
	sem := make(chan struct{}, claimConcurrency)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

// take claims each workspace of writes (a create, or a compare-and-set
// over a dead member's claim), all at once, and starts polling those it
// won. A lost race leaves the workspace to the winner.
func (m *member) take(writes []claimWrite) {
	parallel(len(writes), func(i int) {
		w := &writes[i]
		if w.claimed {
			w.rev, w.err = m.kv.Update(m.ctx, claimKey(m.cfg.Group, w.ws), []byte(m.cfg.Instance), w.prior.rev)
		} else {
			w.rev, w.err = m.kv.Create(m.ctx, claimKey(m.cfg.Group, w.ws), []byte(m.cfg.Instance))
		}
	})
	// One line per dead member and one for the failures, not one per
	// workspace: a takeover at 10,000 workspaces is thousands of claims.
	tookOver := map[string]int{}
	var failed int
	var failure error
	for _, w := range writes {
		switch {
		case errors.Is(w.err, jetstream.ErrKeyExists) || errors.Is(w.err, jetstream.ErrKeyRevisionMismatch):
			m.contested[w.ws] = true
			continue
		case w.err != nil:
			failed, failure = failed+1, w.err
			m.log.Debug("poller group: could not claim a workspace", "workspace", w.ws, "error", w.err)
			continue
		case w.claimed:
			tookOver[w.prior.owner]++
			m.log.Debug("poller group: took over a workspace of a member counted dead", "workspace", w.ws, "member", w.prior.owner)
		}
		m.claims[w.ws] = claim{owner: m.cfg.Instance, rev: w.rev}
		delete(m.failed, w.ws)
		m.start(w.ws)
	}
	for owner, n := range tookOver {
		m.log.Info("poller group: took over the workspaces of a member counted dead", "member", owner, "workspaces", n)
	}
	if failed > 0 && m.ctx.Err() == nil {
		m.log.Warn("poller group: could not claim workspaces; trying again", "workspaces", failed, "error", failure)
	}
}

func (m *member) start(ws string) {
	if m.polls[ws] != nil {
		return // a poll still ending; reconcile starts it again after
	}
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
		m.toRelease[ev.ws] = c
	case ev.err != nil && m.ctx.Err() == nil:
		m.failed[ev.ws] = true
		m.log.Error("poller group: a workspace stopped by itself; this member keeps its claim and does not poll it again", "workspace", ev.ws, "error", ev.err)
	}
}

// flushReleases (serve's loop after each event, and leave) deletes the
// claims of toRelease, in parallel, each with
// its revision: a claim another member took meanwhile stays. One whose
// poll started again meanwhile (the workspace came back) is kept.
func (m *member) flushReleases() {
	if len(m.toRelease) == 0 {
		return
	}
	type del struct {
		ws  string
		c   claim
		err error
	}
	var dels []del
	for ws, c := range m.toRelease {
		if cur, ok := m.claims[ws]; ok && cur == c && m.polls[ws] == nil {
			dels = append(dels, del{ws: ws, c: c})
		}
	}
	clear(m.toRelease)
	deadline := time.Now().Add(5 * time.Second)
	if !m.leaveBy.IsZero() {
		deadline = m.leaveBy
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	parallel(len(dels), func(i int) {
		dels[i].err = m.kv.Delete(ctx, claimKey(m.cfg.Group, dels[i].ws), jetstream.LastRevision(dels[i].c.rev))
	})
	failed := 0
	var first error
	for _, d := range dels {
		if d.err != nil {
			failed, first = failed+1, cmp.Or(first, d.err)
			continue
		}
		delete(m.claims, d.ws)
		delete(m.failed, d.ws)
		m.released[d.ws] = d.c.rev
	}
	if failed > 0 {
		m.log.Warn("poller group: could not release workspaces; their next owners take them when this member's lease expires", "workspaces", failed, "of", len(dels), "error", first)
	}
}

// forgetDead deletes the key of a member dead for twice as long as it
// takes to count it dead, so the bucket does not keep every instance that
// ever crashed.
func (m *member) forgetDead() {
	for id, at := range m.lastAt {
		if id == m.cfg.Instance || m.renewals-at <= 2*deadRenewals {
			continue
		}
		err := m.kv.Delete(m.ctx, memberKey(m.cfg.Group, id), jetstream.LastRevision(m.memRevs[id]))
		if err == nil || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			delete(m.lastAt, id)
			delete(m.memRevs, id)
		}
	}
}

// leave stops every poll, waits for them, and releases their claims.
func (m *member) leave() {
	// NATS may be out of reach (the lease was lost): the releases share
	// one bound rather than each waiting its own.
	m.leaveBy = time.Now().Add(5 * time.Second)
	for _, p := range m.polls {
		p.leaving = true
		p.cancel()
	}
	for len(m.polls) > 0 {
		m.onEnded(<-m.ended)
	}
	for ws, c := range m.claims {
		if c.owner == m.cfg.Instance {
			m.toRelease[ws] = c
		}
	}
	m.flushReleases()
}

// setWorkspaces replaces the set the group divides (Config.Source): the
// assignment is computed again, and a workspace that left the set is
// stopped, its claim released once its poll ended (onEnded).
func (m *member) setWorkspaces(ids []string) {
	in := setOf(ids)
	m.cfg.Workspaces, m.inSet = ids, in
	m.liveKey = "" // assign again
	for ws, p := range m.polls {
		if !in[ws] && !p.leaving {
			p.leaving = true
			p.cancel()
		}
	}
	for ws, c := range m.claims {
		if !in[ws] && c.owner == m.cfg.Instance && m.polls[ws] == nil {
			m.toRelease[ws] = c
		}
	}
}

// drainEnded takes the polls that ended meanwhile, so their claims are
// released in one round.
func (m *member) drainEnded() {
	for {
		select {
		case ev := <-m.ended:
			m.onEnded(ev)
		default:
			return
		}
	}
}
