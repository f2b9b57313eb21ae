package rootfs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// counting counts the questions asked of a Source, by operation and name.
type counting struct {
	rootfs.Source
	mu sync.Mutex
	n  map[string]int
}

func (c *counting) count(op, name string) {
	c.mu.Lock()
	c.n[op+" "+name]++
	c.mu.Unlock()
}

func (c *counting) Lstat(name string) (fs.FileInfo, error) {
	c.count("lstat", name)
	return c.Source.Lstat(name)
}

func (c *counting) ReadLink(name string) (string, error) {
	c.count("readlink", name)
	return c.Source.ReadLink(name)
}

func (c *counting) ReadDir(name string) ([]fs.DirEntry, error) {
	c.count("readdir", name)
	return c.Source.ReadDir(name)
}

func (c *counting) Open(name string) (fs.File, error) {
	c.count("open", name)
	return c.Source.Open(name)
}

// TestMemoAsksOnce: a remembering view asks its source each question
// once, answers as the plain view does, and hands out copies.
func TestMemoAsksOnce(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "lib/systemd/system"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lib/systemd/system/a.service"), []byte("[Service]\n"), 0o644))
	require.NoError(t, os.Symlink("/lib/systemd/system/a.service", filepath.Join(dir, "lib/systemd/system/b.service")))
	require.NoError(t, os.Symlink("/dev/null", filepath.Join(dir, "lib/systemd/system/m.service")))
	src, err := rootfs.OpenDir(dir)
	require.NoError(t, err)
	defer src.Close()
	c := &counting{Source: src, n: map[string]int{}}
	plain, memo := rootfs.New(src), rootfs.New(c).Memo()
	assert.Same(t, memo, memo.Memo(), "a remembering view is shared as it is")
	for range 3 {
		for _, name := range []string{"lib/systemd/system/a.service", "lib/systemd/system/b.service", "lib/systemd/system/m.service", "lib/systemd/system/none.service"} {
			want, werr := plain.ReadFile(name)
			got, gerr := memo.ReadFile(name)
			assert.Equal(t, want, got, name)
			assert.Equal(t, werr == nil, gerr == nil, name)
			wfi, werr := plain.Lstat(name)
			gfi, gerr := memo.Lstat(name)
			assert.Equal(t, werr == nil, gerr == nil, name)
			if werr == nil {
				assert.Equal(t, wfi.Mode(), gfi.Mode(), name)
			}
		}
		want, err := plain.ReadDir("lib/systemd/system")
		require.NoError(t, err)
		got, err := memo.ReadDir("lib/systemd/system")
		require.NoError(t, err)
		require.Len(t, got, len(want))
		got[0] = nil // the caller owns its copy
		b, err := memo.ReadFile("lib/systemd/system/a.service")
		require.NoError(t, err)
		b[0] = 'X'
	}
	again, err := memo.ReadDir("lib/systemd/system")
	require.NoError(t, err)
	assert.NotNil(t, again[0])
	b, err := memo.ReadFile("lib/systemd/system/b.service")
	require.NoError(t, err)
	assert.Equal(t, "[Service]\n", string(b))
	for q, n := range c.n {
		assert.Equal(t, 1, n, "%s asked %d times", q, n)
	}
	assert.NotZero(t, c.n["lstat lib/systemd/system/b.service"])
}

// TestRawSharesTheMemo: the raw source of a remembering view answers from
// the view's memory (what either asks is asked of the source once) and as
// the source does; that of a plain view is the source itself.
func TestRawSharesTheMemo(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "lib/systemd/system"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lib/systemd/system/a.service"), []byte("[Service]\n"), 0o644))
	require.NoError(t, os.Symlink("a.service", filepath.Join(dir, "lib/systemd/system/b.service")))
	src, err := rootfs.OpenDir(dir)
	require.NoError(t, err)
	defer src.Close()
	assert.Same(t, src, rootfs.New(src).Raw().(*rootfs.Dir))
	assert.False(t, rootfs.IsRaw(src))

	c := &counting{Source: src, n: map[string]int{}}
	view := rootfs.New(c).Memo()
	raw := view.Raw()
	assert.True(t, rootfs.IsRaw(raw))
	const a, b, d = "lib/systemd/system/a.service", "lib/systemd/system/b.service", "lib/systemd/system"
	for range 2 {
		data, err := raw.(fs.ReadFileFS).ReadFile(a)
		require.NoError(t, err)
		assert.Equal(t, "[Service]\n", string(data))
		data[0] = 'X' // the caller owns its copy
		data, err = view.ReadFile(a)
		require.NoError(t, err)
		assert.Equal(t, "[Service]\n", string(data))
		target, err := raw.ReadLink(b)
		require.NoError(t, err)
		assert.Equal(t, "a.service", target)
		_, err = view.ReadLink(b)
		require.NoError(t, err)
		fi, err := raw.Lstat(b)
		require.NoError(t, err)
		assert.Equal(t, fs.ModeSymlink, fi.Mode().Type())
		ents, err := raw.ReadDir(d)
		require.NoError(t, err)
		assert.Len(t, ents, 2)
		_, err = view.ReadDir(d)
		require.NoError(t, err)
		_, err = raw.Lstat("lib/none")
		assert.ErrorIs(t, err, fs.ErrNotExist)
	}
	for q, n := range c.n {
		assert.Equal(t, 1, n, "%s asked %d times", q, n)
	}
	assert.Equal(t, 1, c.n["readdir "+d])
	assert.Equal(t, 1, c.n["readlink "+b])
}

func TestForEach(t *testing.T) {
	for _, n := range []int{0, 1, rootfs.InFlight - 1, rootfs.InFlight, 10 * rootfs.InFlight} {
		var mu sync.Mutex
		calls := map[int]int{}
		var running, most atomic.Int64
		rootfs.ForEach(n, func(i int) {
			now := running.Add(1)
			for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
			}
			mu.Lock()
			calls[i]++
			mu.Unlock()
			running.Add(-1)
		})
		assert.Len(t, calls, n, "every index once")
		for i, c := range calls {
			assert.Equal(t, 1, c, "index %d", i)
			assert.True(t, i >= 0 && i < n)
		}
		assert.LessOrEqual(t, most.Load(), int64(rootfs.InFlight))
	}
}

// TestForEachOn: every index once, on at most workers goroutines, and a
// worker's number is never in use by two calls at once (its state is its
// own).
func TestForEachOn(t *testing.T) {
	for _, workers := range []int{1, 2, 5} {
		const n = 200
		var calls [n]atomic.Int32
		inUse := make([]atomic.Bool, workers)
		rootfs.ForEachOn(workers, n, func(w, i int) {
			require.True(t, w >= 0 && w < workers, "worker %d", w)
			assert.True(t, inUse[w].CompareAndSwap(false, true), "worker %d used twice at once", w)
			calls[i].Add(1)
			inUse[w].Store(false)
		})
		for i := range calls {
			assert.Equal(t, int32(1), calls[i].Load(), "index %d", i)
		}
	}
}

// TestRemoteIsKept: a view marked remote stays so when it remembers.
func TestRemoteIsKept(t *testing.T) {
	src, err := rootfs.OpenDir(t.TempDir())
	require.NoError(t, err)
	defer src.Close()
	local := rootfs.New(src)
	assert.False(t, local.IsRemote())
	assert.False(t, local.Memo().IsRemote())
	remote := local.Remote()
	assert.True(t, remote.IsRemote())
	assert.True(t, remote.Memo().IsRemote())
	assert.False(t, local.IsRemote(), "Remote returns another view")
}
