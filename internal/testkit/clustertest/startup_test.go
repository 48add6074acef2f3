package clustertest_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/testkit/clustertest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// stageConfig is the configuration of a poll stage on the cluster, R3,
// with the given start-up timeout: as the admin creating the topology
// (ensure), or as the poller's own user finding it (lookup).
func stageConfig(t *testing.T, c *clustertest.Cluster, topology, startupTimeout string) *config.Config {
	t.Helper()
	user := clustertest.UserAdmin
	if topology == "lookup" {
		user = clustertest.UserPoller
	}
	cfg, err := config.Load(nil, []string{
		"NATS_URL=" + c.URLs(),
		"NATS_USER=" + user,
		"NATS_PASSWORD=" + clustertest.Password(user),
		"MOLECULE_STREAM_REPLICAS=3",
		"MOLECULE_TOPOLOGY=" + topology,
		"MOLECULE_STARTUP_TIMEOUT=" + startupTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(0); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// withoutQuorum starts the cluster, creates the R3 topology, makes n1 the
// leader of every stream and consumer and n2 the meta leader, kills n2 and
// n3, and returns once n1 knows it has no meta leader: a cluster without
// quorum, in the worst case for a stage that starts on the survivor. Until
// its lost-quorum check (every 10 s for followers unheard for 10 s,
// nats-server raft.go lostQuorumCheck and lostQuorumInterval) n1 still
// leads its groups and answers their lookups, 10–20 s after the kill,
// while as a meta follower it knows the meta leader is gone after one
// election timeout (4–9 s). The meta leader is kept off n1 because a
// survivor that led the meta group answers as its leader until that check
// too, which no request can tell from a cluster with quorum
// (docs/guarantees.md, "A stage started ... while the cluster has no
// quorum").
func withoutQuorum(t *testing.T) *clustertest.Cluster {
	t.Helper()
	c := clustertest.Start(t)
	nc, admin := c.Connect(t, clustertest.UserAdmin)
	ensureTopology(t, admin)
	leadAllGroups(t, c, nc, admin, "n1")
	if c.MetaLeader() == "n1" {
		sys, _ := c.Connect(t, clustertest.UserSys)
		waitLeader(t, "meta", "n2", "$JS.API.META.LEADER.STEPDOWN", sys, func() string { return c.MetaLeader() })
	}
	c.Node("n2").Kill()
	c.Node("n3").Kill()
	if err := pollCond(30*time.Second, func() bool { return c.MetaLeader() == "" }); err != nil {
		t.Fatalf("n1 still knows a meta leader 30 s after n2 and n3 were killed")
	}
	return c
}

// leadAllGroups makes node the leader of every stream and consumer of the
// account js sees, by asking each group's leader to step down in its favour.
func leadAllGroups(t *testing.T, c *clustertest.Cluster, nc *nats.Conn, js jetstream.JetStream, node string) {
	t.Helper()
	for stream, consumers := range groups(t, js) {
		waitLeader(t, stream, node, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, nc, func() string {
			return groupLeader(c, node, stream, "")
		})
		for _, name := range consumers {
			waitLeader(t, stream+"/"+name, node, "$JS.API.CONSUMER.LEADER.STEPDOWN."+stream+"."+name, nc, func() string {
				return groupLeader(c, node, stream, name)
			})
		}
	}
}

// groups lists the account's streams with their consumers' names.
func groups(t *testing.T, js jetstream.JetStream) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string][]string{}
	streams := js.ListStreams(ctx)
	for info := range streams.Info() {
		out[info.Config.Name] = nil
	}
	if err := streams.Err(); err != nil {
		t.Fatalf("list streams: %v", err)
	}
	for stream := range out {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatalf("stream %s: %v", stream, err)
		}
		names := s.ConsumerNames(ctx)
		for name := range names.Name() {
			out[stream] = append(out[stream], name)
		}
		if err := names.Err(); err != nil {
			t.Fatalf("consumers of %s: %v", stream, err)
		}
	}
	return out
}

// waitLeader asks a group's leader to step down (subject) in favour of want
// until leader reports want.
func waitLeader(t *testing.T, group, want, subject string, nc *nats.Conn, leader func() string) {
	t.Helper()
	req := []byte(`{"placement":{"preferred":"` + want + `"}}`)
	deadline := time.Now().Add(30 * time.Second)
	for leader() != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: leader %q, want %s after 30 s of step-down requests", group, leader(), want)
		}
		if l := leader(); l != "" {
			// An error (the leader changed meanwhile) is asked again.
			_, _ = nc.Request(subject, req, 2*time.Second)
		}
		if err := pollCond(5*time.Second, func() bool { return leader() == want }); err == nil {
			return
		}
	}
}

// groupLeader is the leader of stream (or of its consumer, if named) as
// node knows it, or "" while it has none or node does not answer.
func groupLeader(c *clustertest.Cluster, node, stream, consumer string) string {
	l, err := c.Node(node).Leaders(http.DefaultClient)
	if err != nil {
		return ""
	}
	for _, a := range l.Accounts {
		for _, s := range a.Streams {
			if s.Name != stream {
				continue
			}
			if consumer == "" && s.Cluster != nil {
				return s.Cluster.Leader
			}
			for _, cs := range s.Consumers {
				if cs.Name == consumer && cs.Cluster != nil {
					return cs.Cluster.Leader
				}
			}
		}
	}
	return ""
}

// TestStageStartingWithoutQuorumWaitsForIt: a stage that starts while the
// cluster has no JetStream quorum does not exit. It says at warn level
// what it waits for, and starts once a majority of the nodes is back;
// whether it creates the topology (ensure) or only finds it (lookup, a
// least-privilege stage user).
func TestStageStartingWithoutQuorumWaitsForIt(t *testing.T) {
	for _, topology := range []string{"ensure", "lookup"} {
		t.Run(topology, func(t *testing.T) { stageWaitsForQuorum(t, topology) })
	}
}

func stageWaitsForQuorum(t *testing.T, topology string) {
	c := withoutQuorum(t)
	var logs pipelinetest.LogBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		rt, err := relay.OpenStages(ctx, stageConfig(t, c, topology, "2m"), log, relay.Stages{Poll: true})
		if err == nil {
			rt.Close()
		}
		done <- err
	}()

	if err := pollCond(60*time.Second, func() bool { return strings.Contains(logs.String(), "waiting for JetStream") }); err != nil {
		select {
		case err := <-done:
			t.Fatalf("the stage did not wait for the cluster: OpenStages returned %v\n%s", err, logs.String())
		default:
		}
		t.Fatalf("no log line saying what the stage waits for within 60 s:\n%s", logs.String())
	}
	line := logs.String()
	for _, want := range []string{"waiting_for=", "JetStream topology", "error=", "MOLECULE_STARTUP_TIMEOUT"} {
		if !strings.Contains(line, want) {
			t.Errorf("the waiting log line lacks %q:\n%s", want, line)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("OpenStages returned while the cluster had no quorum: %v", err)
	default:
	}

	c.Node("n2").Restart(t)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("OpenStages after the quorum came back: %v\n%s", err, logs.String())
		}
	case <-ctx.Done():
		t.Fatalf("the stage did not start within 2 minutes of the quorum coming back:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "JetStream ready") {
		t.Errorf("no log line saying the wait is over:\n%s", logs.String())
	}
}

// TestStageStartingWithoutQuorumGivesUpAfterStartupTimeout: without a
// quorum for longer than MOLECULE_STARTUP_TIMEOUT the stage gives up with
// an error that names what is missing and the setting.
func TestStageStartingWithoutQuorumGivesUpAfterStartupTimeout(t *testing.T) {
	c := withoutQuorum(t)
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	rt, err := relay.OpenStages(ctx, stageConfig(t, c, "ensure", "4s"), log, relay.Stages{Poll: true})
	took := time.Since(start)
	if err == nil {
		rt.Close()
		t.Fatal("OpenStages succeeded without a quorum")
	}
	if !errors.Is(err, relay.ErrStartupTimeout) {
		t.Errorf("error = %v, want one matching relay.ErrStartupTimeout", err)
	}
	for _, want := range []string{"MOLECULE_STARTUP_TIMEOUT", "JetStream topology", "quorum"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if took < 4*time.Second || took > 30*time.Second {
		t.Errorf("gave up after %s, want just over MOLECULE_STARTUP_TIMEOUT (4s)", took)
	}
}
