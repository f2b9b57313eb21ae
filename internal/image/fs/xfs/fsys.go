package xfs

import (
	"fmt"
	"io"
	"strings"

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

// Corruption lists the structures that failed their checksums and were
// read as stored, one line each, when the Checker given to OpenWith is
// lenient; the lines of the layers below that share its log (the
// partition table, the container) are among them. It is empty for a
// strict Checker, whose mismatches are errors.
func (f *FS) Corruption() []string { return f.check.Lines() }

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
// in blocks, each mapping of them starting with an "XSLM" header. A target
// with a NUL byte in it is corrupt, as xfs_repair says.
func (f *FS) linkTarget(n *inode) (string, error) {
	if n.size > maxLinkLen || n.size == 0 {
		return "", fmt.Errorf("symlink %d of %d bytes: %w", n.ino, n.size, ErrCorrupt)
	}
	if n.format == fmtLocal {
		if n.size > int64(len(n.fork)) {
			return "", fmt.Errorf("symlink %d: %d bytes in a %d-byte fork: %w", n.ino, n.size, len(n.fork), ErrCorrupt)
		}
		if strings.IndexByte(string(n.fork[:n.size]), 0) >= 0 {
			return "", fmt.Errorf("symlink %d: a NUL byte in its target: %w", n.ino, ErrCorrupt)
		}
		return string(n.fork[:n.size]), nil
	}
	// Each mapping of the link's blocks is one buffer with one header
	// (xfs_symlink_remote_read), whose CRC covers the buffer.
	space := f.blockSize - symlinkHdrSize
	fsblocks := (n.size + space - 1) / space
	var target []byte
	for lblk := int64(0); lblk < fsblocks && int64(len(target)) < n.size; {
		r, err := f.mapBlock(n, uint64(lblk))
		if err != nil {
			return "", err
		}
		if r.zero {
			return "", fmt.Errorf("symlink %d: hole in the target: %w", n.ino, ErrCorrupt)
		}
		cnt := min(int64(r.length), fsblocks-lblk)
		b := make([]byte, cnt<<f.blockLog)
		at := int64(r.disk) << f.blockLog
		if err := f.readAt(b, at); err != nil {
			return "", fmt.Errorf("symlink %d: %w", n.ino, err)
		}
		if err := f.checkBlockHeader(b, at, symlinkCRCOff, 40, 16, fmt.Sprintf("symlink block %d", r.disk), n.ino); err != nil {
			return "", err
		}
		// xfs_dsymlink_hdr: magic, offset, bytes, crc, uuid, owner, blkno, lsn.
		if string(b[:4]) != "XSLM" {
			return "", fmt.Errorf("symlink %d: block magic %q: %w", n.ino, b[:4], ErrCorrupt)
		}
		off, bytes, owner := int64(be.Uint32(b[4:])), int64(be.Uint32(b[8:])), be.Uint64(b[32:])
		if owner != n.ino || off != int64(len(target)) || bytes == 0 || bytes > int64(len(b))-symlinkHdrSize || off+bytes > n.size {
			return "", fmt.Errorf("symlink %d: block header (offset %d, %d bytes, owner %d): %w", n.ino, off, bytes, owner, ErrCorrupt)
		}
		target = append(target, b[symlinkHdrSize:symlinkHdrSize+bytes]...)
		lblk += cnt
	}
	if int64(len(target)) != n.size {
		return "", fmt.Errorf("symlink %d: %d of its %d bytes stored: %w", n.ino, len(target), n.size, ErrCorrupt)
	}
	if strings.IndexByte(string(target), 0) >= 0 {
		return "", fmt.Errorf("symlink %d: a NUL byte in its target: %w", n.ino, ErrCorrupt)
	}
	return string(target), nil
}

// symlinkHdrSize is the size of the v5 remote symlink block header.
const symlinkHdrSize = 56
