package broker

import (
	"crypto/sha256"
	"encoding/hex"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// Where StoreDir came from (Config.StoreFrom).
const (
	// StoreFromSetting: NATS_STORE_DIR named it.
	StoreFromSetting = "NATS_STORE_DIR"
	// StoreFromStateDir: the per-user state directory (or
	// MOLECULE_STATE_DIR), keyed by the relay's platform and workspaces.
	StoreFromStateDir = "state directory"
	// StoreFromLegacy: the old place, ./.molecule-relay/nats in the
	// working directory, because a store was found there.
	StoreFromLegacy = "working directory (old place)"
	// StoreFromNoHome: no HOME, XDG_STATE_HOME nor MOLECULE_STATE_DIR in
	// the environment, so the working directory, as before.
	StoreFromNoHome = "working directory (no HOME)"
)

// LegacyStoreDir is where the store lived before it followed the user: in
// the working directory, so a relay started from elsewhere found none and
// answered the same messages again (issue 37).
const LegacyStoreDir = ".molecule-relay/nats"

// StoreLocation is the default store of a relay: under the per-user state
// directory, in a folder keyed by the platform's host and the workspace
// ids, so that the same relay's workspaces always find the same store
// from any working directory, and two relays for other workspaces do not
// share one (a store is one process's at a time).
//
// getenv reads MOLECULE_STATE_DIR (the base, replacing the per-user state
// directory), XDG_STATE_HOME and HOME. A store in the old place
// (LegacyStoreDir, relative to the working directory) is used, when the
// new one does not exist yet, so an upgrade loses no cursor.
func StoreLocation(getenv func(string) string, platformURL string, workspaceIDs []string) (dir, from string) {
	base := stateBase(getenv)
	dir = filepath.Join(base, storeKey(platformURL, workspaceIDs), "nats")
	if StoreExists(LegacyStoreDir) && (base == "" || !StoreExists(dir)) {
		abs, err := filepath.Abs(LegacyStoreDir)
		if err != nil {
			abs = LegacyStoreDir
		}
		return abs, StoreFromLegacy
	}
	if base == "" {
		return LegacyStoreDir, StoreFromNoHome
	}
	return dir, StoreFromStateDir
}

// StoreExists reports whether dir holds a JetStream store (a server ran
// on it), not merely whether the folder exists.
func StoreExists(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "jetstream"))
	return err == nil && fi.IsDir()
}

// stateBase is MOLECULE_STATE_DIR, or the user's state directory plus
// "molecule-relay": $XDG_STATE_HOME or ~/.local/state (the XDG base
// directory spec), ~/Library/Application Support on macOS. "" when the
// environment names no home (a bare service environment): the store then
// stays in the working directory, as before.
func stateBase(getenv func(string) string) string {
	if d := getenv("MOLECULE_STATE_DIR"); d != "" {
		return d
	}
	home := getenv("HOME")
	if runtime.GOOS == "darwin" && home != "" {
		return filepath.Join(home, "Library", "Application Support", "molecule-relay")
	}
	if d := getenv("XDG_STATE_HOME"); filepath.IsAbs(d) { // the spec ignores a relative one
		return filepath.Join(d, "molecule-relay")
	}
	if home == "" {
		return ""
	}
	return filepath.Join(home, ".local", "state", "molecule-relay")
}

// storeKey names a relay's store folder: the platform's host, the first
// of the sorted workspace ids (so a person can tell the folders apart)
// and a short hash of the sorted set (so the order they are listed in does
// not matter, and two sets sharing an id do not share a store).
func storeKey(platformURL string, ids []string) string {
	host := "platform"
	if u, err := url.Parse(strings.TrimSpace(platformURL)); err == nil && u.Host != "" {
		host = u.Host
	}
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sum := sha256.Sum256([]byte(strings.Join(sorted, "\n")))
	first := "none"
	if len(sorted) > 0 {
		first = sorted[0]
	}
	return safeName(host) + "-" + safeName(first) + "-" + hex.EncodeToString(sum[:])[:8]
}

// safeName keeps letters, digits, '.', '-' and '_' of s: a folder name on
// every system (a port's ':' is not one on Windows).
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
			return r
		}
		return '_'
	}, s)
}
