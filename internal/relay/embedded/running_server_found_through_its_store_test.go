package embedded_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/broker"
	"github.com/molecule-ai/molecule-relay/internal/relay/embedded"
)

// A process that runs the embedded server publishes how to reach it in
// the store (mode 0600, no credentials: the server has none), Running
// finds it there, and a clean stop removes it. A running file whose
// process is gone (the store's lock free) is stale: Running says so
// instead of sending a caller to a dead or reused port.
func TestRunningServerFoundThroughItsStore(t *testing.T) {
	store := t.TempDir()
	if url, ok, err := embedded.Running(store); ok || err != nil {
		t.Fatalf("Running on an unused store = %q %v %v", url, ok, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := broker.Connect(ctx, broker.Config{StoreDir: store}, nil)
	if err != nil {
		t.Fatal(err)
	}
	url, ok, err := embedded.Running(store)
	if !ok || err != nil || url != conn.URL() {
		t.Fatalf("Running while the server runs = %q %v %v, want %q", url, ok, err, conn.URL())
	}
	file := filepath.Join(store, "molecule-relay.server.json")
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("running file %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	other, err := broker.Connect(ctx, broker.Config{URL: url}, nil)
	if err != nil {
		t.Fatalf("connect to the published URL: %v", err)
	}
	other.Close()

	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("running file outlived a clean stop: %v", err)
	}
	if _, ok, _ := embedded.Running(store); ok {
		t.Error("Running after a clean stop says a server runs")
	}
	// What a killed process leaves: its file, and a lock nobody holds.
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if url, ok, err := embedded.Running(store); ok || err != nil {
		t.Errorf("Running with a dead holder's file = %q %v %v, want not running", url, ok, err)
	}
	// The next start takes the store (the probe above gave the lock back).
	again, err := broker.Connect(ctx, broker.Config{StoreDir: store}, nil)
	if err != nil {
		t.Fatalf("start after a stale running file: %v", err)
	}
	defer again.Close()
	if url, ok, _ := embedded.Running(store); !ok || url != again.URL() {
		t.Errorf("Running after the restart = %q %v, want the new server %q", url, ok, again.URL())
	}
}
