//go:build unix

package handler

import (
	"errors"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// setProcessGroup starts the program as the leader of a new process group
// and makes the context's end (a timeout, or the sender's tasks/cancel)
// stop the whole group, so a shell script's children stop with it: first
// SIGTERM, so the program can clean up, then SIGKILL after grace if it
// is still running. The returned stop, called once Wait returned, ends
// the wait for the grace.
func setProcessGroup(cmd *exec.Cmd, grace time.Duration) (stop func()) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var mu sync.Mutex
	var kill *time.Timer
	exited := false
	cmd.Cancel = func() error {
		err := signalGroup(cmd, syscall.SIGTERM)
		mu.Lock()
		if !exited {
			kill = time.AfterFunc(grace, func() { _ = killGroup(cmd) })
		}
		mu.Unlock()
		return err
	}
	return func() {
		mu.Lock()
		exited = true
		if kill != nil {
			kill.Stop()
		}
		mu.Unlock()
	}
}

// killGroup sends SIGKILL to the program's process group.
func killGroup(cmd *exec.Cmd) error { return signalGroup(cmd, syscall.SIGKILL) }

// signalGroup sends sig to the program's process group. The group id is
// the leader's pid, which the kernel does not hand out again while the
// group has members, so a call right after the leader was reaped reaches
// its leftover descendants, or nobody (ESRCH).
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}
