//go:build linux

package lazyfs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// file is an open backing file whose writes and truncates are recorded
// until a sync. It holds the loopback's handle as a field, not embedded:
// the loopback's handle offers the kernel FUSE passthrough, which would
// send writes to the backing file without lazyfs seeing them.
type file struct {
	lf   *fs.LoopbackFile
	fd   int
	sync bool // opened O_SYNC or O_DSYNC: every write is durable at once
	lfs  *FS
}

var (
	_ fs.FileReader    = (*file)(nil)
	_ fs.FileWriter    = (*file)(nil)
	_ fs.FileFsyncer   = (*file)(nil)
	_ fs.FileFlusher   = (*file)(nil)
	_ fs.FileReleaser  = (*file)(nil)
	_ fs.FileGetattrer = (*file)(nil)
	_ fs.FileSetattrer = (*file)(nil)
	_ fs.FileLseeker   = (*file)(nil)
)

// newFile wraps the loopback's handle, applying the O_TRUNC the loopback
// was not given (so that it is recorded). Every open is direct I/O: the
// kernel keeps no page cache of its own that a cut would not reach.
func (l *FS) newFile(fh fs.FileHandle, flags uint32) (*file, uint32, syscall.Errno) {
	lf := fh.(*fs.LoopbackFile)
	fd, _ := lf.PassthroughFd()
	f := &file{lf: lf, fd: fd, sync: flags&syncFlags != 0, lfs: l}
	if flags&syscall.O_TRUNC != 0 {
		if errno := f.truncate(0); errno != 0 {
			lf.Release(context.Background())
			return nil, 0, errno
		}
	}
	return f, fuse.FOPEN_DIRECT_IO, 0
}

func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return f.lf.Read(ctx, buf, off)
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f.lfs.mu.Lock()
	defer f.lfs.mu.Unlock()
	if !f.sync {
		if err := f.lfs.willWrite(f.fd, off, len(data)); err != nil {
			return 0, fs.ToErrno(err)
		}
	}
	n, errno := f.lf.Write(ctx, data, off)
	if f.sync {
		if err := f.lfs.forgetLocked(f.fd); err != nil {
			return n, fs.ToErrno(err)
		}
	}
	return n, errno
}

// Fsync (and fdatasync) makes the file's writes durable: lazyfs forgets
// them. The backing file is not fsynced: its directory is scratch, and
// durability is the model's.
func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return fs.ToErrno(f.lfs.synced(f.fd))
}

func (f *file) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		if errno := f.truncate(int64(size)); errno != 0 {
			return errno
		}
		in.Valid &^= fuse.FATTR_SIZE
	}
	return f.lf.Setattr(ctx, in, out)
}

// truncate records what the truncate drops, then truncates.
func (f *file) truncate(size int64) syscall.Errno {
	f.lfs.mu.Lock()
	defer f.lfs.mu.Unlock()
	if err := f.lfs.willTruncate(f.fd, size); err != nil {
		return fs.ToErrno(err)
	}
	return fs.ToErrno(syscall.Ftruncate(f.fd, size))
}

func (f *file) Flush(ctx context.Context) syscall.Errno   { return f.lf.Flush(ctx) }
func (f *file) Release(ctx context.Context) syscall.Errno { return f.lf.Release(ctx) }
func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return f.lf.Getattr(ctx, out)
}
func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return f.lf.Lseek(ctx, off, whence)
}
