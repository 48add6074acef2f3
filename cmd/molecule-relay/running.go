package main

import (
	"fmt"
	"log/slog"

	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/relay/embedded"
)

// reachRunning points an inspection command (status, dlq, history) at the
// embedded server of the relay that runs on the same store (connect, mcp,
// a stage command), which that relay publishes in its store: the store
// itself is that relay's alone while it runs. Without one, the command
// starts its own server on the store, as before; with NATS_URL (a
// cluster) it changes nothing.
func reachRunning(cfg *config.Config, log *slog.Logger) error {
	if !cfg.NATS.Embedded() {
		return nil
	}
	url, ok, err := embedded.Running(cfg.NATS.StoreDir)
	if err != nil {
		return fmt.Errorf("NATS_STORE_DIR %q: %w", cfg.NATS.StoreDir, err)
	}
	if ok {
		log.Debug("reaching the relay running on this store", "store_dir", cfg.NATS.StoreDir, "url", url)
		cfg.NATS.URL = url
	}
	return nil
}
