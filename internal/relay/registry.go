package relay

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/poller"
	"github.com/molecule-ai/molecule-relay/internal/registry"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// regState is the workspace registry as a running relay follows it
// (MOLECULE_WORKSPACE_REGISTRY): the clients built from its entries, one
// per workspace and platform.
type regState struct {
	reg         *registry.Registry
	cfg         *config.Config
	hc, streams *http.Client // set once, under mu, after the watch started
	rt          *Runtime
	stopWatch   context.CancelFunc

	mu      sync.Mutex
	clients map[string]regClient
	budgets budgetsByBucket
}

type regClient struct {
	c     *molecule.Client
	entry registry.Entry
	// replaced is closed when a new platform URL or org id gave the
	// workspace another client (pollReplacing).
	replaced chan struct{}
}

// openRegistry opens the registry, seeds it with the static workspace
// settings, reads it and follows it until Close; rt.Clients becomes its
// workspaces that are not paused. Only the poller and the replier read it
// (the dispatcher's NATS user may not).
func (rt *Runtime) openRegistry(ctx context.Context) error {
	key, err := registry.KeyFromConfig(ctx, rt.Cfg)
	if errors.Is(err, registry.ErrKeyUnavailable) {
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %w", config.ErrInvalid, err)
	}
	reg, err := registry.Open(ctx, rt.Conn.JS, key, rt.Cfg.Topology == "ensure", rt.Cfg.Replicas)
	if err != nil {
		return err
	}
	if seed := registry.FromConfig(rt.Cfg); len(seed) > 0 {
		n, err := reg.Seed(ctx, seed)
		if err != nil {
			return err
		}
		rt.Log.Info("workspace registry: seeded from the settings", "added", n, "configured", len(seed))
	}
	rs := &regState{reg: reg, cfg: rt.Cfg, rt: rt, clients: map[string]regClient{}, budgets: budgetsByBucket{}}
	wctx, stop := context.WithCancel(context.Background()) // the watch lives as long as the runtime
	// A changed entry reaches its client at once, whoever holds it.
	onChange := func(c registry.Change) {
		if !c.Removed {
			rs.clientOf(c.Entry.ID, false)
		}
	}
	// A rotated key is followed: entries sealed with a key not read yet
	// open once the key source gives it (docs/workspace-registry.md).
	reg.FollowKey(func(ctx context.Context) (*registry.Key, error) { return registry.KeyFromConfig(ctx, rt.Cfg) })
	if err := reg.Start(wctx, onChange, func(err error) { rt.Log.Error("workspace registry: entry skipped", "error", err) }); err != nil {
		stop()
		return err
	}
	// The file limit is sized for the set at start; workspaces added later
	// share what the pool leaves.
	pool, err := raiseFileLimit(len(reg.Current()))
	if err != nil {
		stop()
		return err
	}
	hc, streams := platformHTTPClients(rt.Cfg, pool)
	rs.mu.Lock()
	rs.hc, rs.streams = hc, streams
	rs.mu.Unlock()
	rs.stopWatch = stop
	rt.reg = rs
	rt.Clients = rt.liveClients()
	rt.Log.Info("workspace registry: read", "workspaces", len(rt.Clients))
	return nil
}

// client returns the client of workspace id as the registry last showed
// it (also after its removal, for a reply in flight); nil for a
// workspace never seen. A workspace keeps one client while its platform
// URL and org id stay: a new token is set on that client
// (molecule.Client.SetToken), so the poller's loop, the replier and the
// agent API that hold it send the new token from their next request on,
// the poller's cursor and state untouched.
func (rs *regState) client(id string) *molecule.Client { return rs.clientOf(id, true) }

// clientOf is client; without build it only updates a client already
// built (the watch, which runs before the HTTP clients exist).
func (rs *regState) clientOf(id string, build bool) *molecule.Client {
	e, ok := rs.reg.Lookup(id)
	if !ok {
		return nil
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rc, built := rs.clients[id]
	switch {
	case built && rc.entry.PlatformURL == e.PlatformURL && rc.entry.OrgID == e.OrgID:
		if rc.entry.Token != e.Token {
			if err := rc.c.SetToken(e.Token); err != nil {
				rs.rt.Log.Error("workspace registry: new token not usable; the old one stays", "workspace", id, "error", err)
				return rc.c
			}
			rc.entry = e
			rs.clients[id] = rc
			rs.rt.Log.Info("workspace registry: a new token is in use", "workspace", id)
		}
		return rc.c
	case !built && !build:
		return nil
	}
	w := config.Workspace{ID: e.ID, Token: e.Token, PlatformURL: e.PlatformURL, OrgID: e.OrgID}
	c, err := newClient(w, rs.hc, rs.streams, rs.rt.Log, rs.budgets.of(w))
	if err != nil {
		rs.rt.Log.Error("workspace registry: entry not usable", "workspace", id, "error", err)
		return nil
	}
	if built {
		close(rc.replaced)
	}
	rs.clients[id] = regClient{c: c, entry: e, replaced: make(chan struct{})}
	return c
}

// pollReplacing polls workspace id as a poller-group member's Poll does,
// with the registry's client, until ctx ends or the poll stops by itself;
// a new platform URL or org id stops it and polls again with the new
// client, as follow does outside a group.
func (rs *regState) pollReplacing(ctx context.Context, p *poller.Poller, id string) error {
	for {
		c := rs.client(id)
		if c == nil {
			return p.PollWorkspace(ctx, id) // not in the registry: ErrUnknownWorkspace
		}
		rs.mu.Lock()
		rc := rs.clients[id]
		rs.mu.Unlock()
		if rc.c != c {
			continue // replaced meanwhile
		}
		replaced := rc.replaced
		p.AddClient(c)
		pctx, stop := context.WithCancel(ctx)
		go func() {
			select {
			case <-replaced:
				stop()
			case <-pctx.Done():
			}
		}()
		err := p.PollWorkspace(pctx, id)
		stop()
		select {
		case <-replaced:
			if ctx.Err() == nil {
				rs.rt.Log.Info("workspace registry: polling a moved workspace with its new platform URL or org id", "workspace", id)
				continue
			}
		default:
		}
		return err
	}
}

// follow polls the registry's workspaces until ctx ends: within
// milliseconds of a change it starts an added or resumed workspace and
// stops a removed or paused one (its messages already published are
// answered as any other; the replier still finds its token).
func (rs *regState) follow(ctx context.Context, p *poller.Poller) error {
	type polled struct {
		c    *molecule.Client
		stop func()
	}
	running := map[string]polled{}
	var stopping sync.WaitGroup
	stopAsync := func(stop func()) {
		stopping.Add(1)
		go func() { defer stopping.Done(); stop() }() // one slow stop holds no other change
	}
	defer func() {
		for _, r := range running {
			stopAsync(r.stop)
		}
		stopping.Wait()
	}()
	for {
		ids := rs.reg.Current()
		cur := make(map[string]bool, len(ids))
		for _, id := range ids {
			cur[id] = true
		}
		for id, r := range running {
			// Removed, paused, or moved to another platform URL or org
			// (a new client, started below; a new token keeps the client).
			if !cur[id] || rs.client(id) != r.c {
				delete(running, id)
				stopAsync(r.stop)
				rs.rt.Log.Info("workspace registry: stopped polling a removed, paused or moved workspace", "workspace", id)
			}
		}
		for _, id := range ids {
			if _, ok := running[id]; !ok {
				if c := rs.client(id); c != nil {
					running[id] = polled{c: c, stop: p.StartClient(ctx, c)}
					rs.rt.Log.Info("workspace registry: polling an added workspace", "workspace", id)
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-rs.reg.Changed():
		}
	}
}

// lookup is the client of a workspace as the registry shows it now (added
// after the start, or with a new token or URL), for every stage and tool
// of this process; nil without the registry.
func (rt *Runtime) lookup() func(string) *molecule.Client {
	if rt.reg == nil {
		return nil
	}
	return rt.reg.client
}

// startClients are the clients the stages take at their start: none with
// the registry, whose workspaces they look up (lookup) as it changes.
func (rt *Runtime) startClients() map[string]*molecule.Client {
	if rt.reg != nil {
		return nil
	}
	return rt.ClientMap()
}

// liveClients are the clients of the workspaces this process serves now:
// the registry's present ones, or the configured ones.
func (rt *Runtime) liveClients() []*molecule.Client {
	if rt.reg == nil {
		return rt.Clients
	}
	ids := rt.reg.reg.Current()
	out := make([]*molecule.Client, 0, len(ids))
	for _, id := range ids {
		if c := rt.reg.client(id); c != nil {
			out = append(out, c)
		}
	}
	return out
}
