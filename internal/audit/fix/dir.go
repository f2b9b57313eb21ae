package fix

import (
	"fmt"
	"io/fs"
	"os"
)

// Dir is a rootfs.Source over an unpacked image directory that lists
// directories in the order the kernel returns their entries (readdir(3)
// order), as systemctl walks them. Where a removal depends on the order of
// the walk (a link to a link that is removed first), planning over Dir
// gives exactly what systemctl does to that directory. It never follows a
// link and never writes.
type Dir struct {
	root *os.Root
	fsys fs.FS
}

// OpenDir opens the image directory dir.
func OpenDir(dir string) (*Dir, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open image directory: %w", err)
	}
	return &Dir{root: r, fsys: r.FS()}, nil
}

// Close releases the directory.
func (d *Dir) Close() error { return d.root.Close() }

// Open opens a name that is not a link.
func (d *Dir) Open(name string) (fs.File, error) { return d.fsys.Open(name) }

// ReadDir lists a directory in readdir order, entries typed as lstat sees them.
func (d *Dir) ReadDir(name string) ([]fs.DirEntry, error) {
	f, err := d.root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	return ents, nil
}

// Lstat describes an entry without following it.
func (d *Dir) Lstat(name string) (fs.FileInfo, error) { return d.root.Lstat(name) }

// ReadLink returns a link's target as stored.
func (d *Dir) ReadLink(name string) (string, error) { return d.root.Readlink(name) }
