package fix

import (
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// overlay is the image tree as it will be once the planned changes are
// applied: a Source over the unchanged image with entries removed and
// links, directories and drop-in files added. Planning reads it exactly as systemctl reads
// the tree it is changing, so a later step sees what an earlier one did.
type overlay struct {
	base    rootfs.Source
	removed map[string]bool   // names (resolved) that no longer exist
	links   map[string]string // added symlinks: name -> target
	dirs    map[string]bool   // added directories
	files   map[string]string // added or rewritten regular files: name -> content
	// The image does not change while a plan is computed: its answers
	// are cached. The model reads concurrently (as every source allows);
	// mu guards the caches. The planned changes are made between reads.
	mu             sync.Mutex
	cachedLstat    map[string]lstatResult
	cachedReadLink map[string]linkResult
}

type lstatResult struct {
	fi  fs.FileInfo
	err error
}

type linkResult struct {
	target string
	err    error
}

func newOverlay(base rootfs.Source) *overlay {
	return &overlay{base: base, removed: map[string]bool{}, links: map[string]string{}, dirs: map[string]bool{}, files: map[string]string{},
		cachedLstat: map[string]lstatResult{}, cachedReadLink: map[string]linkResult{}}
}

func (o *overlay) remove(name string) {
	o.removed[name] = true
	delete(o.links, name)
	delete(o.dirs, name)
	delete(o.files, name)
}

func (o *overlay) addFile(name, content string) {
	delete(o.removed, name)
	o.files[name] = content
}

func (o *overlay) addLink(name, target string) {
	delete(o.removed, name)
	o.links[name] = target
}

func (o *overlay) addDir(name string) {
	delete(o.removed, name)
	o.dirs[name] = true
}

// gone reports whether name or one of its parents was removed.
func (o *overlay) gone(name string) bool {
	for n := name; n != "." && n != ""; n = path.Dir(n) {
		if o.removed[n] {
			return true
		}
	}
	return false
}

func notExist(op, name string) error {
	return &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
}

// Open opens a file as it will be: a drop-in the plan writes, or the
// image's.
func (o *overlay) Open(name string) (fs.File, error) {
	if c, ok := o.files[name]; ok {
		return &memFile{Reader: strings.NewReader(c), info: synthetic{name: path.Base(name), mode: 0o644, size: int64(len(c))}}, nil
	}
	if o.gone(name) {
		return nil, notExist("open", name)
	}
	return o.base.Open(name)
}

// memFile is a file the plan writes, read back from memory.
type memFile struct {
	*strings.Reader
	info synthetic
}

func (f *memFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *memFile) Close() error               { return nil }

// Lstat describes an entry as it will be.
func (o *overlay) Lstat(name string) (fs.FileInfo, error) {
	if t, ok := o.links[name]; ok {
		return synthetic{name: path.Base(name), mode: fs.ModeSymlink | 0o777, size: int64(len(t))}, nil
	}
	if o.dirs[name] {
		return synthetic{name: path.Base(name), mode: fs.ModeDir | 0o755}, nil
	}
	if c, ok := o.files[name]; ok {
		return synthetic{name: path.Base(name), mode: 0o644, size: int64(len(c))}, nil
	}
	if o.gone(name) {
		return nil, notExist("lstat", name)
	}
	o.mu.Lock()
	r, ok := o.cachedLstat[name]
	o.mu.Unlock()
	if !ok {
		r.fi, r.err = o.base.Lstat(name)
		o.mu.Lock()
		o.cachedLstat[name] = r
		o.mu.Unlock()
	}
	return r.fi, r.err
}

// ReadLink returns a link's target as it will be.
func (o *overlay) ReadLink(name string) (string, error) {
	if t, ok := o.links[name]; ok {
		return t, nil
	}
	if o.gone(name) {
		return "", notExist("readlink", name)
	}
	o.mu.Lock()
	r, ok := o.cachedReadLink[name]
	o.mu.Unlock()
	if !ok {
		r.target, r.err = o.base.ReadLink(name)
		o.mu.Lock()
		o.cachedReadLink[name] = r
		o.mu.Unlock()
	}
	return r.target, r.err
}

// ReadDir lists a directory as it will be: the image's entries in the
// image's order without the removed ones, then the added ones by name.
func (o *overlay) ReadDir(name string) ([]fs.DirEntry, error) {
	var out []fs.DirEntry
	if !o.dirs[name] {
		if o.gone(name) {
			return nil, notExist("readdir", name)
		}
		ents, err := o.base.ReadDir(name)
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			n := join(name, e.Name())
			if o.removed[n] {
				continue
			}
			if _, ok := o.links[n]; ok {
				continue
			}
			if o.dirs[n] {
				continue
			}
			if _, ok := o.files[n]; ok {
				continue
			}
			out = append(out, e)
		}
	}
	var added []fs.DirEntry
	for n := range o.links {
		if path.Dir(n) == name || (name == "." && !strings.Contains(n, "/")) {
			fi, _ := o.Lstat(n)
			added = append(added, fs.FileInfoToDirEntry(fi))
		}
	}
	for n := range o.dirs {
		if path.Dir(n) == name || (name == "." && !strings.Contains(n, "/")) {
			fi, _ := o.Lstat(n)
			added = append(added, fs.FileInfoToDirEntry(fi))
		}
	}
	for n := range o.files {
		if path.Dir(n) == name || (name == "." && !strings.Contains(n, "/")) {
			fi, _ := o.Lstat(n)
			added = append(added, fs.FileInfoToDirEntry(fi))
		}
	}
	slices.SortFunc(added, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return append(out, added...), nil
}

// join joins an io/fs directory name and an entry name.
func join(dir, name string) string {
	if dir == "." {
		return name
	}
	return dir + "/" + name
}

// synthetic describes an entry a plan adds.
type synthetic struct {
	name string
	mode fs.FileMode
	size int64
}

func (s synthetic) Name() string       { return s.name }
func (s synthetic) Size() int64        { return s.size }
func (s synthetic) Mode() fs.FileMode  { return s.mode }
func (s synthetic) ModTime() time.Time { return time.Time{} }
func (s synthetic) IsDir() bool        { return s.mode.IsDir() }
func (s synthetic) Sys() any           { return nil }
