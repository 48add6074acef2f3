//go:build linux

package lazyfs

import (
	"context"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is go-fuse's loopback node with lazyfs's file handles. Everything
// else (lookups and every metadata operation) is the loopback's,
// applied to the backing directory at once.
type node struct {
	*fs.LoopbackNode
	lfs *FS
}

var (
	_ fs.NodeWrapChilder    = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
)

// WrapChild makes every node the loopback creates a lazyfs node.
func (n *node) WrapChild(ctx context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), lfs: n.lfs}
}

// syncFlags make every write durable at once; lazyfs models them instead
// of passing them to the backing file.
const syncFlags = syscall.O_SYNC | syscall.O_DSYNC

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, _, errno := n.LoopbackNode.Open(ctx, flags&^(syscall.O_TRUNC|syncFlags))
	if errno != 0 {
		return nil, 0, errno
	}
	return n.lfs.newFile(fh, flags)
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ino, fh, _, errno := n.LoopbackNode.Create(ctx, name, flags&^(syscall.O_TRUNC|syncFlags), mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	f, fuseFlags, errno := n.lfs.newFile(fh, flags)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if flags&syscall.O_TRUNC != 0 {
		out.Size = 0
	}
	return ino, f, fuseFlags, 0
}

// Setattr records a truncate made by path (truncate(2)); one made on an
// open file goes through file.Setattr.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok && f == nil {
		fd, err := syscall.Open(filepath.Join(n.RootData.Path, n.Path(n.Root())), syscall.O_RDWR|syscall.O_CLOEXEC, 0)
		if err != nil {
			return fs.ToErrno(err)
		}
		defer syscall.Close(fd)
		n.lfs.mu.Lock()
		defer n.lfs.mu.Unlock()
		if err := n.lfs.willTruncate(fd, int64(size)); err != nil {
			return fs.ToErrno(err)
		}
	}
	return n.LoopbackNode.Setattr(ctx, f, in, out)
}

// CopyFileRange is refused so that the kernel copies through Read and
// Write, which lazyfs records.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}
