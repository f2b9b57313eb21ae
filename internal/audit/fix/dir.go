package fix

import (
	"fmt"
	"io/fs"
	"os"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// Dir is a rootfs.Source over an unpacked image directory that lists
// directories in the order the kernel returns their entries (readdir(3)
// order), as systemctl walks them. Where a removal depends on the order of
// the walk (a link to a link that is removed first), planning over Dir
// gives exactly what systemctl does to that directory. It never follows a
// link and never writes.
type Dir struct {
	root *os.Root
}

// OpenDir opens the image directory dir.
func OpenDir(dir string) (*Dir, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open image directory: %w", err)
	}
	return &Dir{root: r}, nil
}

// Close releases the directory.
func (d *Dir) Close() error { return d.root.Close() }

// Open opens a name that is not a link, for reading. As rootfs.Dir, it
// refuses anything but a regular file or a directory (rootfs.OpenIn): a
// device node in an image names a host device, and a FIFO would block.
func (d *Dir) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	return rootfs.OpenIn(d.root, name)
}

// ReadDir lists a directory in readdir order, entries typed as lstat sees
// them; anything else is ENOTDIR, never opened for reading.
func (d *Dir) ReadDir(name string) ([]fs.DirEntry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrInvalid}
	}
	return rootfs.ReadDirIn(d.root, name)
}

// Lstat describes an entry without following it.
func (d *Dir) Lstat(name string) (fs.FileInfo, error) { return d.root.Lstat(name) }

// ReadLink returns a link's target as stored.
func (d *Dir) ReadLink(name string) (string, error) { return d.root.Readlink(name) }
