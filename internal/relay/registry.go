package relay

import (
	"context"
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
// per workspace and token.
type regState struct {
	reg         *registry.Registry
	cfg         *config.Config
	hc, streams *http.Client
	rt          *Runtime
	stopWatch   context.CancelFunc

	mu      sync.Mutex
	clients map[string]regClient
	budgets budgetsByBucket
}

type regClient struct {
	c     *molecule.Client
	entry registry.Entry
}

// openRegistry opens the registry, seeds it with the static workspace
// settings, reads it and follows it until Close; rt.Clients becomes its
// workspaces that are not paused. Only the poller and the replier read it
// (the dispatcher's NATS user may not).
func (rt *Runtime) openRegistry(ctx context.Context) error {
	key, err := registry.LoadKey(rt.Cfg.RegistryKeyFile, rt.Cfg.RegistryKey)
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
	wctx, stop := context.WithCancel(context.Background()) // the watch lives as long as the runtime
	if err := reg.Start(wctx, nil, func(err error) { rt.Log.Error("workspace registry: entry skipped", "error", err) }); err != nil {
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
	rs := &regState{reg: reg, cfg: rt.Cfg, hc: hc, streams: streams, rt: rt, clients: map[string]regClient{}, budgets: budgetsByBucket{}}
	rs.stopWatch = stop
	rt.reg = rs
	rt.Clients = nil
	for _, id := range reg.Current() {
		if c := rs.client(id); c != nil {
			rt.Clients = append(rt.Clients, c)
		}
	}
	rt.Log.Info("workspace registry: read", "workspaces", len(rt.Clients))
	return nil
}

// client returns the client of workspace id as the registry last showed
// it (also after its removal, for a reply in flight), built once per
// token; nil for a workspace never seen.
func (rs *regState) client(id string) *molecule.Client {
	e, ok := rs.reg.Lookup(id)
	if !ok {
		return nil
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rc, ok := rs.clients[id]; ok && rc.entry.Token == e.Token && rc.entry.PlatformURL == e.PlatformURL && rc.entry.OrgID == e.OrgID {
		return rc.c
	}
	w := config.Workspace{ID: e.ID, Token: e.Token, PlatformURL: e.PlatformURL, OrgID: e.OrgID}
	c, err := newClient(w, rs.hc, rs.streams, rs.rt.Log, rs.budgets.of(w))
	if err != nil {
		rs.rt.Log.Error("workspace registry: entry not usable", "workspace", id, "error", err)
		return nil
	}
	rs.clients[id] = regClient{c: c, entry: e}
	return c
}

// follow polls the registry's workspaces until ctx ends: within
// milliseconds of a change it starts an added or resumed workspace and
// stops a removed or paused one (its messages already published are
// answered as any other; the replier still finds its token).
func (rs *regState) follow(ctx context.Context, p *poller.Poller) error {
	running := map[string]func(){}
	var stopping sync.WaitGroup
	defer func() {
		for _, stop := range running {
			stopping.Add(1)
			go func() { defer stopping.Done(); stop() }()
		}
		stopping.Wait()
	}()
	for {
		cur := map[string]bool{}
		for _, id := range rs.reg.Current() {
			cur[id] = true
			if running[id] == nil {
				if c := rs.client(id); c != nil {
					running[id] = p.StartClient(ctx, c)
					rs.rt.Log.Info("workspace registry: polling an added workspace", "workspace", id)
				}
			}
		}
		for id, stop := range running {
			if !cur[id] {
				delete(running, id)
				stopping.Add(1)
				go func() { defer stopping.Done(); stop() }() // one slow stop holds no other change
				rs.rt.Log.Info("workspace registry: stopped polling a removed or paused workspace", "workspace", id)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-rs.reg.Changed():
		}
	}
}

// lookup is the replier's client of a workspace added after it started.
func (rt *Runtime) lookup() func(string) *molecule.Client {
	if rt.reg == nil {
		return nil
	}
	return rt.reg.client
}
