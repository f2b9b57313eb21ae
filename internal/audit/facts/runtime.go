package facts

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// runtimeDir is where systemd keeps its runtime state and configuration:
// units and links from `systemctl --runtime`, generator output, transient
// units. A tmpfs replaces /run at every boot.
const runtimeDir = "run/systemd"

// Bounds of the walk under runtimeDir: what is listed, and what is read.
const (
	maxRuntimeFiles   = 200
	maxRuntimeEntries = 10000
	maxRuntimeDepth   = 8
)

// runtimeFiles lists the files and links the image ships under
// /run/systemd, sorted, at most maxRuntimeFiles of them. Directories
// alone (the empty ones debootstrap leaves) are not listed. It fails only
// on an I/O error of the image.
func runtimeFiles(fsys *rootfs.FS) ([]string, error) {
	out := []string{}
	visited := 0
	var walk func(dir string, depth int) error
	walk = func(dir string, depth int) error {
		ents, err := fsys.ReadDir(dir)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, rootfs.ErrNotDir) ||
				errors.Is(err, rootfs.ErrMasked) || errors.Is(err, rootfs.ErrTooManyLinks) || errors.Is(err, fs.ErrInvalid) {
				return nil
			}
			return fmt.Errorf("read /%s: %w", dir, err)
		}
		for _, e := range ents {
			if visited++; visited > maxRuntimeEntries || len(out) >= maxRuntimeFiles {
				return nil
			}
			p := dir + "/" + e.Name()
			if e.IsDir() {
				if depth < maxRuntimeDepth {
					if err := walk(p, depth+1); err != nil {
						return err
					}
				}
				continue
			}
			out = append(out, "/"+p)
		}
		return nil
	}
	if err := walk(runtimeDir, 1); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}
