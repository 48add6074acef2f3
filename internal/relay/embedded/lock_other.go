//go:build !unix

package embedded

// lockStore is a no-op where flock is not available: there, nothing stops
// two processes from sharing one NATS_STORE_DIR, so do not.
func lockStore(dir string) (release func(), err error) { return func() {}, nil }

// storeHeld cannot tell a live holder from a dead one without flock: a
// running file is taken at its word.
func storeHeld(dir string) (bool, error) { return true, nil }

// StoreHolder cannot tell where flock is not available: never held.
func StoreHolder(dir string) (pid string, held bool, err error) { return "", false, nil }
