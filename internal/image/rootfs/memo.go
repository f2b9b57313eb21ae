package rootfs

import (
	"io/fs"
	"slices"
	"sync"
	"sync/atomic"
)

// Memo returns a view of the same source that asks the source each
// question once: the lstat of a name, a link's target, a directory's
// listing and a file's contents are remembered, so the unit model, the
// facts and the fix of one run, which walk the same unit directories and
// resolve the same paths through the same links, never stat or read a
// name twice. It is for one run over an image that does not change while
// the view is in use (a writer makes a new view afterwards). Open, which
// streams, is not remembered. Safe for concurrent use when the source is.
func (f *FS) Memo() *FS {
	if f.memo != nil {
		return f
	}
	return &FS{src: f.src, remote: f.remote, disk: f.disk, memo: &memo{
		lstats: map[string]memoStat{}, links: map[string]memoLink{},
		dirs: map[string]memoDir{}, files: map[string]memoFile{},
	}}
}

type memo struct {
	mu     sync.Mutex
	lstats map[string]memoStat
	links  map[string]memoLink
	dirs   map[string]memoDir
	files  map[string]memoFile
}

type memoStat struct {
	fi  fs.FileInfo
	err error
}

type memoLink struct {
	target string
	err    error
}

type memoDir struct {
	ents []fs.DirEntry
	err  error
}

type memoFile struct {
	data []byte
	err  error
}

// remember returns m[name], computing it with get (outside the lock: a
// slow source is not serialized) the first time.
func remember[V any](mu *sync.Mutex, m map[string]V, name string, get func() V) V {
	mu.Lock()
	v, ok := m[name]
	mu.Unlock()
	if ok {
		return v
	}
	v = get()
	mu.Lock()
	m[name] = v
	mu.Unlock()
	return v
}

func (f *FS) lstat(name string) (fs.FileInfo, error) {
	if f.memo == nil {
		return f.src.Lstat(name)
	}
	r := remember(&f.memo.mu, f.memo.lstats, name, func() memoStat {
		fi, err := f.src.Lstat(name)
		return memoStat{fi, err}
	})
	return r.fi, r.err
}

func (f *FS) readLink(name string) (string, error) {
	if f.memo == nil {
		return f.src.ReadLink(name)
	}
	r := remember(&f.memo.mu, f.memo.links, name, func() memoLink {
		t, err := f.src.ReadLink(name)
		return memoLink{t, err}
	})
	return r.target, r.err
}

// readDir lists the resolved directory name; the caller owns the slice.
func (f *FS) readDir(name string) ([]fs.DirEntry, error) {
	if f.memo == nil {
		return f.src.ReadDir(name)
	}
	r := remember(&f.memo.mu, f.memo.dirs, name, func() memoDir {
		ents, err := f.src.ReadDir(name)
		return memoDir{ents, err}
	})
	return slices.Clone(r.ents), r.err
}

// readFile reads the resolved file name whole (errors say shown); the
// caller owns the bytes.
func (f *FS) readFile(name, shown string) ([]byte, error) {
	read := func() ([]byte, error) {
		if rf, ok := f.src.(fs.ReadFileFS); ok {
			return rf.ReadFile(name)
		}
		return readFileBounded(f.src, name, shown)
	}
	if f.memo == nil {
		return read()
	}
	r := remember(&f.memo.mu, f.memo.files, name, func() memoFile {
		b, err := read()
		return memoFile{b, err}
	})
	return slices.Clone(r.data), r.err
}

// Raw is the source under the view, for a reader that resolves names
// itself (install's index, which follows links as systemctl does). Under a
// view that remembers (Memo) it answers from the same memory as the view:
// what the enablement, the boot model and the facts of one run ask by the
// same resolved name is asked of the image once. Its ReadFile is bounded
// as the view's (ErrTooLarge).
func (f *FS) Raw() Source {
	if f.memo == nil {
		return f.src
	}
	return memoSource{f}
}

// memoSource is the source of a remembering view, answering from its
// memory. Open, which streams, is the source's own.
type memoSource struct{ f *FS }

func (m memoSource) Open(name string) (fs.File, error) { return m.f.src.Open(name) }

func (m memoSource) ReadDir(name string) ([]fs.DirEntry, error) { return m.f.readDir(name) }

func (m memoSource) ReadLink(name string) (string, error) { return m.f.readLink(name) }

func (m memoSource) Lstat(name string) (fs.FileInfo, error) { return m.f.lstat(name) }

// ReadFile reads name whole, as the view's ReadFile reads a resolved name.
func (m memoSource) ReadFile(name string) ([]byte, error) { return m.f.readFile(name, name) }

// IsRaw reports whether src is the Raw source of a remembering view.
func IsRaw(src Source) bool {
	_, ok := src.(memoSource)
	return ok
}

// InFlight is how many names a reader of a view works on at once when it
// reads many independent ones (ForEach): enough for a remote image's round
// trips to overlap (its block reader has as many fetches in flight), and
// cheap on a local one, where the work is CPU on every core.
const InFlight = 16

// ForEach calls f(0) ... f(n-1), InFlight at a time, and returns when all
// have returned; f must be safe for concurrent use.
func ForEach(n int, f func(int)) {
	ForEachOn(InFlight, n, func(_, i int) { f(i) })
}

// ForEachOn calls f(w, 0) ... f(w, n-1) on workers goroutines, w being the
// goroutine's number (0 to workers-1, so a worker can reuse state of its
// own from call to call), and returns when all have returned.
func ForEachOn(workers, n int, f func(w, i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range min(workers, n) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(w, i)
			}
		})
	}
	wg.Wait()
}
