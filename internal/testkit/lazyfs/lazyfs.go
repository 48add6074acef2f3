//go:build linux

// Package lazyfs is a FUSE filesystem for power-loss tests, after LazyFS
// (the filesystem Jepsen used to cut the power under NATS 2.12.1): a
// loopback over a backing directory whose file data is durable only once
// the file is fsynced. Cut drops every write not synced since, as a power
// cut drops the page cache.
//
// Writes go through to the backing file at once, so every reader sees
// them; what makes them unsynced is an undo log kept per file (by inode):
// the bytes each write or truncate replaced, and the size at the last
// sync. fsync or fdatasync of the file (or a write on a file opened
// O_SYNC or O_DSYNC) forgets the log; Cut plays it back, newest first,
// and sets the size back, so the backing directory and every open handle
// hold what was last synced.
//
// Metadata (create, mkdir, rename, link, unlink, chmod) is applied to the
// backing directory at once and survives a cut, as if every directory
// were fsynced at once; only a file's contents and size roll back. A file
// created and never synced therefore survives a cut empty, and a file
// renamed over another keeps its own synced contents (a new file renamed
// into place without a sync comes back empty, as on a filesystem without
// ext4's auto_da_alloc). docs/powerloss.md says what this leaves out.
package lazyfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is a mounted lazyfs. Its methods are safe for concurrent use.
type FS struct {
	backing    string
	mountpoint string
	server     *fuse.Server

	mu    sync.Mutex
	dirty map[fileID]*undoLog
}

// fileID names a backing file by its inode, which a rename keeps.
type fileID struct{ dev, ino uint64 }

// undoLog is what Cut needs to bring one file back to its last sync.
type undoLog struct {
	fd      int      // the backing file, read-write, open until Cut or the sync
	size    int64    // at the last sync
	before  []extent // bytes replaced since, oldest first
	written int64    // bytes written since the last sync (for CutReport)
}

type extent struct {
	off  int64
	data []byte
}

// Unavailable says why FUSE cannot be mounted here (nil if it can): no
// /dev/fuse, neither root (a direct mount(2)) nor fusermount3, or a trial
// mount that fails (a container without the right to mount). The answer
// is worked out once per process.
func Unavailable() error {
	probeOnce.Do(func() { probeErr = probe() })
	return probeErr
}

var (
	probeOnce sync.Once
	probeErr  error
)

func probe() error {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("lazyfs: no FUSE on this machine: %w", err)
	}
	f.Close()
	if os.Geteuid() != 0 && !hasFusermount() {
		return errors.New("lazyfs: not root and no fusermount3 in PATH (apt-get install fuse3)")
	}
	dir, err := os.MkdirTemp("", "lazyfs-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	backing, mnt := filepath.Join(dir, "b"), filepath.Join(dir, "m")
	if err := errors.Join(os.Mkdir(backing, 0o700), os.Mkdir(mnt, 0o700)); err != nil {
		return err
	}
	l, err := Mount(backing, mnt)
	if err != nil {
		return fmt.Errorf("lazyfs: FUSE does not mount here: %w", err)
	}
	return l.Unmount()
}

func hasFusermount() bool {
	for _, bin := range []string{"fusermount3", "fusermount"} {
		if _, err := exec.LookPath(bin); err == nil {
			return true
		}
	}
	return false
}

// Mount mounts a lazyfs of backing on mountpoint (both existing
// directories). Unmount it when done.
func Mount(backing, mountpoint string) (*FS, error) {
	backing, err := filepath.Abs(backing)
	if err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		return nil, fmt.Errorf("lazyfs: backing directory: %w", err)
	}
	lfs := &FS{backing: backing, mountpoint: mountpoint, dirty: map[fileID]*undoLog{}}
	loop := &fs.LoopbackRoot{Path: backing, Dev: uint64(st.Dev)}
	root := &node{LoopbackNode: &fs.LoopbackNode{RootData: loop}, lfs: lfs}
	loop.RootNode = root
	// No kernel caching of attributes or names: after a cut the next
	// stat must see the rolled-back size (file data bypasses the page
	// cache: every open is direct I/O).
	var zero time.Duration
	srv, err := fs.Mount(mountpoint, root, &fs.Options{
		EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{FsName: "lazyfs", Name: "lazyfs", DirectMount: true},
	})
	if err != nil {
		return nil, fmt.Errorf("lazyfs: mount %s: %w", mountpoint, err)
	}
	lfs.server = srv
	return lfs, nil
}

// Dir is the mount point.
func (l *FS) Dir() string { return l.mountpoint }

// Unmount unmounts the filesystem; unsynced writes stay in the backing
// directory (Cut first to drop them).
func (l *FS) Unmount() error {
	err := l.server.Unmount()
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, u := range l.dirty {
		syscall.Close(u.fd)
		delete(l.dirty, id)
	}
	return err
}

// Cut is the power cut: every write and truncate not synced since is
// undone, newest first. Kill the processes using the mount first: a
// write that lands after Cut is a write after the power came back.
func (l *FS) Cut() (CutReport, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var rep CutReport
	var errs []error
	for id, u := range l.dirty {
		rep.Files++
		rep.Bytes += u.written
		rep.Paths = append(rep.Paths, l.pathOf(u.fd))
		errs = append(errs, u.rollBack())
		syscall.Close(u.fd)
		delete(l.dirty, id)
	}
	return rep, errors.Join(errs...)
}

// pathOf is where fd's file is, relative to the mount point.
func (l *FS) pathOf(fd int) string {
	p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil || strings.HasSuffix(p, " (deleted)") {
		return ""
	}
	rel, err := filepath.Rel(l.backing, p)
	if err != nil {
		return ""
	}
	return rel
}

func (u *undoLog) rollBack() error {
	for i := len(u.before) - 1; i >= 0; i-- {
		e := u.before[i]
		if _, err := syscall.Pwrite(u.fd, e.data, e.off); err != nil {
			return fmt.Errorf("lazyfs: cut: restore %d bytes at %d: %w", len(e.data), e.off, err)
		}
	}
	if err := syscall.Ftruncate(u.fd, u.size); err != nil {
		return fmt.Errorf("lazyfs: cut: truncate to %d: %w", u.size, err)
	}
	return nil
}

// logFor returns fd's undo log, starting one at the file's present
// (synced) state. Call with l.mu held.
func (l *FS) logFor(fd int) (*undoLog, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, err
	}
	id := fileID{uint64(st.Dev), st.Ino}
	if u := l.dirty[id]; u != nil {
		return u, nil
	}
	// Opened anew, read-write: fd may be write-only, and the log must
	// read what a write replaces.
	rw, err := syscall.Open(fmt.Sprintf("/proc/self/fd/%d", fd), syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	u := &undoLog{fd: rw, size: st.Size}
	l.dirty[id] = u
	return u, nil
}

// willWrite records what a write of n bytes at off replaces: the bytes
// of the synced size it covers. Call with l.mu held.
func (l *FS) willWrite(fd int, off int64, n int) error {
	u, err := l.logFor(fd)
	if err != nil {
		return err
	}
	u.written += int64(n)
	return u.save(off, min(off+int64(n), u.size))
}

// willTruncate records what truncating fd to size drops. Call with l.mu
// held.
func (l *FS) willTruncate(fd int, size int64) error {
	u, err := l.logFor(fd)
	if err != nil {
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	return u.save(size, min(st.Size, u.size))
}

// save keeps the backing bytes [from, to) as they are now.
func (u *undoLog) save(from, to int64) error {
	if from >= to {
		return nil
	}
	buf := make([]byte, to-from)
	n, err := syscall.Pread(u.fd, buf, from)
	if err != nil {
		return err
	}
	u.before = append(u.before, extent{off: from, data: buf[:n]})
	return nil
}

// synced forgets fd's undo log: what the file holds now is durable.
func (l *FS) synced(fd int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.forgetLocked(fd)
}

// forgetLocked is synced with l.mu held.
func (l *FS) forgetLocked(fd int) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	id := fileID{uint64(st.Dev), st.Ino}
	if u := l.dirty[id]; u != nil {
		syscall.Close(u.fd)
		delete(l.dirty, id)
	}
	return nil
}
