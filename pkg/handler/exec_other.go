//go:build !unix

package handler

import "os/exec"

// setProcessGroup is a no-op where process groups are not available: the
// context's cancellation kills the program only, not its children.
func setProcessGroup(*exec.Cmd) {}

// killGroup is a no-op where process groups are not available.
func killGroup(*exec.Cmd) error { return nil }
