package facts

import (
	"io/fs"
	"path"
	"strings"
	"sync"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// resolver answers "is NAME a regular file, and where does it resolve"
// for many names in few directories (ExecStart= lookups along a search
// path, EnvironmentFile=), resolving each directory once per Build instead
// of walking every component of every name again.
type resolver struct {
	fsys *rootfs.FS
	mu   sync.Mutex
	dirs map[string]string // directory name -> resolved name, "" if not a directory
}

func newResolver(fsys *rootfs.FS) *resolver {
	return &resolver{fsys: fsys, dirs: map[string]string{}}
}

// regular reports whether the io/fs name resolves, inside the image, to a
// regular file, and the name it resolves to.
func (r *resolver) regular(name string) (string, bool) {
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	if base == "" || base == "." || base == ".." {
		return "", false
	}
	r.mu.Lock()
	rd, ok := r.dirs[dir]
	r.mu.Unlock()
	if !ok {
		rd = r.resolveDir(dir)
		r.mu.Lock()
		r.dirs[dir] = rd
		r.mu.Unlock()
	}
	if rd == "" {
		return "", false
	}
	leaf := base
	if rd != "." {
		leaf = rd + "/" + base
	}
	fi, err := r.fsys.Lstat(leaf)
	if err != nil {
		return "", false
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		// Rare: follow the link through the view, as a full lookup would.
		res, err := r.fsys.Resolve(leaf)
		if err != nil || res == rootfs.NullName {
			return "", false
		}
		fi, err := r.fsys.Lstat(res)
		if err != nil || !fi.Mode().IsRegular() {
			return "", false
		}
		return res, true
	}
	return leaf, fi.Mode().IsRegular()
}

func (r *resolver) resolveDir(dir string) string {
	if dir == "." {
		return "."
	}
	res, err := r.fsys.Resolve(dir)
	if err != nil || res == rootfs.NullName {
		return ""
	}
	fi, err := r.fsys.Lstat(res)
	if err != nil || !fi.IsDir() {
		return ""
	}
	return res
}
