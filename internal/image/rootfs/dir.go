package rootfs

import (
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
)

// Dir is a Source over a host directory holding an unpacked image root.
//
// On Linux it keeps a bounded cache of directory file descriptors opened
// with openat2(2) and RESOLVE_IN_ROOT, and answers each call with one *at(2)
// system call relative to the entry's parent: the kernel itself keeps every
// lookup inside the directory, even for a name that somehow reached it
// unresolved or a tree that changed underneath. Where openat2 is missing
// (kernels before 5.6, other systems) it falls back to os.Root, which
// gives the same guarantee at the cost of re-walking every component.
// Either way the view above it never asks it to follow a link.
//
// A Dir is safe for concurrent use.
type Dir struct {
	root *os.Root
	// fast is the openat2 implementation; nil means the os.Root fallback.
	fast *dirFDs
}

// OpenDir opens the directory dir as a Source. It fails if dir is missing,
// unreadable or not a directory.
func OpenDir(dir string) (*Dir, error) { return openDir(dir, true) }

// openDir opens dir, using openat2 when fast is set and the kernel has it.
func openDir(dir string, fast bool) (*Dir, error) {
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
	d := &Dir{root: r}
	if fast {
		// Any failure (ENOSYS on an old kernel, EPERM under a seccomp
		// filter that predates openat2) leaves the os.Root fallback.
		if x, err := openFDs(dir); err == nil {
			d.fast = x
		}
	}
	return d, nil
}

// Close releases the directory.
func (d *Dir) Close() error {
	if d.fast != nil {
		d.fast.close()
	}
	return d.root.Close()
}

// Open opens a name that is not a link.
func (d *Dir) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if d.fast != nil {
		return d.fast.open(name)
	}
	return OpenIn(d.root, name)
}

// ReadDir lists a directory without following links in its entries, sorted
// by name.
func (d *Dir) ReadDir(name string) ([]fs.DirEntry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrInvalid}
	}
	if d.fast != nil {
		return d.fast.readDir(name)
	}
	ents, err := ReadDirIn(d.root, name)
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, err
}

// OpenIn opens name (an io/fs name, not a link) under root for reading,
// as the openat2 path does: a regular file or a directory, nothing else.
// A device node in an image names a host device, and a FIFO would block a
// read forever; O_NONBLOCK keeps the open itself from blocking on one.
func OpenIn(root *os.Root, name string) (*os.File, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if t := fi.Mode().Type(); t != 0 && t != fs.ModeDir {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	return f, nil
}

// ReadDirIn lists the directory name under root in readdir order, entries
// typed as lstat sees them; anything but a directory is ENOTDIR, opened
// without blocking and never read.
func ReadDirIn(root *os.Root, name string) ([]fs.DirEntry, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.IsDir() {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: syscall.ENOTDIR}
	}
	ents, err := f.ReadDir(-1)
	if err != nil {
		return ents, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	return ents, nil
}

// ReadFile reads a regular file, at most MaxReadFile bytes of it either way.
func (d *Dir) ReadFile(name string) ([]byte, error) {
	if d.fast != nil {
		if !fs.ValidPath(name) {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
		}
		return d.fast.readFile(name)
	}
	return readFileBounded(d, name, name)
}

// Lstat describes an entry without following it.
func (d *Dir) Lstat(name string) (fs.FileInfo, error) {
	if d.fast != nil {
		if !fs.ValidPath(name) {
			return nil, &fs.PathError{Op: "lstat", Path: name, Err: fs.ErrInvalid}
		}
		return d.fast.lstat(name)
	}
	return d.root.Lstat(name)
}

// ReadLink returns a link's target as stored.
func (d *Dir) ReadLink(name string) (string, error) {
	if d.fast != nil {
		if !fs.ValidPath(name) {
			return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
		}
		return d.fast.readLink(name)
	}
	return d.root.Readlink(name)
}
