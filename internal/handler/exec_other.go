//go:build !unix

package handler

import (
	"os/exec"
	"time"
)

// setProcessGroup is a no-op where process groups are not available: the
// context's cancellation kills the program only, not its children, and
// at once (no SIGTERM first).
func setProcessGroup(*exec.Cmd, time.Duration) (stop func()) { return func() {} }

// killGroup is a no-op where process groups are not available.
func killGroup(*exec.Cmd) error { return nil }
