// Command delegation runs two agents, each served by its own Molecule
// Relay (its own NATS, poller, dispatcher and replier): a researcher that
// answers questions, and a coordinator that answers its canvas users by
// asking the researcher and waiting for the answer ("awaited delegation").
//
// With no MOLECULE_PLATFORM_URL it runs on the built-in platform double,
// sends one canvas question to the coordinator, prints the answer and
// exits 0. With MOLECULE_PLATFORM_URL, COORDINATOR_ID/COORDINATOR_TOKEN and
// RESEARCHER_ID/RESEARCHER_TOKEN it serves those two workspaces of a real
// platform until interrupted. See README.md and docs/delegation.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	relay "github.com/molecule-ai/molecule-relay"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Environ(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "delegation:", err)
		os.Exit(1)
	}
}

// coordinator answers a canvas user by asking the researcher and waiting
// (Context.Ask: the relay's agent API). The question is the n-th of this
// handler run, so a re-run after a crash finds the answer instead of
// asking again.
func coordinator(researcher string) relay.Handler {
	return func(c *relay.Context, m *relay.Message) (relay.Answer, error) {
		ans, err := c.Ask(relay.Question{PeerID: researcher, Text: m.Text})
		if errors.Is(err, relay.ErrNoAnswer) {
			return relay.Answer{Text: "The researcher did not answer in time; please ask again later."}, nil
		}
		if err != nil {
			return relay.Answer{}, err
		}
		return relay.Answer{Text: "The researcher says: " + ans.Text}, nil
	}
}

// researcher answers every question it is asked.
func researcher(string) relay.Handler {
	return func(_ *relay.Context, m *relay.Message) (relay.Answer, error) {
		return relay.Answer{Text: fmt.Sprintf("%q has %d words.", m.Text, len(strings.Fields(m.Text)))}, nil
	}
}

// agent is one workspace and the handler its relay runs.
type agent struct {
	id, token string
	handler   func(peer string) relay.Handler
	peer      string
}

func run(ctx context.Context, environ []string, out io.Writer) error {
	env := envMap(environ)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if env["DELEGATION_LOG"] != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	platform := env["MOLECULE_PLATFORM_URL"]
	var coord, res agent
	var double *moleculetest.Server
	if platform == "" {
		double = moleculetest.NewServer()
		defer double.Close()
		platform = double.URL()
		c, r := double.CreateWorkspace("coordinator"), double.CreateWorkspace("researcher")
		coord, res = agent{id: c.ID, token: c.Token}, agent{id: r.ID, token: r.Token}
	} else {
		coord = agent{id: env["COORDINATOR_ID"], token: env["COORDINATOR_TOKEN"]}
		res = agent{id: env["RESEARCHER_ID"], token: env["RESEARCHER_TOKEN"]}
	}
	coord.handler, coord.peer = coordinator, res.id
	res.handler = researcher

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, a := range []agent{res, coord} {
		r, closeRelay, err := openRelay(ctx, platform, env["MOLECULE_ORG_ID"], a, log)
		if err != nil {
			return err
		}
		defer closeRelay()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.Run(ctx); err != nil {
				errs <- err
				cancel()
			}
		}()
	}
	fmt.Fprintf(out, "coordinator %s asks researcher %s on %s\n", coord.id, res.id, platform)
	if double == nil {
		<-ctx.Done()
	} else if err := demo(ctx, double, coord.id, out); err != nil {
		cancel()
		wg.Wait()
		return err
	}
	cancel()
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// openRelay opens a relay for one workspace with the agent's Go handler:
// its own embedded NATS (a fresh store), configured from code with the
// settings of `molecule-relay connect`. A cold start delivers the last
// minute of messages (MOLECULE_BACKLOG_WINDOW), so the demo's question,
// sent as soon as the platform accepts it, is not skipped by the first
// cursor.
func openRelay(ctx context.Context, platform, org string, a agent, log *slog.Logger) (*relay.Relay, func(), error) {
	store, err := os.MkdirTemp("", "delegation-nats-")
	if err != nil {
		return nil, nil, err
	}
	r, err := relay.New(ctx, a.handler(a.peer), relay.Environ(nil), relay.Logger(log),
		relay.Platform(platform), relay.Workspace(a.id, a.token), relay.Setting("MOLECULE_ORG_ID", org),
		relay.Setting("MOLECULE_POLL_INTERVAL", "1s"), relay.Setting("MOLECULE_BACKLOG_WINDOW", "1m"), relay.Setting("NATS_STORE_DIR", store))
	if err != nil {
		_ = os.RemoveAll(store)
		return nil, nil, err
	}
	return r, func() { r.Close(); _ = os.RemoveAll(store) }, nil
}

// demo sends a canvas question to the coordinator and prints the answer
// the canvas gets.
func demo(ctx context.Context, double *moleculetest.Server, coord string, out io.Writer) error {
	const question = "How many words are in this question?"
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The platform queues messages only once the relay registered the
		// workspace in poll mode.
		st, _, err := double.SendCanvas(ctx, coord, question)
		if err == nil && st == 200 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the coordinator never registered (last status %d, %v)", st, err)
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	start := time.Now()
	fmt.Fprintf(out, "canvas → coordinator: %s\n", question)
	for time.Now().Before(deadline) {
		if n := double.Notifications(coord); len(n) > 0 {
			fmt.Fprintf(out, "coordinator → canvas: %s (%s)\n", n[0].Message, time.Since(start).Round(time.Millisecond))
			return nil
		}
		if !sleep(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
	return errors.New("no answer on the canvas within 30s")
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func envMap(environ []string) map[string]string {
	m := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}
