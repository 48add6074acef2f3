//go:build unix

package handler

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// setProcessGroup starts the program as the leader of a new process group
// and makes the context's cancellation kill the whole group, so a shell
// script's children die with it.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return killGroup(cmd) }
}

// killGroup sends SIGKILL to the program's process group. The group id is
// the leader's pid, which the kernel does not hand out again while the
// group has members, so a call right after the leader was reaped reaches
// its leftover descendants, or nobody (ESRCH).
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}
