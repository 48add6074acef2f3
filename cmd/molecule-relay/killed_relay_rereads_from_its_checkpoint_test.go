package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A long-running relay writes its checkpoint on the feed while it runs
// (MOLECULE_CHECKPOINT_EVERY), not only at a clean stop: killed, and its
// store then rolled back to an older copy (a power cut that dropped the
// unsynced writes, a restored backup), the next start finds its cursor
// behind the feed's checkpoint, re-reads from the checkpoint and answers
// each message once. Before (issue 37) the 3 messages the killed relay had
// answered were answered again.
func TestKilledRelayReReadsFromItsCheckpointAndAnswersOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a relay process")
	}
	w := newStoreWorld(t, "MOLECULE_CHECKPOINT_EVERY=1s")
	t.Chdir(t.TempDir())
	w.connect(3)
	store := w.store()
	older := filepath.Join(t.TempDir(), "nats")
	copyDir(t, store, older)

	c := startChild(t, append(w.environ, "MOLECULE_LOG_LEVEL=info"), "connect")
	c.waitLog(t, "embedded nats-server started", 20*time.Second)
	w.send(3)
	waitUntil(t, func() bool { return w.answered() == len(w.sent) })
	// A checkpoint after the last answer on the feed covers it: it is
	// written only once nothing is in flight.
	waitUntil(t, func() bool { return checkpointAfterLastAnswer(w) })
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	c.wait(t, 10*time.Second)

	if err := os.RemoveAll(store); err != nil {
		t.Fatal(err)
	}
	copyDir(t, older, store)
	w.send(2)
	w.connect(0)
	w.expectOnce("killed after a checkpoint, its store rolled back")
}

func checkpointAfterLastAnswer(w *storeWorld) bool {
	lastAnswer, lastCheckpoint := -1, -1
	for i, r := range w.srv.Rows(w.ws.ID) {
		var row struct {
			Method string `json:"method"`
		}
		_ = json.Unmarshal(r, &row)
		switch row.Method {
		case "notify":
			lastAnswer = i
		case "molecule-relay/checkpoint":
			lastCheckpoint = i
		}
	}
	return lastAnswer >= 0 && lastCheckpoint > lastAnswer
}
