package boot

import (
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// RunDir is the image's /run: at boot PID 1 mounts a fresh, empty tmpfs
// there before it loads a single unit, so nothing an image ships under it
// (units or .wants links under /run/systemd/system, generator output, a
// /var/run link into it) takes part in the boot.
const RunDir = "run"

// atBoot is an image as PID 1 sees it when it loads units at boot: the
// image itself, with an empty directory at /run, or one holding only the
// output of the generators the model runs (gen, nil when none wrote).
type atBoot struct {
	src rootfs.Source
	gen *genOut
}

// underRun reports whether name is /run or below it.
func underRun(name string) bool { return name == RunDir || strings.HasPrefix(name, RunDir+"/") }

func notExist(op, name string) error {
	return &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
}

// Open opens name; /run is an empty directory.
func (a atBoot) Open(name string) (fs.File, error) {
	switch {
	case a.gen != nil && underRun(name):
		return a.gen.open(name)
	case name == RunDir:
		return emptyDir{}, nil
	case underRun(name):
		return nil, notExist("open", name)
	}
	return a.src.Open(name)
}

// Lstat describes name; /run is an empty directory.
func (a atBoot) Lstat(name string) (fs.FileInfo, error) {
	switch {
	case a.gen != nil && underRun(name):
		return a.gen.lstat(name)
	case name == RunDir:
		return emptyDir{}, nil
	case underRun(name):
		return nil, notExist("lstat", name)
	}
	return a.src.Lstat(name)
}

// ReadLink reads the link name; /run is no link.
func (a atBoot) ReadLink(name string) (string, error) {
	switch {
	case a.gen != nil && underRun(name):
		return a.gen.readLink(name)
	case name == RunDir:
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	case underRun(name):
		return "", notExist("readlink", name)
	}
	return a.src.ReadLink(name)
}

// ReadDir lists name; /run is empty.
func (a atBoot) ReadDir(name string) ([]fs.DirEntry, error) {
	switch {
	case a.gen != nil && underRun(name):
		return a.gen.readDir(name)
	case name == RunDir:
		return nil, nil
	case underRun(name):
		return nil, notExist("readdir", name)
	}
	return a.src.ReadDir(name)
}

// ReadFile reads name with the source's own bounded reader, when it has
// one.
func (a atBoot) ReadFile(name string) ([]byte, error) {
	if a.gen != nil && underRun(name) {
		return a.gen.readFile(name)
	}
	if underRun(name) {
		return nil, notExist("open", name)
	}
	if rf, ok := a.src.(fs.ReadFileFS); ok {
		return rf.ReadFile(name)
	}
	f, err := a.src.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, rootfs.MaxReadFile+1))
	if err == nil && len(b) > rootfs.MaxReadFile {
		err = &fs.PathError{Op: "read", Path: name, Err: rootfs.ErrTooLarge}
	}
	return b, err
}

// emptyDir is the fresh tmpfs at /run, as a file and its information.
type emptyDir struct{}

func (emptyDir) Name() string                 { return RunDir }
func (emptyDir) Size() int64                  { return 0 }
func (emptyDir) Mode() fs.FileMode            { return fs.ModeDir | 0o755 }
func (emptyDir) ModTime() time.Time           { return time.Time{} }
func (emptyDir) IsDir() bool                  { return true }
func (emptyDir) Sys() any                     { return nil }
func (e emptyDir) Stat() (fs.FileInfo, error) { return e, nil }
func (emptyDir) Read([]byte) (int, error)     { return 0, io.EOF }
func (emptyDir) Close() error                 { return nil }
func (emptyDir) ReadDir(int) ([]fs.DirEntry, error) {
	return nil, nil
}
