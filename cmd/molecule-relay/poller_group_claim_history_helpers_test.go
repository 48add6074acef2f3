package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// claimHistory records every change of a poller group's claims as the
// test's own watch of the bucket sees it, so that a gap in a workspace's
// polls can be told apart: its old owner releasing late, its new owner
// claiming late, or its new owner starting the poll late.
type claimHistory struct {
	mu     sync.Mutex
	byWS   map[string][]claimChange
	cancel context.CancelFunc
}

type claimChange struct {
	at    time.Time
	owner string // "" for a delete
}

func watchClaims(t *testing.T, js jetstream.JetStream, group string) *claimHistory {
	t.Helper()
	kv, err := js.KeyValue(context.Background(), events.BucketPollerGroups)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w, err := kv.Watch(ctx, group+".c.>", jetstream.UpdatesOnly())
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	h := &claimHistory{byWS: map[string][]claimChange{}, cancel: cancel}
	t.Cleanup(cancel)
	prefix := group + ".c."
	go func() {
		for e := range w.Updates() {
			if e == nil {
				continue
			}
			c := claimChange{at: time.Now()}
			if e.Operation() == jetstream.KeyValuePut {
				c.owner = string(e.Value())
			}
			ws := strings.TrimPrefix(e.Key(), prefix)
			h.mu.Lock()
			h.byWS[ws] = append(h.byWS[ws], c)
			h.mu.Unlock()
		}
	}()
	return h
}

// explain logs ws's claim changes and the double's requests for it around
// [from, to], relative to zero.
func (h *claimHistory) explain(t *testing.T, reqs []moleculetest.RecordedRequest, ws string, zero, from, to time.Time) {
	t.Helper()
	rel := func(at time.Time) string { return "+" + at.Sub(zero).Round(time.Millisecond).String() }
	var b strings.Builder
	h.mu.Lock()
	for _, c := range h.byWS[ws] {
		owner := c.owner
		if owner == "" {
			owner = "(released)"
		}
		fmt.Fprintf(&b, "  %s claim %s\n", rel(c.at), owner)
	}
	h.mu.Unlock()
	for _, r := range reqs {
		if r.At.Before(from.Add(-5*time.Second)) || r.At.After(to.Add(5*time.Second)) {
			continue
		}
		if strings.HasPrefix(r.Path, "/workspaces/"+ws+"/") || strings.Contains(string(r.Body), ws) {
			fmt.Fprintf(&b, "  %s %s %s %d\n", rel(r.At), r.Method, r.Path, r.Status)
		}
	}
	t.Logf("workspace %s from %s to %s:\n%s", ws, rel(from), rel(to), b.String())
}
