//go:build unix

package relay

import (
	"strings"
	"syscall"
	"testing"
)

// A process started with a low soft RLIMIT_NOFILE (1024 under many
// supervisors, and 10,000 workspaces hold 10,000 streams) raises it
// itself, up to the hard limit; a hard limit too low for the workspaces
// is an error naming the limit and ulimit -n, not "too many open files"
// later.
func TestFileLimitRaisedOrNamed(t *testing.T) {
	var orig syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &orig); err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &orig) })
	if orig.Max < 1000 {
		t.Skipf("hard limit %d", orig.Max)
	}
	low := orig
	low.Cur = 300
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	pool, err := raiseFileLimit(300)
	if err != nil {
		t.Fatal(err)
	}
	var now syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &now); err != nil {
		t.Fatal(err)
	}
	if now.Cur < 2*300+fileLimitSpare || pool < 300 {
		t.Errorf("soft limit %d (hard %d), pool %d after raiseFileLimit(300)", now.Cur, now.Max, pool)
	}

	if orig.Max > 1<<22 {
		t.Skipf("hard limit %d: no workspace count exceeds it", orig.Max)
	}
	_, err = raiseFileLimit(int(orig.Max))
	if err == nil || !strings.Contains(err.Error(), "RLIMIT_NOFILE") || !strings.Contains(err.Error(), "ulimit -n") {
		t.Errorf("%d workspaces with a hard limit of %d: %v", orig.Max, orig.Max, err)
	}
	t.Log(err)
}
