package relay

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/testkit/natstest"
)

// Start-up asks the meta leader with a short bound first, so a stage
// restarted during a meta election starts soon after the new leader is
// there, and doubles the bound after each try nobody answered, up to a
// whole try's, so a slow meta leader still gets one. An answer, even a
// refusal, leaves the bound as it is.
func TestMetaCheckWaitsLongerOnlyAfterSilence(t *testing.T) {
	t.Run("a meta leader answers", func(t *testing.T) {
		srv := natstest.Start(t)
		_, js := natstest.Connect(t, srv.ClientURL())
		m := newMetaCheck()
		if err := m.answers(t.Context(), js); err != nil {
			t.Fatalf("answers: %v", err)
		}
		if m.bound != metaAttemptMin {
			t.Errorf("bound after an answer = %s, want %s", m.bound, metaAttemptMin)
		}
	})
	t.Run("nobody answers", func(t *testing.T) {
		js := silentJetStream(t)
		m := newMetaCheck()
		var bounds []time.Duration
		for range 5 {
			start := time.Now()
			if err := m.answers(t.Context(), js); err == nil {
				t.Fatal("answers: nil from a server that never answers")
			}
			if took, want := time.Since(start), min(metaAttemptMin<<len(bounds), startupAttempt); took < want {
				t.Errorf("try %d ended after %s, before its bound %s", len(bounds)+1, took, want)
			}
			bounds = append(bounds, m.bound)
		}
		want := []time.Duration{2 * metaAttemptMin, 4 * metaAttemptMin, startupAttempt, startupAttempt, startupAttempt}
		for i := range want {
			if bounds[i] != want[i] {
				t.Fatalf("bounds after each silent try = %v, want %v", bounds, want)
			}
		}
	})
}

// silentJetStream is a JetStream handle on a server without JetStream
// where something takes the account-info requests and never answers them,
// as a cluster node in its first seconds without a meta leader.
func silentJetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe(jetstream.DefaultAPIPrefix+"INFO", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
