// Package pollgroup divides a fleet of workspaces among several poller
// processes on one NATS cluster (MOLECULE_POLLER_GROUP): each workspace is
// polled by exactly one live member, a dead member's workspaces move to the
// others within seconds, and a member that joins takes its share without a
// gap or a double poll.
//
// Everything lives in one key-value bucket, events.BucketPollerGroups:
//   - membership: each member holds a kvlease lease on <group>.m.<instance>
//     (renewed every TTL/4). The members watch the group's keys and count a
//     member dead once its key missed 8 of their own renewals in the watch
//     (2 TTL): no clock is compared, so neither skew between machines nor
//     a watch that is behind counts a live member dead. A member whose
//     key missed 3 is probed over core NATS, and counts dead at once
//     when no subscriber is left to answer (a killed process: probe.go);
//   - assignment: rendezvous hashing (Owner) of each workspace over the live
//     members: every member computes it alone;
//   - claims: before it polls a workspace, a member claims it, creating
//     <group>.c.<workspace> (or replacing, by compare-and-set on its
//     revision, the claim of a member that is no longer live). A member
//     whose workspace moved away stops polling it, then deletes its claim
//     with that revision; the new owner, watching, creates its claim at
//     once. So two members never poll one workspace, except when one was
//     cut off from NATS or starved while the others were not: the others
//     count it dead (2 TTL of their renewals) and take its claims; it stops
//     a workspace whose claim it sees taken, and everything once its lease
//     is lost (4 TTL without a renewal, leasePatience). Meanwhile the
//     cursor's compare-and-set and the inbound stream's duplicate window
//     deliver each message once.
//
// A claim is not renewed: it lives as long as its owner's membership. The
// cost is one KV write per member per TTL/4, whatever the fleet's size,
// plus two per workspace that moves; a member writes and deletes claims
// 256 at a time in parallel (claimConcurrency).
package pollgroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/configerr"
	"github.com/molecule-ai/molecule-relay/internal/kvlease"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// ErrInvalidConfig is matched by Run's configuration errors.
var ErrInvalidConfig = configerr.ErrInvalid

// ValidName matches a group name: it is part of KV keys.
var ValidName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Config configures Run.
type Config struct {
	// Group names the group; every member of it must be configured with the
	// same workspaces.
	Group string
	// Instance identifies this member; unique per process.
	Instance string
	// Workspaces are the ids the group divides.
	Workspaces []string
	// Poll polls one workspace until its ctx ends, and returns only after
	// everything it started for it ended. A non-nil error means the
	// workspace cannot be polled any more: its member keeps the claim and
	// does not start it again.
	Poll func(ctx context.Context, workspace string) error
	// TTL of the membership lease. If not set, kvlease.DefaultTTL (2 s):
	// a member that dies is counted dead 2 TTL after its last renewal.
	TTL time.Duration
	// Replicas of the bucket when Run creates it. If not set, 1.
	Replicas int
	Logger   *slog.Logger
	// Source, when set, is the workspace set instead of Workspaces (the
	// workspace registry): at each Changed the member reads Current and
	// recomputes the assignment, starting what became its own and
	// stopping, then releasing, what left the set. If not set, the set is
	// Workspaces for the whole run.
	Source Source
}

// Source is a workspace set that changes while the group runs.
type Source interface {
	// Current returns the ids to poll now.
	Current() []string
	// Changed receives after the set changed.
	Changed() <-chan struct{}
}

func memberKey(group, instance string) string { return group + ".m." + instance }
func claimKey(group, ws string) string        { return group + ".c." + ws }

// ErrMembershipLost: this member could not renew its lease in time and
// stopped polling; Run joins again.
var ErrMembershipLost = errors.New("pollgroup: membership lease lost")

// Run is a member of cfg.Group until ctx ends: it polls the workspaces
// assigned to it, and, when it ends, stops them and releases their claims
// so the others take them over at once. A lost membership (NATS out of
// reach longer than the TTL) stops every workspace; Run then joins again.
// It returns nil when ctx ended.
func Run(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.TTL <= 0 {
		cfg.TTL = kvlease.DefaultTTL
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.Logger = cfg.Logger.With("group", cfg.Group, "instance", cfg.Instance)
	wait := time.Second
	for {
		err := serve(ctx, js, cfg)
		if ctx.Err() != nil {
			return nil
		}
		cfg.Logger.Warn("poller group: not a member now; joining again", "error", err, "wait", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

func (c *Config) validate() error {
	switch {
	case !ValidName.MatchString(c.Group):
		return fmt.Errorf("%w: poller group name %q: use 1 to 64 letters, digits, - or _", ErrInvalidConfig, c.Group)
	case !ValidName.MatchString(c.Instance):
		return fmt.Errorf("%w: poller group instance %q: use 1 to 64 letters, digits, - or _", ErrInvalidConfig, c.Instance)
	case c.Poll == nil:
		return fmt.Errorf("%w: poller group: no Poll function", ErrInvalidConfig)
	}
	return nil
}

// leasePatience (in TTLs) is how long a member's renewals may fail before
// it leaves. Its claims, not its lease, keep a workspace polled by one
// member: the others count it dead by the renewals they see (2 TTL of
// theirs, deadRenewals), take its claims by compare-and-set, and its
// watch shows each takeover, which stops that poll. Leaving at the first
// late renewal instead (a loaded server answering in more than a TTL)
// released and reclaimed thousands of workspaces at once, which loaded
// the server more: at 10,000 workspaces on two cores every member left
// and rejoined three to six times in five minutes (make chaos-group).
const leasePatience = 4

// serve is one membership: join, poll what is ours until ctx ends or the
// lease is lost, then stop everything and release the claims.
func serve(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	kv, err := kvlease.Bucket(ctx, js, events.BucketPollerGroups, cfg.Replicas)
	if err != nil {
		return err
	}
	probeSubject := events.PollGroupMemberSubject(cfg.Group, cfg.Instance)
	stopAnswering, err := answerProbes(ctx, js.Conn(), probeSubject)
	if err != nil {
		probeSubject = ""
		cfg.Logger.Warn("poller group: this member cannot answer liveness probes; if it dies, the others count it dead after 2 TTL rather than about 1. Allow the poller user to publish and subscribe on "+events.SubjectPollGroupPrefix+".> (infra/nats/accounts.conf)", "error", err)
	} else {
		defer stopAnswering() // after the claims and the lease are released
	}
	lease, err := kvlease.Acquire(ctx, js, []string{memberKey(cfg.Group, cfg.Instance)}, kvlease.Config{
		Bucket: events.BucketPollerGroups, Instance: cfg.Instance, TTL: cfg.TTL, Replicas: cfg.Replicas,
		Patience: leasePatience * cfg.TTL, Name: "poller group", Logger: cfg.Logger, Probe: probeSubject,
	})
	if err != nil {
		return err
	}
	defer lease.Release()
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watch, err := kv.Watch(wctx, cfg.Group+".>")
	if err != nil {
		return fmt.Errorf("pollgroup: watch group %s: %w", cfg.Group, err)
	}
	var changed <-chan struct{}
	if cfg.Source != nil {
		cfg.Workspaces, changed = cfg.Source.Current(), cfg.Source.Changed()
	}
	m := newMember(ctx, kv, cfg, newProber(js.Conn()))
	defer m.leave()
	cfg.Logger.Info("poller group: joined", "workspaces", len(cfg.Workspaces))
	tick := time.NewTicker(cfg.TTL / 4)
	defer tick.Stop()
	synced := false          // the watch delivered every key present at the start
	var again chan struct{}  // closed while reconcile has claims left to write
	var due <-chan time.Time // the next pass, deferred to reconcileEvery after the last
	var lastPass time.Time
	for {
		select {
		case <-again:
		case <-due:
			due = nil
		case <-ctx.Done():
			return nil
		case <-lease.Lost():
			return ErrMembershipLost
		case e, ok := <-watch.Updates():
			if !ok {
				return fmt.Errorf("pollgroup: the watch of group %s ended", cfg.Group)
			}
			if e == nil {
				synced = true
			} else {
				m.apply(e)
			}
			synced = m.drain(watch.Updates()) || synced
		case ev := <-m.ended:
			m.onEnded(ev)
			m.drainEnded() // released together (flushReleases)
		case r := <-m.probes.results:
			m.onProbe(r)
		case <-tick.C:
		case <-changed:
			m.setWorkspaces(cfg.Source.Current())
		}
		switch wait := reconcileEvery - time.Since(lastPass); {
		case !synced:
		case wait > 0:
			again = nil // due runs it
			if due == nil {
				due = time.After(wait)
			}
		default:
			again, due, lastPass = nil, nil, time.Now()
			if m.reconcile() {
				again = make(chan struct{})
				close(again)
			}
		}
		m.flushReleases()
	}
}

// reconcileEvery is the shortest time between two reconcile passes. A pass
// goes over every workspace of the set; run at each change the watch
// delivered, a joiner that saw its 3,333 workspaces released one by one
// spent 16 s in passes before it claimed the last (10,000 workspaces, two
// loaded cores). Changes that arrive within it share one pass.
const reconcileEvery = 50 * time.Millisecond

// EnsureBucket creates the groups' bucket as the members do: an admin
// creates it for members that may not (MOLECULE_TOPOLOGY=lookup).
func EnsureBucket(ctx context.Context, js jetstream.JetStream, replicas int) error {
	_, err := kvlease.Bucket(ctx, js, events.BucketPollerGroups, replicas)
	return err
}

// Owners reads which member polls each workspace of group: workspace id →
// member instance (for the status command).
func Owners(ctx context.Context, js jetstream.JetStream, group string) (map[string]string, error) {
	kv, err := js.KeyValue(ctx, events.BucketPollerGroups)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pollgroup: bucket %s: %w", events.BucketPollerGroups, err)
	}
	w, err := kv.Watch(ctx, group+".c.>", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("pollgroup: read group %s: %w", group, err)
	}
	defer func() { _ = w.Stop() }()
	out := map[string]string{}
	prefix := group + ".c."
	for e := range w.Updates() {
		if e == nil {
			break
		}
		out[strings.TrimPrefix(e.Key(), prefix)] = string(e.Value())
	}
	return out, nil
}
