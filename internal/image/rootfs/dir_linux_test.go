//go:build linux

package rootfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostileDir builds, in a fresh temporary directory top, an image root at
// top/root whose links and names all try to reach top/secret and the
// directory top/host, which hold "host". Inside the root, the host paths the
// links name are mirrored with "image" content, so a lookup re-anchored at
// the root (RESOLVE_IN_ROOT) finds the mirror and one that escaped would
// find "host".
func hostileDir(t *testing.T) (top, root string) {
	t.Helper()
	top = t.TempDir()
	root = filepath.Join(top, "root")
	host := filepath.Join(top, "host")
	write := func(p, s string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(s), 0o644))
	}
	write(filepath.Join(top, "secret"), "host")
	write(filepath.Join(host, "secret"), "host")
	write(filepath.Join(host, "host-only"), "host")
	write(filepath.Join(root, "secret"), "image")
	write(filepath.Join(root, "a/file"), "image")
	// The mirror of the host directory inside the root.
	write(filepath.Join(root, host, "secret"), "image")
	for name, target := range map[string]string{
		"abs":       host,                         // an absolute host directory
		"up":        "../../../../..",             // climbs past the root
		"proc-link": "/proc",                      // the root has no proc
		"deep/fd":   "/proc/self/fd",              // magic links behind it
		"a/link":    filepath.Join(top, "secret"), // a final link
	} {
		p := filepath.Join(root, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.Symlink(target, p))
	}
	return top, root
}

// openModes opens root both ways: through openat2 and through the os.Root
// fallback.
func openModes(t *testing.T, root string) map[string]*Dir {
	t.Helper()
	fast, err := openDir(root, true)
	require.NoError(t, err)
	require.NotNil(t, fast.fast, "this kernel has openat2")
	t.Cleanup(func() { fast.Close() })
	slow, err := openDir(root, false)
	require.NoError(t, err)
	require.Nil(t, slow.fast)
	t.Cleanup(func() { slow.Close() })
	return map[string]*Dir{"openat2": fast, "os.Root": slow}
}

// TestDirHostileNamesDirect calls Dir itself, under the view, with names
// nobody resolved: whatever each call returns, it is never the host's.
func TestDirHostileNamesDirect(t *testing.T) {
	top, root := hostileDir(t)
	hostRel := strings.TrimPrefix(filepath.Join(top, "host"), "/")
	names := []string{
		"a/../../secret", "../secret", "up/secret", "up/" + hostRel + "/secret",
		"abs/secret", "abs/host-only", "abs",
		"proc-link/self/root" + top + "/secret", "proc-link/self/root/etc/passwd",
		"deep/fd/0", "up/proc/self/root" + top + "/secret",
	}
	for mode, d := range openModes(t, root) {
		for _, name := range names {
			t.Run(mode+"/"+name, func(t *testing.T) {
				if b, err := d.ReadFile(name); err == nil {
					assert.Equal(t, "image", string(b))
				}
				if f, err := d.Open(name); err == nil {
					b, _ := io.ReadAll(f)
					assert.NotEqual(t, "host", string(b))
					require.NoError(t, f.Close())
				}
				if ents, err := d.ReadDir(name); err == nil {
					for _, e := range ents {
						assert.NotEqual(t, "host-only", e.Name())
					}
				}
				if fi, err := d.Lstat(name); err == nil {
					assert.NotEqual(t, "host-only", fi.Name())
				}
			})
		}
	}
}

// TestDirResolvesInRoot shows the kernel's RESOLVE_IN_ROOT semantics under
// the openat2 implementation, below Dir's own name check: ".." stops at the
// root, and an absolute link in a directory name is re-anchored there.
func TestDirResolvesInRoot(t *testing.T) {
	top, root := hostileDir(t)
	d, err := openDir(root, true)
	require.NoError(t, err)
	defer d.Close()
	x := d.fast
	require.NotNil(t, x)

	// Dir itself refuses names io/fs calls invalid.
	_, err = d.ReadFile("a/../../secret")
	require.ErrorIs(t, err, fs.ErrInvalid)

	for _, name := range []string{"a/../../secret", "../../../secret", "up/secret"} {
		b, err := x.readFile(name)
		require.NoError(t, err, name)
		assert.Equal(t, "image", string(b), name)
		fi, err := x.lstat(name)
		require.NoError(t, err, name)
		assert.Equal(t, int64(len("image")), fi.Size(), name)
	}
	// abs -> top/host is followed as the image's own top/host.
	b, err := x.readFile("abs/secret")
	require.NoError(t, err)
	assert.Equal(t, "image", string(b))
	_, err = x.lstat("abs/host-only")
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = x.readDir("abs")
	require.ErrorIs(t, err, syscall.ENOTDIR, "a final link is not followed")
	ents, err := x.readDir("abs/.")
	require.NoError(t, err)
	require.Len(t, ents, 1)
	assert.Equal(t, "secret", ents[0].Name())
	// /proc is the image's, which has none; and magic links are refused.
	_, err = x.readFile("proc-link/self/root" + top + "/secret")
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = x.lstat("proc-link/self/root" + top + "/secret")
	require.ErrorIs(t, err, fs.ErrNotExist)
	// A final link is described, never followed.
	_, err = d.Open("a/link")
	require.ErrorIs(t, err, syscall.ELOOP)
	tgt, err := d.ReadLink("a/link")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(top, "secret"), tgt)
	fi, err := d.Lstat("a/link")
	require.NoError(t, err)
	assert.Equal(t, fs.ModeSymlink, fi.Mode().Type())
}

// TestDirTreeChangesUnderneath swaps a directory the Dir has cached for a
// link to the host directory: what is read afterwards is still the image's.
func TestDirTreeChangesUnderneath(t *testing.T) {
	top, root := hostileDir(t)
	for mode, d := range openModes(t, root) {
		t.Run(mode, func(t *testing.T) {
			sub := filepath.Join(root, "swap-"+mode)
			require.NoError(t, os.MkdirAll(sub, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(sub, "secret"), []byte("image"), 0o644))
			name := "swap-" + mode + "/secret"
			b, err := d.ReadFile(name)
			require.NoError(t, err)
			assert.Equal(t, "image", string(b))
			_, err = d.Lstat(name) // caches the directory
			require.NoError(t, err)

			require.NoError(t, os.RemoveAll(sub))
			require.NoError(t, os.Symlink(filepath.Join(top, "host"), sub))
			if b, err := d.ReadFile(name); err == nil {
				assert.Equal(t, "image", string(b))
			}
			if f, err := d.Open(name); err == nil {
				b, _ := io.ReadAll(f)
				assert.Equal(t, "image", string(b))
				f.Close()
			}
			if ents, err := d.ReadDir("swap-" + mode); err == nil {
				for _, e := range ents {
					assert.NotEqual(t, "host-only", e.Name())
				}
			}
		})
	}
}

// TestDirModesAgree checks that the openat2 implementation answers as the
// os.Root fallback does, on the same tree.
func TestDirModesAgree(t *testing.T) {
	_, root := hostileDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(root, "a/exec"), []byte("#!/bin/sh\n"), 0o4755))
	modes := openModes(t, root)
	fast, slow := modes["openat2"], modes["os.Root"]
	for _, name := range []string{".", "a", "a/file", "a/exec", "a/link", "abs", "secret", "missing", "a/missing", "secret/x"} {
		fi1, err1 := fast.Lstat(name)
		fi2, err2 := slow.Lstat(name)
		require.Equal(t, err2 == nil, err1 == nil, name)
		if err2 != nil {
			assert.Equal(t, errors.Is(err2, fs.ErrNotExist), errors.Is(err1, fs.ErrNotExist), name)
			var pe *fs.PathError
			assert.ErrorAs(t, err1, &pe, name)
			continue
		}
		assert.Equal(t, fi2.Name(), fi1.Name(), name)
		assert.Equal(t, fi2.Mode(), fi1.Mode(), name)
		assert.Equal(t, fi2.Size(), fi1.Size(), name)
		assert.True(t, fi2.ModTime().Equal(fi1.ModTime()), name)
		st1, ok := fi1.Sys().(*syscall.Stat_t)
		require.True(t, ok, name)
		assert.Equal(t, fi2.Sys().(*syscall.Stat_t).Ino, st1.Ino, name)
	}
	for _, name := range []string{".", "a", "deep"} {
		e1, err := fast.ReadDir(name)
		require.NoError(t, err)
		e2, err := slow.ReadDir(name)
		require.NoError(t, err)
		require.Len(t, e1, len(e2), name)
		for i := range e2 {
			assert.Equal(t, e2[i].Name(), e1[i].Name())
			assert.Equal(t, e2[i].Type(), e1[i].Type())
			i1, err := e1[i].Info()
			require.NoError(t, err)
			i2, err := e2[i].Info()
			require.NoError(t, err)
			assert.Equal(t, i2.Mode(), i1.Mode())
		}
	}
	for _, d := range modes {
		b, err := d.ReadFile("a/file")
		require.NoError(t, err)
		assert.Equal(t, "image", string(b))
		tgt, err := d.ReadLink("abs")
		require.NoError(t, err)
		assert.True(t, strings.HasSuffix(tgt, "/host"))
		_, err = d.ReadLink("a/file")
		assert.Error(t, err)
	}
}

// TestDirFile reads through Open: Stat, partial ReadDir, ReadAt and Seek.
func TestDirFile(t *testing.T) {
	_, root := hostileDir(t)
	d, err := openDir(root, true)
	require.NoError(t, err)
	defer d.Close()
	f, err := d.Open("a")
	require.NoError(t, err)
	rd, ok := f.(fs.ReadDirFile)
	require.True(t, ok)
	var names []string
	for {
		ents, err := rd.ReadDir(1)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		require.Len(t, ents, 1)
		names = append(names, ents[0].Name())
	}
	assert.Equal(t, []string{"file", "link"}, names)
	require.NoError(t, f.Close())
	assert.ErrorIs(t, f.Close(), fs.ErrClosed)

	f, err = d.Open("secret")
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	assert.Equal(t, int64(5), fi.Size())
	buf := make([]byte, 3)
	n, err := f.(io.ReaderAt).ReadAt(buf, 2)
	require.NoError(t, err)
	assert.Equal(t, "age", string(buf[:n]))
	_, err = f.(io.Seeker).Seek(1, io.SeekStart)
	require.NoError(t, err)
	b, err := io.ReadAll(f)
	require.NoError(t, err)
	assert.Equal(t, "mage", string(b))
}

// TestDirReadsWhole reads files of several sizes through ReadFile and
// through Open with small reads, which stop at the size seen at open.
func TestDirReadsWhole(t *testing.T) {
	root := t.TempDir()
	sizes := []int{0, 1, 511, 512, 513, 4096, 70000}
	for _, n := range sizes {
		require.NoError(t, os.WriteFile(filepath.Join(root, "f"+itoa(n)), []byte(strings.Repeat("x", n)), 0o644))
	}
	for mode, d := range openModes(t, root) {
		for _, n := range sizes {
			name := "f" + itoa(n)
			b, err := d.ReadFile(name)
			require.NoError(t, err, mode)
			assert.Len(t, b, n, mode)
			f, err := d.Open(name)
			require.NoError(t, err, mode)
			b, err = io.ReadAll(f)
			require.NoError(t, err, mode)
			assert.Len(t, b, n, mode)
			k, err := f.Read(make([]byte, 8))
			assert.Equal(t, 0, k)
			assert.ErrorIs(t, err, io.EOF, mode)
			require.NoError(t, f.Close())
		}
	}
}

// TestDirRefusesSpecialFiles: a FIFO would block a read forever, and a
// device node names a host device; neither is opened for reading.
func TestDirRefusesSpecialFiles(t *testing.T) {
	_, root := hostileDir(t)
	require.NoError(t, syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	require.NoError(t, syscall.Mknod(filepath.Join(root, "null"), syscall.S_IFCHR|0o666, 1<<8|3))
	for mode, d := range openModes(t, root) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			for _, name := range []string{"fifo", "null"} {
				_, err := d.ReadFile(name)
				assert.ErrorIs(t, err, fs.ErrInvalid, mode+" "+name)
				_, err = d.Open(name)
				assert.ErrorIs(t, err, fs.ErrInvalid, mode+" "+name)
				_, err = d.ReadDir(name)
				assert.ErrorIs(t, err, syscall.ENOTDIR, mode+" "+name)
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			// Unblock the open so that the next tests run.
			if w, err := os.OpenFile(filepath.Join(root, "fifo"), os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				w.Close()
			}
			t.Fatalf("%s: blocked opening a FIFO", mode)
		}
		fi, err := d.Lstat("null")
		require.NoError(t, err)
		assert.Equal(t, fs.ModeDevice|fs.ModeCharDevice, fi.Mode().Type())
		assert.Equal(t, uint64(0x103), fi.Sys().(*syscall.Stat_t).Rdev)
	}
}

// TestDirCacheBound opens more directories than the cache holds, while
// holding one cached descriptor across the eviction.
func TestDirCacheBound(t *testing.T) {
	root := t.TempDir()
	n := maxDirFDs*2 + 3
	for i := range n {
		p := filepath.Join(root, "d", strings.Repeat("x", i%7+1)+string(rune('a'+i%26)), "n"+itoa(i))
		require.NoError(t, os.MkdirAll(p, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(p, "f"), []byte(itoa(i)), 0o644))
	}
	d, err := openDir(root, true)
	require.NoError(t, err)
	x := d.fast
	require.NotNil(t, x)
	held, err := x.acquire("d")
	require.NoError(t, err)
	for round := range 2 {
		for i := range n {
			name := "d/" + strings.Repeat("x", i%7+1) + string(rune('a'+i%26)) + "/n" + itoa(i) + "/f"
			fi, err := d.Lstat(name)
			require.NoError(t, err, "round %d %s", round, name)
			assert.Equal(t, int64(len(itoa(i))), fi.Size())
			x.mu.Lock()
			assert.LessOrEqual(t, len(x.dirs), maxDirFDs)
			x.mu.Unlock()
		}
	}
	// The held descriptor survived the evictions and still works.
	var st syscall.Stat_t
	require.NoError(t, syscall.Fstat(held.fd, &st))
	x.release(held)
	require.NoError(t, d.Close())
	_, err = d.Lstat("d")
	assert.ErrorIs(t, err, fs.ErrClosed)
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// TestDirReadFileBounded reads a file one byte over MaxReadFile both ways:
// the os.Root fallback refuses it as the openat2 path does.
func TestDirReadFileBounded(t *testing.T) {
	root := t.TempDir()
	f, err := os.Create(filepath.Join(root, "big"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(MaxReadFile+1)) // sparse: no disk used
	require.NoError(t, f.Close())
	require.NoError(t, os.WriteFile(filepath.Join(root, "small"), []byte("small"), 0o644))
	for mode, d := range openModes(t, root) {
		t.Run(mode, func(t *testing.T) {
			_, err := d.ReadFile("big")
			require.ErrorIs(t, err, ErrTooLarge)
			b, err := d.ReadFile("small")
			require.NoError(t, err)
			assert.Equal(t, "small", string(b))
		})
	}
}
