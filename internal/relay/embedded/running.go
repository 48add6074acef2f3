package embedded

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// runningName is the file in the store directory through which a process
// running the embedded server says how to reach it: the CLI's inspection
// commands (status, dlq, history) and the console connect there instead of
// starting a server of their own on a store they cannot have. It is
// written once the server is ready, mode 0600, and removed when the server
// stops; one left by a killed process is told apart by the store's lock,
// which died with that process.
const runningName = "molecule-relay.server.json"

// running is what runningName holds. The embedded server takes no
// credentials (it listens on 127.0.0.1 only), so there are none here.
type running struct {
	URL     string    `json:"url"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
}

// Running reports whether a process runs the embedded server on storeDir
// (as NATS_STORE_DIR resolves it) and, if so, the server's client URL. ok
// is false when no server was published there, or when the process that
// published it is gone (killed without a clean stop). err is set only when
// the store cannot be read.
func Running(storeDir string) (url string, ok bool, err error) {
	r, err := readRunning(storeDir)
	if err != nil || r == nil {
		return "", false, err
	}
	held, err := storeHeld(storeDir)
	if err != nil || !held {
		return "", false, err
	}
	return r.URL, true, nil
}

func readRunning(dir string) (*running, error) {
	data, err := os.ReadFile(filepath.Join(dir, runningName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	var r running
	if err := json.Unmarshal(data, &r); err != nil || r.URL == "" {
		// A torn or foreign file: nobody to reach through it.
		return nil, nil
	}
	return &r, nil
}

// publishRunning writes the running file for url, atomically (a reader
// never sees half of it).
func publishRunning(dir, url string) error {
	data, err := json.Marshal(running{URL: url, PID: os.Getpid(), Started: time.Now().UTC()})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, runningName+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails once renamed
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, runningName)) // CreateTemp made it 0600
}

// removeRunning removes the running file (a stale one too).
func removeRunning(dir string) { _ = os.Remove(filepath.Join(dir, runningName)) }
