//go:build unix

package relay

import (
	"fmt"
	"syscall"
)

// fileLimitSpare is what the process holds besides the platform's
// connections: the embedded NATS server's store files and clients, the
// metrics, console and agent API listeners, handler pipes.
const fileLimitSpare = 256

// raiseFileLimit makes room for n workspaces' open files: each holds its
// event stream's connection, and the shared pool keeps up to one idle
// connection per workspace more. It raises the soft RLIMIT_NOFILE to the
// hard limit where the soft one is smaller than that (Go's os package does
// so at start since Go 1.19, but not under every supervisor, and a parent
// may lower it again), and returns how many pooled connections fit
// besides the streams. A hard limit that holds not even the streams is an
// error naming it and ulimit -n: the relay would otherwise start and then
// fail streams and polls at random with "too many open files".
func raiseFileLimit(n int) (pool int, err error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return n, nil // unknown: leave it to the system
	}
	want := uint64(2*n + fileLimitSpare)
	if lim.Cur < want && lim.Cur < lim.Max {
		raised := lim
		raised.Cur = min(want, lim.Max)
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised) == nil {
			lim = raised
		}
	}
	streams := uint64(n + fileLimitSpare)
	if lim.Cur < streams {
		return 0, fmt.Errorf("%d workspaces need at least %d open files (one event stream each, and %d for the rest), "+
			"and this process may open %d (RLIMIT_NOFILE, hard limit %d): raise the limit (ulimit -n %d before starting it, "+
			"LimitNOFILE=%d in a systemd unit, or ulimits in a container), or configure fewer workspaces per process",
			n, streams, fileLimitSpare, lim.Cur, lim.Max, want, want)
	}
	// Not capped at n: one workspace still wants a pool as wide as the
	// stages' concurrency (platformHTTPClients caps it to that).
	return int(lim.Cur - streams), nil
}
