package relay_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// tenant is one platform double with the relay's workspaces on it.
type tenant struct {
	plat *moleculetest.Server
	org  string
	ws   []moleculetest.Workspace
}

func newTenant(t *testing.T, org string, limit int, names ...string) *tenant {
	t.Helper()
	plat := moleculetest.NewServer(moleculetest.WithOrgID(org), moleculetest.WithRateLimit(limit, time.Minute))
	t.Cleanup(plat.Close)
	tn := &tenant{plat: plat, org: org}
	for _, n := range names {
		tn.ws = append(tn.ws, plat.CreateWorkspace(n))
	}
	return tn
}

// ownRequests are the requests the relay made with ws's token.
func (tn *tenant) ownRequests(ws moleculetest.Workspace) []moleculetest.RecordedRequest {
	var out []moleculetest.RecordedRequest
	for _, r := range tn.plat.Requests() {
		if r.Header.Get("Authorization") == "Bearer "+ws.Token {
			out = append(out, r)
		}
	}
	return out
}

func (tn *tenant) streams(ws moleculetest.Workspace) int {
	n := 0
	for _, r := range tn.ownRequests(ws) {
		if r.Path == "/workspaces/"+ws.ID+"/events/stream" {
			n++
		}
	}
	return n
}

func (tn *tenant) notified(ws moleculetest.Workspace, text string) int {
	n := 0
	for _, x := range tn.plat.Notifications(ws.ID) {
		if strings.Contains(x.Message, text) {
			n++
		}
	}
	return n
}

// Workspaces on two tenants (two platform doubles, two SaaS orgs) served
// by one relay.Runtime from MOLECULE_PLATFORM_URLS and MOLECULE_ORG_IDS:
// each workspace is registered, polled, woken by its event stream and
// answered on its own tenant, every request carries that tenant's headers,
// and each tenant's rate budget is its own (shared by the workspaces of
// one tenant and org, as the platform's bucket is).
func TestE2EWorkspacesOnTwoTenants(t *testing.T) {
	t.Parallel()
	a := newTenant(t, "org-a", 500, "agent-a1", "agent-a2")
	b := newTenant(t, "org-b", 400, "agent-b")
	ns := natstest.Start(t)
	// Positions interleave the tenants: the pairing, not the order of
	// the tenants, decides where a workspace lives.
	order := []struct {
		tn *tenant
		ws moleculetest.Workspace
	}{{a, a.ws[0]}, {b, b.ws[0]}, {a, a.ws[1]}}
	var ids, toks, urls, orgs []string
	for _, o := range order {
		ids, toks = append(ids, o.ws.ID), append(toks, o.ws.Token)
		urls, orgs = append(urls, o.tn.plat.URL()+"/"), append(orgs, o.tn.org)
	}
	rt := openRelay(t, pipelinetest.Logger(),
		"MOLECULE_WORKSPACE_IDS="+strings.Join(ids, ","),
		"MOLECULE_WORKSPACE_TOKENS="+strings.Join(toks, ","),
		"MOLECULE_PLATFORM_URLS="+strings.Join(urls, ","),
		"MOLECULE_ORG_IDS="+strings.Join(orgs, ","),
		"MOLECULE_HANDLER=echo",
		"MOLECULE_POLL_INTERVAL=10s", // Run must get the messages from SSE wake-ups
		"NATS_URL="+ns.ClientURL(),
	)

	// The first one-shot registers every workspace on its tenant and
	// seeds its cursor.
	rep, err := rt.Once(pipelinetest.Ctx(t), relay.All, 200*time.Millisecond)
	if err != nil || !rep.OK() {
		t.Fatalf("first Once: %v %+v", err, rep)
	}
	for _, o := range order {
		if m := o.tn.plat.Status(o.ws.ID).DeliveryMode; m != "poll" {
			t.Fatalf("workspace %s: delivery mode %q on its tenant after Once, want poll", o.ws.Name, m)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	send := func(phase string) {
		t.Helper()
		for _, o := range order {
			text := fmt.Sprintf("%s for %s", phase, o.ws.Name)
			if st, body, err := o.tn.plat.SendCanvas(ctx, o.ws.ID, text); err != nil || st != 200 {
				t.Fatalf("send %q: %d %s %v", text, st, body, err)
			}
		}
	}
	send("once")
	rep, err = rt.Once(pipelinetest.Ctx(t), relay.All, 200*time.Millisecond)
	if err != nil || !rep.OK() {
		t.Fatalf("second Once: %v %+v", err, rep)
	}
	if rep.Handled != 3 || rep.Replied != 3 {
		t.Errorf("second Once: handled %d, replied %d; want 3 each", rep.Handled, rep.Replied)
	}
	for _, o := range order {
		if n := o.tn.notified(o.ws, "once for "+o.ws.Name); n != 1 {
			t.Errorf("workspace %s: %d answers on its tenant, want 1", o.ws.Name, n)
		}
	}

	// Long-running: each workspace holds its event stream on its own
	// tenant, and its wake-ups bring the answer well inside the poll
	// interval.
	run := pipelinetest.Start(t, func(ctx context.Context) error { return rt.Run(ctx, relay.All) })
	pipelinetest.Eventually(t, 10*time.Second, "every workspace's event stream on its tenant", func() bool {
		for _, o := range order {
			if o.tn.streams(o.ws) == 0 {
				return false
			}
		}
		return true
	})
	send("run")
	pipelinetest.Eventually(t, 8*time.Second, "every workspace answered on its tenant", func() bool {
		for _, o := range order {
			if o.tn.notified(o.ws, "run for "+o.ws.Name) == 0 {
				return false
			}
		}
		return true
	})
	if err := run.Stop(); err != nil {
		t.Errorf("Run: %v", err)
	}
	for _, o := range order {
		if n := o.tn.notified(o.ws, "run for "+o.ws.Name); n != 1 {
			t.Errorf("workspace %s: %d answers to its run message, want 1", o.ws.Name, n)
		}
	}

	// Tenant headers: every request of a workspace went to its own tenant,
	// with that tenant's org id and its base URL as Origin.
	for _, o := range order {
		reqs := o.tn.ownRequests(o.ws)
		if len(reqs) == 0 {
			t.Fatalf("workspace %s: no request reached its tenant", o.ws.Name)
		}
		for _, r := range reqs {
			if got := r.Header.Get("X-Molecule-Org-Id"); got != o.tn.org {
				t.Errorf("workspace %s: %s %s with X-Molecule-Org-Id %q, want %q", o.ws.Name, r.Method, r.Path, got, o.tn.org)
			}
			if got := r.Header.Get("Origin"); got != o.tn.plat.URL() {
				t.Errorf("workspace %s: %s %s with Origin %q, want %q", o.ws.Name, r.Method, r.Path, got, o.tn.plat.URL())
			}
		}
		for _, other := range []*tenant{a, b} {
			if other != o.tn && len(other.ownRequests(o.ws)) > 0 {
				t.Errorf("workspace %s: %d requests reached the other tenant", o.ws.Name, len(other.ownRequests(o.ws)))
			}
		}
	}

	// Rate budgets: the two workspaces of tenant A share the org's bucket,
	// tenant B's is its own.
	cm := rt.ClientMap()
	ra1, ra2, rb := cm[a.ws[0].ID].RateLimit(), cm[a.ws[1].ID].RateLimit(), cm[b.ws[0].ID].RateLimit()
	if !ra1.Known || ra1.Limit != 500 || !rb.Known || rb.Limit != 400 {
		t.Errorf("rate budgets: tenant A limit %d (known %v), tenant B limit %d (known %v); want 500 and 400", ra1.Limit, ra1.Known, rb.Limit, rb.Known)
	}
	if ra1 != ra2 {
		t.Errorf("the two workspaces of tenant A see different budgets of the org's one bucket: %+v and %+v", ra1, ra2)
	}
}

// One org id on two tenants is still two buckets: each tenant counts its
// own requests, so the relay keys a budget by tenant and org, not by org.
func TestE2ESameOrgIDOnTwoTenantsKeepsTwoBudgets(t *testing.T) {
	t.Parallel()
	a := newTenant(t, "org", 500, "agent-a")
	b := newTenant(t, "org", 400, "agent-b")
	ns := natstest.Start(t)
	rt := openRelay(t, pipelinetest.Logger(),
		"MOLECULE_WORKSPACE_IDS="+a.ws[0].ID+","+b.ws[0].ID,
		"MOLECULE_WORKSPACE_TOKENS="+a.ws[0].Token+","+b.ws[0].Token,
		"MOLECULE_PLATFORM_URLS="+a.plat.URL()+","+b.plat.URL(),
		"MOLECULE_ORG_IDS=org,org",
		"NATS_URL="+ns.ClientURL(),
	)
	rep, err := rt.Once(pipelinetest.Ctx(t), relay.All, 200*time.Millisecond)
	if err != nil || !rep.OK() {
		t.Fatalf("Once: %v %+v", err, rep)
	}
	cm := rt.ClientMap()
	if ra, rb := cm[a.ws[0].ID].RateLimit(), cm[b.ws[0].ID].RateLimit(); ra.Limit != 500 || rb.Limit != 400 {
		t.Errorf("rate budgets: tenant A limit %d, tenant B limit %d; want 500 and 400 (one budget per tenant)", ra.Limit, rb.Limit)
	}
}
