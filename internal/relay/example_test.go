package relay_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/relay"
	_ "github.com/molecule-ai/molecule-relay/internal/relay/embedded" // NATS in the process
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// A relay in-process: configured as `molecule-relay connect` is (here the
// echo handler, against the platform double), its three stages run until
// the context ends.
func Example() {
	platform := moleculetest.NewServer() // a real tenant URL in production
	defer platform.Close()
	ws := platform.CreateWorkspace("my-agent")
	store, err := os.MkdirTemp("", "relay-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(store)

	cfg, err := relay.LoadConfig(nil, []string{
		"MOLECULE_PLATFORM_URL=" + platform.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
		"MOLECULE_HANDLER=echo", "MOLECULE_POLL_INTERVAL=1s", "MOLECULE_BACKLOG_WINDOW=1m", "NATS_STORE_DIR=" + store,
	})
	if err == nil {
		err = cfg.Validate(relay.NeedPlatform | relay.NeedHandler)
	}
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt, err := relay.Open(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx, relay.All) }()

	// The platform queues a message once the relay registered the
	// workspace in poll mode; the canvas user then sees the answer.
	for platform.Status(ws.ID).DeliveryMode != "poll" && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	if st, _, err := platform.SendCanvas(ctx, ws.ID, "hello"); err != nil || st != 200 {
		log.Fatal(st, err)
	}
	for len(platform.Notifications(ws.ID)) == 0 && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range platform.Notifications(ws.ID) {
		fmt.Println(n.Message)
	}
	cancel()
	<-done
	// Output: echo: hello
}
