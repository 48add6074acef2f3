package kvlease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/kvlease"
	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
)

// A holder that cannot renew (cut off from NATS) is told so by Lost
// within about a TTL, and stops; meanwhile another instance is refused,
// naming the holder, until the lease expired, and then takes the key.
func TestLostWhenRenewalFailsAndTakenAfterExpiry(t *testing.T) {
	srv := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = time.Second
	nc, js := natstest.ConnectCuttable(t, srv.ClientURL())
	cfg := kvlease.Config{Bucket: "test_leases", Instance: "first", TTL: ttl}
	held, err := kvlease.Acquire(ctx, js, []string{"k1"}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, other := natstest.Connect(t, srv.ClientURL())
	cfg.Instance = "second"
	_, err = kvlease.Acquire(ctx, other, []string{"k1"}, cfg)
	var he *kvlease.HeldError
	if !errors.As(err, &he) || he.Holder != "first" || !errors.Is(err, kvlease.ErrHeld) {
		t.Fatalf("second instance while the first holds k1: %v, want a HeldError naming first", err)
	}

	cut := time.Now()
	nc.Close()
	select {
	case <-held.Lost():
		if d := time.Since(cut); d > 4*ttl { // generous: a loaded CI machine
			t.Errorf("Lost %s after the renewals began to fail; want within about the TTL (%s)", d, ttl)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Lost not closed 10 s after the holder was cut off")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		second, err := kvlease.Acquire(ctx, other, []string{"k1"}, cfg)
		if err == nil {
			second.Release()
			return
		}
		if !errors.Is(err, kvlease.ErrHeld) || time.Now().After(deadline) {
			t.Fatalf("second instance after the first's lease expired: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
