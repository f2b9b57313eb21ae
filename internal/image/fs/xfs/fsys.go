package xfs

import (
	"fmt"
	"io"

	"github.com/amilint/amilint/internal/image/fs/inodefs"
	"github.com/amilint/amilint/internal/image/rootfs"
)

var _ rootfs.Source = (*FS)(nil)

// inodes is the io/fs view of the filesystem's inodes; FS embeds it for
// its Open, ReadDir, ReadFile, Lstat and ReadLink.
type inodes = inodefs.FS[*inode]

// MaxReadFile is the most ReadFile reads of an XFS file; Open streams any size.
const MaxReadFile = inodefs.MaxReadFile

// ErrTooLarge reports a ReadFile of a file over MaxReadFile bytes.
var ErrTooLarge = inodefs.ErrTooLarge

// maxLinkLen bounds a symbolic link's target, as PATH_MAX does.
const maxLinkLen = 4096

// disk is the filesystem as inodefs reads it.
type disk struct{ f *FS }

func (d disk) Root() uint64                               { return d.f.rootIno }
func (d disk) Inode(ino uint64) (*inode, error)           { return d.f.inode(ino) }
func (d disk) Dirents(n *inode) ([]inodefs.Dirent, error) { return d.f.readDirents(n) }
func (d disk) Symlink(n *inode) (string, error)           { return d.f.linkTarget(n) }
func (d disk) Attr(n *inode) inodefs.Attr                 { return n.attr() }
func (d disk) Contents(n *inode) (io.ReaderAt, error)     { return content{f: d.f, n: n}, nil }

// content reads a regular file's contents.
type content struct {
	f *FS
	n *inode
}

func (c content) ReadAt(p []byte, off int64) (int, error) {
	got, err := c.f.readFile(c.n, p, off)
	if err == nil && got < len(p) {
		err = io.EOF
	}
	return got, err
}

// linkTarget reads a symlink's target: local in the data fork, or remote
// in blocks that each start with an "XSLM" header.
func (f *FS) linkTarget(n *inode) (string, error) {
	if n.size > maxLinkLen || n.size == 0 {
		return "", fmt.Errorf("symlink %d of %d bytes: %w", n.ino, n.size, ErrCorrupt)
	}
	if n.format == fmtLocal {
		if n.size > int64(len(n.fork)) {
			return "", fmt.Errorf("symlink %d: %d bytes in a %d-byte fork: %w", n.ino, n.size, len(n.fork), ErrCorrupt)
		}
		return string(n.fork[:n.size]), nil
	}
	var target []byte
	for lblk := uint64(0); int64(len(target)) < n.size; lblk++ {
		if lblk > uint64(maxLinkLen) {
			return "", fmt.Errorf("symlink %d: too many blocks: %w", n.ino, ErrCorrupt)
		}
		r, err := f.mapBlock(n, lblk)
		if err != nil {
			return "", err
		}
		if r.zero {
			return "", fmt.Errorf("symlink %d: hole in the target: %w", n.ino, ErrCorrupt)
		}
		b := make([]byte, f.blockSize)
		if err := f.readAt(b, int64(r.disk)<<f.blockLog); err != nil {
			return "", fmt.Errorf("symlink %d: %w", n.ino, err)
		}
		// xfs_dsymlink_hdr: magic, offset, bytes, crc, uuid, owner, blkno, lsn.
		if string(b[:4]) != "XSLM" {
			return "", fmt.Errorf("symlink %d: block magic %q: %w", n.ino, b[:4], ErrCorrupt)
		}
		off, cnt, owner := int64(be.Uint32(b[4:])), int64(be.Uint32(b[8:])), be.Uint64(b[32:])
		if owner != n.ino || off != int64(len(target)) || cnt == 0 || cnt > f.blockSize-symlinkHdrSize || off+cnt > n.size {
			return "", fmt.Errorf("symlink %d: block header (offset %d, %d bytes, owner %d): %w", n.ino, off, cnt, owner, ErrCorrupt)
		}
		target = append(target, b[symlinkHdrSize:symlinkHdrSize+cnt]...)
	}
	return string(target), nil
}

// symlinkHdrSize is the size of the v5 remote symlink block header.
const symlinkHdrSize = 56
