package relay_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"time"

	relay "github.com/molecule-ai/molecule-relay"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A Go program that answers a workspace's messages: relay.Run with a
// handler. In production the settings come from the environment, as for
// `molecule-relay connect` (MOLECULE_PLATFORM_URL, MOLECULE_WORKSPACE_ID,
// MOLECULE_WORKSPACE_TOKEN, …), and the call is
//
//	err := relay.Run(ctx, answer)
//
// Here they are given in code, against the platform double, and a canvas
// user asks once.
func Example() {
	platform, ws, settings, done := sandbox()
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go canvasUser(ctx, cancel, platform, ws.ID, "hello") // prints the answer, then stops the relay

	err := relay.Run(ctx, func(c *relay.Context, m *relay.Message) (relay.Answer, error) {
		return relay.Answer{Text: "You said: " + m.Text}, nil
	}, append(settings, relay.Platform(platform.URL()), relay.Workspace(ws.ID, ws.Token))...)
	if err != nil {
		log.Fatal(err)
	}
	// Output: You said: hello
}

// A handler that acts as an agent while it works: an interim message to
// the canvas user now, then the answer.
func ExampleContext_Interim() {
	platform, ws, settings, done := sandbox()
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go canvasUser(ctx, cancel, platform, ws.ID, "how many peers do I have?")

	err := relay.Run(ctx, func(c *relay.Context, m *relay.Message) (relay.Answer, error) {
		if err := c.Interim("Looking…"); err != nil {
			return relay.Answer{}, err
		}
		peers, err := c.Peers()
		if err != nil {
			return relay.Answer{}, err
		}
		return relay.Answer{Text: fmt.Sprintf("You have %d peers.", len(peers))}, nil
	}, append(settings, relay.Platform(platform.URL()), relay.Workspace(ws.ID, ws.Token))...)
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// Looking…
	// You have 0 peers.
}

// A bounded run, as `connect --once` in CI: it answers everything queued
// and returns a report. The first run registers the workspace with the
// platform, which then queues messages for it.
func ExampleRelay_Once() {
	platform, ws, settings, done := sandbox()
	defer done()
	ctx := context.Background()
	r, err := relay.New(ctx, func(c *relay.Context, m *relay.Message) (relay.Answer, error) {
		return relay.Answer{Text: "You said: " + m.Text}, nil
	}, append(settings, relay.Platform(platform.URL()), relay.Workspace(ws.ID, ws.Token))...)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Once(ctx, 200*time.Millisecond); err != nil {
		log.Fatal(err)
	}
	if st, _, err := platform.SendCanvas(ctx, ws.ID, "hello"); err != nil || st != 200 {
		log.Fatal(st, err)
	}
	rep, err := r.Once(ctx, 200*time.Millisecond)
	if err != nil {
		log.Fatal(err, rep.Failures)
	}
	fmt.Printf("handled %d, replied %d: %s\n", rep.Handled, rep.Replied, platform.Notifications(ws.ID)[0].Message)
	// Output: handled 1, replied 1: You said: hello
}

// sandbox is the platform double with one workspace, and the settings of
// a relay on its own embedded NATS in a fresh store that reads nothing
// from the process's environment; done closes the double and removes the
// store.
func sandbox() (*moleculetest.Server, moleculetest.Workspace, []relay.Option, func()) {
	platform := moleculetest.NewServer()
	ws := platform.CreateWorkspace("my-agent")
	store, err := os.MkdirTemp("", "relay-example-")
	if err != nil {
		log.Fatal(err)
	}
	return platform, ws, []relay.Option{
		relay.Environ(nil),
		relay.Setting("NATS_STORE_DIR", store),
		// A cold start answers the last minute's messages, and polls the
		// double every second.
		relay.Setting("MOLECULE_BACKLOG_WINDOW", "1m"),
		relay.Setting("MOLECULE_POLL_INTERVAL", "1s"),
		relay.Logger(slog.New(slog.DiscardHandler)),
	}, func() { platform.Close(); _ = os.RemoveAll(store) }
}

// canvasUser sends text to the workspace once the relay registered it in
// poll mode, prints every message the canvas gets until one is not an
// interim ("…"), and ends the relay's context.
func canvasUser(ctx context.Context, stop func(), platform *moleculetest.Server, ws, text string) {
	defer stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for platform.Status(ws).DeliveryMode != "poll" {
		if !wait(ctx, tick) {
			return
		}
	}
	if st, body, err := platform.SendCanvas(ctx, ws, text); err != nil || st != 200 {
		fmt.Println("canvas:", st, string(body), err)
		return
	}
	for printed := 0; wait(ctx, tick); {
		for _, n := range platform.Notifications(ws)[printed:] {
			fmt.Println(n.Message)
			printed++
			if !strings.HasSuffix(n.Message, "…") {
				return
			}
		}
	}
}

func wait(ctx context.Context, tick *time.Ticker) bool {
	select {
	case <-ctx.Done():
		return false
	case <-tick.C:
		return true
	}
}
