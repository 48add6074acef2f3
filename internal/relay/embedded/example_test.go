package embedded_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/relay"
	_ "github.com/molecule-ai/molecule-relay/internal/relay/embedded" // NATS in the process
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

	cfg, err := config.Load(nil, []string{
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
