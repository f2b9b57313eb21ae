package ext4

import (
	"fmt"
	"io"
	"strings"

	"github.com/amilint/amilint/internal/image/fs/inodefs"
	"github.com/amilint/amilint/internal/image/rootfs"
)

var _ rootfs.Source = (*FS)(nil)

// inodes is the io/fs view of the filesystem's inodes; FS embeds it for its
// Open, ReadDir, ReadFile, Lstat and ReadLink.
type inodes = inodefs.FS[*inode]

// MaxReadFile is the most ReadFile reads of an ext4 file; Open streams any size.
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

func (d disk) Root() uint64                               { return rootIno }
func (d disk) Inode(ino uint64) (*inode, error)           { return d.f.inode(ino) }
func (d disk) Dirents(n *inode) ([]inodefs.Dirent, error) { return d.f.readDirents(n) }
func (d disk) Symlink(n *inode) (string, error)           { return d.f.linkTarget(n) }
func (d disk) Attr(n *inode) inodefs.Attr                 { return n.attr() }
func (d disk) Contents(n *inode) (io.ReaderAt, error)     { return d.f.contents(n) }

// contents returns regular file n's contents; inline data is read now.
func (f *FS) contents(n *inode) (io.ReaderAt, error) {
	c := content{f: f, n: n}
	if n.flags&flagInlineData != 0 {
		var err error
		if c.inline, err = f.inlineData(n); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// content reads a regular file's contents.
type content struct {
	f      *FS
	n      *inode
	inline []byte
}

func (c content) ReadAt(p []byte, off int64) (int, error) {
	got, err := c.f.readFile(c.n, c.inline, p, off)
	if err == nil && got < len(p) {
		err = io.EOF
	}
	return got, err
}

// linkTarget reads a symlink's target: inline data, a fast symlink in
// i_block (under 60 bytes, no extents), or data blocks. A target with a NUL
// byte in it is corrupt, as e2fsck says (the kernel would read it only up
// to the NUL: another target than the one stored).
func (f *FS) linkTarget(n *inode) (string, error) {
	t, err := f.rawLinkTarget(n)
	if err != nil {
		return "", err
	}
	if strings.IndexByte(t, 0) >= 0 {
		return "", fmt.Errorf("symlink %d: a NUL byte in its target: %w", n.ino, ErrCorrupt)
	}
	return t, nil
}

func (f *FS) rawLinkTarget(n *inode) (string, error) {
	if n.size > maxLinkLen {
		return "", fmt.Errorf("symlink %d of %d bytes: %w", n.ino, n.size, ErrCorrupt)
	}
	if n.flags&flagEncrypt != 0 {
		return "", fmt.Errorf("symlink %d is encrypted: %w", n.ino, ErrUnsupported)
	}
	switch {
	case n.flags&flagInlineData != 0:
		data, err := f.inlineData(n)
		if err != nil {
			return "", err
		}
		return string(data[:n.size]), nil
	case n.flags&flagExtents == 0 && n.size < iBlockLen:
		return string(n.block[:n.size]), nil
	}
	buf := make([]byte, n.size)
	got, err := f.readFile(n, nil, buf, 0)
	if err != nil {
		return "", err
	}
	return string(buf[:got]), nil
}
