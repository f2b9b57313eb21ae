package boot

import (
	"io"
	"io/fs"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// RunDir is the image's /run: at boot PID 1 mounts a fresh, empty tmpfs
// there before it loads a single unit, so nothing an image ships under it
// (units or .wants links under /run/systemd/system, generator output, a
// /var/run link into it) takes part in the boot.
const RunDir = "run"

// atBoot is an image as PID 1 sees it when it loads units at boot: the
// image itself, with /run replaced by run, the tmpfs: empty (newGenOut),
// or holding the output of the generators the model runs.
type atBoot struct {
	src rootfs.Source
	run *genOut
}

// underRun reports whether name is /run or below it.
func underRun(name string) bool { return name == RunDir || strings.HasPrefix(name, RunDir+"/") }

func notExist(op, name string) error {
	return &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
}

// Open opens name, under /run from the tmpfs.
func (a atBoot) Open(name string) (fs.File, error) {
	if underRun(name) {
		return a.run.open(name)
	}
	return a.src.Open(name)
}

// Lstat describes name, under /run from the tmpfs.
func (a atBoot) Lstat(name string) (fs.FileInfo, error) {
	if underRun(name) {
		return a.run.lstat(name)
	}
	return a.src.Lstat(name)
}

// ReadLink reads the link name, under /run from the tmpfs.
func (a atBoot) ReadLink(name string) (string, error) {
	if underRun(name) {
		return a.run.readLink(name)
	}
	return a.src.ReadLink(name)
}

// ReadDir lists name, under /run from the tmpfs.
func (a atBoot) ReadDir(name string) ([]fs.DirEntry, error) {
	if underRun(name) {
		return a.run.readDir(name)
	}
	return a.src.ReadDir(name)
}

// ReadFile reads name with the source's own bounded reader, when it has
// one.
func (a atBoot) ReadFile(name string) ([]byte, error) {
	if underRun(name) {
		return a.run.readFile(name)
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
