package poller

import (
	"sync"
	"testing"
)

// This process's copy of a status record never goes back to an older
// one: while refreshes that change nothing run on other goroutines (the
// heartbeats, the event stream), every change written is what the next
// read returns. A refresh that stored its copy of the entry it had loaded
// before a write undid the write; an undone registration made the next
// cycle register again.
func TestStatusCopyNeverGoesBack(t *testing.T) {
	ctx, p, _ := statusTestPoller(t)
	const ws = "ws-1"
	if _, err := p.updateStatus(ctx, ws, func(r *statusRecord) { r.Generation = "new" }); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := p.updateStatus(ctx, ws, func(*statusRecord) {}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	for i := range 300 {
		want := i%2 == 0
		if _, err := p.updateStatus(ctx, ws, func(r *statusRecord) { r.Paused = want }); err != nil {
			t.Fatal(err)
		}
		rec, err := p.readStatus(ctx, ws)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Paused != want {
			t.Fatalf("write %d set paused %v; the next read returned %v: the copy went back", i, want, rec.Paused)
		}
	}
}
