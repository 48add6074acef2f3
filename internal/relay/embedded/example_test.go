package embedded_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/broker"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	"github.com/molecule-ai/molecule-relay/internal/relay/embedded" // NATS in the process
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// Imported for its side effect, the package gives a relay configured
// without NATS_URL its own NATS server: JetStream on NATS_STORE_DIR,
// listening on 127.0.0.1 only. Without the import, such a relay refuses
// to start and asks for NATS_URL.
func Example() {
	platform := moleculetest.NewServer()
	defer platform.Close()
	ws := platform.CreateWorkspace("my-agent")
	store, err := os.MkdirTemp("", "embedded-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(store)

	cfg, err := relay.LoadConfig(nil, []string{
		"MOLECULE_PLATFORM_URL=" + platform.URL(), "MOLECULE_WORKSPACE_ID=" + ws.ID, "MOLECULE_WORKSPACE_TOKEN=" + ws.Token,
		"NATS_STORE_DIR=" + store, // no NATS_URL
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, err := relay.Open(ctx, cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()
	fmt.Println("NATS on loopback:", strings.HasPrefix(rt.Conn.URL(), "nats://127.0.0.1:"))
	// Output: NATS on loopback: true
}

// A process that runs the embedded server publishes it in its store, so
// another process given the same NATS_STORE_DIR (the CLI's status, dlq
// and history; the console) reaches it through NATS_URL instead of
// opening a store it cannot have.
func ExampleRunning() {
	store, err := os.MkdirTemp("", "embedded-running-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(store)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	relayConn, err := broker.Connect(ctx, broker.Config{StoreDir: store}, nil) // the running relay
	if err != nil {
		log.Fatal(err)
	}

	url, ok, err := embedded.Running(store) // another process, same store
	if err != nil || !ok {
		log.Fatal("no relay runs on ", store, err)
	}
	inspector, err := broker.Connect(ctx, broker.Config{URL: url}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reached the running relay's server:", inspector.NC.ConnectedUrl() == url)
	inspector.Close()

	relayConn.Close()
	_, ok, _ = embedded.Running(store)
	fmt.Println("after its stop:", ok)
	// Output:
	// reached the running relay's server: true
	// after its stop: false
}
