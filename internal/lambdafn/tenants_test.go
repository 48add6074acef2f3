package lambdafn

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// The functions read MOLECULE_PLATFORM_URLS like every other mode: the
// tokens come from the secret by workspace id, the URLs and org ids pair
// by position with MOLECULE_WORKSPACE_IDS, and MOLECULE_PLATFORM_URL (which
// template.yaml always sets) may name one of the tenants. A poller, a
// dispatcher and a replier invocation carry a message on each of two
// tenants to its answer on the same tenant.
func TestFunctionsServeWorkspacesOnTwoTenants(t *testing.T) {
	platA := moleculetest.NewServer(moleculetest.WithOrgID("org-a"))
	t.Cleanup(platA.Close)
	platB := moleculetest.NewServer(moleculetest.WithOrgID("org-b"))
	t.Cleanup(platB.Close)
	wa, wb := platA.CreateWorkspace("lambda-a"), platB.CreateWorkspace("lambda-b")
	const secret = "arn:aws:secretsmanager:eu-west-1:1:secret:tokens"
	port := extension(t, map[string]string{secret: `{"` + wa.ID + `":"` + wa.Token + `","` + wb.ID + `":"` + wb.Token + `"}`}, nil)
	ns := natstest.Start(t)
	environ := []string{
		EnvExtensionPort + "=" + port, "AWS_SESSION_TOKEN=session-token",
		EnvTokensSecret + "=" + secret,
		"NATS_URL=" + ns.ClientURL(),
		"MOLECULE_PLATFORM_URL=" + platA.URL(),
		"MOLECULE_WORKSPACE_IDS=" + wb.ID + "," + wa.ID,
		"MOLECULE_PLATFORM_URLS=" + platB.URL() + "," + platA.URL(),
		"MOLECULE_ORG_IDS=org-b,org-a",
		"MOLECULE_HANDLER=echo",
		"MOLECULE_HANDLER_TIMEOUT=5s",
		"MOLECULE_SSE=false",
		"MOLECULE_POLLER_WINDOW=false",
		"MOLECULE_DRAIN_IDLE=300ms",
		"MOLECULE_DRAIN_MARGIN=1s",
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	fns := map[Stage]*Function{}
	for _, s := range []Stage{Poller, Dispatcher, Replier} {
		fns[s] = New(s, environ, log)
		t.Cleanup(fns[s].Close)
	}
	invoke := func(s Stage) *Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		res, err := fns[s].Invoke(ctx, nil)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		return res
	}

	invoke(Poller) // registers both workspaces and seeds their cursors
	for _, x := range []struct {
		plat *moleculetest.Server
		ws   moleculetest.Workspace
	}{{platA, wa}, {platB, wb}} {
		if m := x.plat.Status(x.ws.ID).DeliveryMode; m != "poll" {
			t.Fatalf("%s: delivery mode %q on its tenant, want poll", x.ws.Name, m)
		}
		if st, body, err := x.plat.SendCanvas(context.Background(), x.ws.ID, "hi "+x.ws.Name); err != nil || st != 200 {
			t.Fatalf("send: %d %s %v", st, body, err)
		}
	}
	if p, d, r := invoke(Poller), invoke(Dispatcher), invoke(Replier); p.Published != 2 || d.Handled != 2 || r.Replied != 2 {
		t.Fatalf("published %d, handled %d, replied %d; want 2 each", p.Published, d.Handled, r.Replied)
	}
	for _, x := range []struct {
		plat *moleculetest.Server
		ws   moleculetest.Workspace
		org  string
	}{{platA, wa, "org-a"}, {platB, wb, "org-b"}} {
		n := x.plat.Notifications(x.ws.ID)
		if len(n) != 1 || !strings.Contains(n[0].Message, "hi "+x.ws.Name) {
			t.Errorf("%s: notifications on its tenant %+v, want its one answer", x.ws.Name, n)
		}
		for _, r := range x.plat.Requests() {
			if r.Header.Get("Authorization") == "Bearer "+x.ws.Token && r.Header.Get("X-Molecule-Org-Id") != x.org {
				t.Errorf("%s: %s %s with X-Molecule-Org-Id %q, want %q", x.ws.Name, r.Method, r.Path, r.Header.Get("X-Molecule-Org-Id"), x.org)
			}
		}
	}
}
