package rootfs

import (
	"fmt"
	"io/fs"
	"os"
)

// Dir is a Source over a host directory holding an unpacked image root. It
// is built on os.Root, so even a name that somehow reached it unresolved
// could not leave the directory; the view above it never asks it to follow
// a link.
type Dir struct {
	root *os.Root
	fsys fs.FS
}

// OpenDir opens the directory dir as a Source. It fails if dir is missing,
// unreadable or not a directory.
func OpenDir(dir string) (*Dir, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("open image directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("open image directory: %w", &fs.PathError{Op: "open", Path: dir, Err: ErrNotDir})
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open image directory: %w", err)
	}
	if _, err := r.FS().(fs.ReadDirFS).ReadDir("."); err != nil {
		r.Close()
		return nil, fmt.Errorf("open image directory: %w", err)
	}
	return &Dir{root: r, fsys: r.FS()}, nil
}

// Close releases the directory.
func (d *Dir) Close() error { return d.root.Close() }

// Open opens a name that is not a link.
func (d *Dir) Open(name string) (fs.File, error) { return d.fsys.Open(name) }

// ReadDir lists a directory without following links in its entries.
func (d *Dir) ReadDir(name string) ([]fs.DirEntry, error) {
	return fs.ReadDir(d.fsys, name)
}

// ReadFile reads a regular file.
func (d *Dir) ReadFile(name string) ([]byte, error) { return fs.ReadFile(d.fsys, name) }

// Lstat describes an entry without following it.
func (d *Dir) Lstat(name string) (fs.FileInfo, error) { return d.root.Lstat(name) }

// ReadLink returns a link's target as stored.
func (d *Dir) ReadLink(name string) (string, error) { return d.root.Readlink(name) }
