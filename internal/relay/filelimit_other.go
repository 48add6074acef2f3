//go:build !unix

package relay

// raiseFileLimit: no RLIMIT_NOFILE here; every workspace may keep a
// pooled connection.
func raiseFileLimit(n int) (pool int, err error) { return n, nil }
