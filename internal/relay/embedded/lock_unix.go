//go:build unix

package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/broker"
)

// lockName is the file in the store directory that one process holds
// locked while its embedded server uses the store.
const lockName = "molecule-relay.lock"

// lockStore takes an exclusive, non-blocking lock on dir: nats-server
// itself takes none, and two servers writing one file store corrupt it.
// The lock dies with the process (a SIGKILL frees it), so no stale lock
// ever needs clearing by hand. The file holds the holder's pid, for the
// error message.
func lockStore(dir string) (release func(), err error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock file %q: %w", path, err)
	}
	if err := flockSoon(f); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: store %q, pid %s: stop it; or, for other workspaces, give this one its own NATS_STORE_DIR; or share one NATS server through NATS_URL, with one MOLECULE_POLLER_GROUP for the same workspaces (two relays with their own stores on one workspace answer every message twice)",
				broker.ErrStoreLocked, dir, strings.TrimSpace(string(holder)))
		}
		return nil, fmt.Errorf("lock %q: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() { f.Close() }, nil
}

// StoreHolder says whether a process holds dir's store lock now, and the
// pid the lock file names, without creating anything or keeping a lock:
// a shared lock is tried and dropped at once (molecule-relay doctor).
func StoreHolder(dir string) (pid string, held bool, err error) {
	f, err := os.Open(filepath.Join(dir, lockName))
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	b, _ := os.ReadFile(f.Name())
	pid = strings.TrimSpace(string(b))
	switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return pid, true, nil
	case err != nil:
		return pid, false, err
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return pid, false, nil
}

// probeWait is how long lockStore keeps trying a lock held for a moment:
// StoreHolder (Running, doctor) takes it shared for microseconds to test
// it, and a relay starting then must not take that for another holder.
const probeWait = 20 * time.Millisecond

// flockSoon takes f's exclusive lock, trying again for probeWait while
// it is held.
func flockSoon(f *os.File) error {
	deadline := time.Now().Add(probeWait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Millisecond)
	}
}

// storeHeld reports whether a live process holds dir's lock
// (StoreHolder's probe).
func storeHeld(dir string) (bool, error) {
	_, held, err := StoreHolder(dir)
	return held, err
}
