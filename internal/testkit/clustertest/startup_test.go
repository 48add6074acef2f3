package clustertest_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/testkit/clustertest"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/relay"
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

// withoutQuorum starts the cluster, creates the R3 topology, then kills two
// of the three nodes: the one left has no JetStream quorum.
func withoutQuorum(t *testing.T) *clustertest.Cluster {
	t.Helper()
	c := clustertest.Start(t)
	_, admin := c.Connect(t, clustertest.UserAdmin)
	ensureTopology(t, admin)
	c.Node("n2").Kill()
	c.Node("n3").Kill()
	return c
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
