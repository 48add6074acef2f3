package embedded_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/broker"
	"github.com/molecule-ai/molecule-relay/internal/relay/embedded"
)

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
