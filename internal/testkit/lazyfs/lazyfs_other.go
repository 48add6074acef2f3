//go:build !linux

package lazyfs

import "errors"

var errNotLinux = errors.New("lazyfs: Linux only (FUSE through /dev/fuse)")

// FS is a mounted lazyfs; on this system none can be mounted.
type FS struct{}

// Unavailable says why FUSE cannot be mounted here.
func Unavailable() error { return errNotLinux }

// Mount fails on this system.
func Mount(backing, mountpoint string) (*FS, error) { return nil, errNotLinux }

// Dir is the mount point.
func (l *FS) Dir() string { return "" }

// Cut fails on this system.
func (l *FS) Cut() (CutReport, error) { return CutReport{}, errNotLinux }

// Unmount fails on this system.
func (l *FS) Unmount() error { return errNotLinux }
