package relay_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/registry"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// registryWorld is an embedded NATS server with the workspace registry
// created in it, its admin handle (what `workspaces add` uses) and the
// platform double its entries point at.
type registryWorld struct {
	plat   *moleculetest.Server
	admin  *registry.Registry
	env    []string
	sendTo context.Context
}

func newRegistryWorld(t *testing.T) *registryWorld {
	t.Helper()
	plat := moleculetest.NewServer()
	t.Cleanup(plat.Close)
	ns := natstest.Start(t)
	key, keyB64, err := registry.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	_, js := natstest.Connect(t, ns.ClientURL())
	admin, err := registry.Open(context.Background(), js, key, true, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &registryWorld{plat: plat, admin: admin, sendTo: ctx, env: []string{
		"MOLECULE_WORKSPACE_REGISTRY=true",
		"MOLECULE_REGISTRY_KEY=" + keyB64,
		"MOLECULE_PLATFORM_URL=" + plat.URL(),
		"NATS_URL=" + ns.ClientURL(),
	}}
}

// open opens a relay on the registry (environ adds to its settings).
func (w *registryWorld) open(t *testing.T, environ ...string) *relay.Runtime {
	t.Helper()
	return openRelay(t, pipelinetest.Logger(), append(append([]string{"MOLECULE_HANDLER=echo"}, w.env...), environ...)...)
}

// run runs rt's three stages until the test ends; Run must end cleanly.
func (w *registryWorld) run(t *testing.T, rt *relay.Runtime) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx, relay.All) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// put adds or changes a workspace in the registry, with token.
func (w *registryWorld) put(t *testing.T, id, token string) {
	t.Helper()
	if err := w.admin.Put(context.Background(), registry.Entry{ID: id, Token: token, PlatformURL: w.plat.URL()}); err != nil {
		t.Fatal(err)
	}
}

func (w *registryWorld) send(t *testing.T, id, text string) {
	t.Helper()
	if st, body, err := w.plat.SendCanvas(w.sendTo, id, text); err != nil || (st != 200 && st != 202) {
		t.Fatalf("send: %d %s %v", st, body, err)
	}
}

// answers counts the canvas notifications of workspace id holding text.
func (w *registryWorld) answers(id, text string) int {
	n := 0
	for _, m := range w.plat.Notifications(id) {
		if strings.Contains(m.Message, text) {
			n++
		}
	}
	return n
}

// sawToken says whether the double received a request carrying token
// since from.
func (w *registryWorld) sawToken(token string, from time.Time) bool {
	for _, r := range w.plat.Requests() {
		if r.Header.Get("Authorization") == "Bearer "+token && !r.At.Before(from) {
			return true
		}
	}
	return false
}
