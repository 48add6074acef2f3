package relay_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// With MOLECULE_TOPOLOGY=lookup a stage finds the topology an admin created
// and creates nothing itself; before the admin ran, it says what to do.
func TestTopologyLookupMode(t *testing.T) {
	nats := natstest.Start(t)
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("lookup")
	load := func(mode string) *config.Config {
		cfg, err := config.Load(nil, []string{"NATS_URL=" + nats.ClientURL(), "MOLECULE_PLATFORM_URL=" + srv.URL(),
			"MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token, "MOLECULE_TOPOLOGY=" + mode, "MOLECULE_LOG_LEVEL=error"})
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(config.NeedPlatform | config.NeedHandler); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lookup := load("lookup")
	if _, err := relay.OpenStages(ctx, lookup, lookup.NewLogger(io.Discard), relay.Stages{Dispatch: true}); err == nil ||
		!strings.Contains(err.Error(), "create the topology first") {
		t.Fatalf("lookup before the topology exists: %v", err)
	}
	ensure := load("ensure")
	admin, err := relay.Open(ctx, ensure, ensure.NewLogger(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	admin.Close()
	rt, err := relay.OpenStages(ctx, lookup, lookup.NewLogger(io.Discard), relay.Stages{Dispatch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if rt.Topo.Inbound == nil || rt.Topo.Handled == nil || rt.Topo.Reply != nil || rt.Topo.Cursors != nil {
		t.Fatalf("a dispatcher looked up more or less than it uses: %+v", rt.Topo)
	}
	rep, err := rt.Once(ctx, relay.Stages{Dispatch: true}, 100*time.Millisecond)
	if err != nil || !rep.OK() {
		t.Fatalf("dispatch once in lookup mode: %+v %v", rep, err)
	}
	if _, err := rt.Conn.JS.Stream(ctx, events.StreamInbound); err != nil {
		t.Fatal(err)
	}
}
