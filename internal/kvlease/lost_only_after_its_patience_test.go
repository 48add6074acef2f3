package kvlease_test

import (
	"context"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/kvlease"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
)

// TestLostOnlyAfterItsPatience: with Patience longer than the TTL (a
// poller group's members), renewals that fail for less than it keep the
// lease; Lost closes once they have failed for about Patience.
func TestLostOnlyAfterItsPatience(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl, patience = 400 * time.Millisecond, 2 * time.Second
	nc, js := natstest.ConnectCuttable(t, srv.ClientURL())
	held, err := kvlease.Acquire(ctx, js, []string{"k1"}, kvlease.Config{Bucket: "test_leases", Instance: "patient", TTL: ttl, Patience: patience})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl) // a few renewals that succeed
	cut := time.Now()
	nc.Close()
	select {
	case <-held.Lost():
		d := time.Since(cut)
		if d < patience-ttl/2 {
			t.Fatalf("Lost %s after the renewals began to fail; want about its patience, %s (the TTL is %s)", d, patience, ttl)
		}
		if d > 3*patience { // generous: a loaded CI machine
			t.Errorf("Lost %s after the renewals began to fail; want within about %s", d, patience)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Lost not closed 10 s after the holder was cut off")
	}
}
