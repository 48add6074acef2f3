package relay_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/registry"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// TestRegistryAddAndRemove: a running relay that takes its workspaces
// from the registry answers a workspace added to it within 2 s (add →
// first message answered) and stops polling a removed one within 2 s
// (remove → its last platform request; a message sent after that is not
// answered), over 100 changes each. It prints the median and max.
func TestRegistryAddAndRemove(t *testing.T) {
	const changes = 100
	plat := moleculetest.NewServer()
	t.Cleanup(plat.Close)
	ns := natstest.Start(t)
	_, keyB64, err := registry.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	rt := openRelay(t, pipelinetest.Logger(),
		"MOLECULE_WORKSPACE_REGISTRY=true",
		"MOLECULE_REGISTRY_KEY="+keyB64,
		"MOLECULE_PLATFORM_URL="+plat.URL(),
		"MOLECULE_HANDLER=echo",
		"NATS_URL="+ns.ClientURL(),
	)
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- rt.Run(ctx, relay.All) }()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	key, _ := registry.ParseKey(keyB64)
	_, js := natstest.Connect(t, ns.ClientURL())
	admin, err := registry.Open(context.Background(), js, key, true, 1)
	if err != nil {
		t.Fatal(err)
	}
	sendCtx, stopSend := context.WithTimeout(context.Background(), time.Minute)
	defer stopSend()
	send := func(ws moleculetest.Workspace, text string) {
		t.Helper()
		if st, body, err := plat.SendCanvas(sendCtx, ws.ID, text); err != nil || (st != 200 && st != 202) {
			t.Fatalf("send: %d %s %v", st, body, err)
		}
	}
	answered := func(ws moleculetest.Workspace, text string) bool {
		for _, n := range plat.Notifications(ws.ID) {
			if strings.Contains(n.Message, text) {
				return true
			}
		}
		return false
	}

	var added []time.Duration
	wss := make([]moleculetest.Workspace, changes)
	removedAt := make([]time.Time, changes)
	for i := range changes {
		ws := plat.CreateWorkspace(fmt.Sprintf("agent-%d", i))
		wss[i] = ws
		text := fmt.Sprintf("hello %d", i)
		send(ws, text) // queued before the add: the cold start's backlog delivers it
		t0 := time.Now()
		if err := admin.Put(context.Background(), registry.Entry{ID: ws.ID, Token: ws.Token, PlatformURL: plat.URL()}); err != nil {
			t.Fatal(err)
		}
		for !answered(ws, text) {
			if time.Since(t0) > 2*time.Second {
				t.Fatalf("workspace %d added %s ago: its message is not answered", i, time.Since(t0))
			}
			time.Sleep(time.Millisecond)
		}
		added = append(added, time.Since(t0))
	}
	for i, ws := range wss {
		removedAt[i] = time.Now()
		if err := admin.Remove(context.Background(), ws.ID); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * time.Second) // the bound under test: nothing may be polled after it
	for i, ws := range wss {
		send(ws, fmt.Sprintf("after removal %d", i))
	}
	cutoff := time.Now()
	var removed []time.Duration
	last := map[string]time.Time{}
	deadline := time.Now().Add(3 * time.Second) // a poll interval and a half: a live poller would fetch by then
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	for _, r := range plat.Requests() {
		for _, ws := range wss {
			if r.Header.Get("Authorization") == "Bearer "+ws.Token && r.At.After(last[ws.ID]) {
				last[ws.ID] = r.At
			}
		}
	}
	for i, ws := range wss {
		if last[ws.ID].After(cutoff) {
			t.Errorf("workspace %d: a request at %s, after its removal and the 2 s bound", i, last[ws.ID].Sub(removedAt[i]))
		}
		if answered(ws, fmt.Sprintf("after removal %d", i)) {
			t.Errorf("workspace %d: answered after its removal", i)
		}
		removed = append(removed, max(0, last[ws.ID].Sub(removedAt[i])))
	}
	t.Logf("add → first answered over %d adds: median %s, max %s", changes, median(added), slices.Max(added))
	t.Logf("remove → last platform request with its token over %d removes (0: none after the removal): median %s, max %s", changes, median(removed), slices.Max(removed))
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
