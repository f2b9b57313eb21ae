package rootfs_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func link(target string) *fstest.MapFile {
	return &fstest.MapFile{Data: []byte(target), Mode: fs.ModeSymlink | 0o777}
}

func file(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s), Mode: 0o644} }

func dir() *fstest.MapFile { return &fstest.MapFile{Mode: fs.ModeDir | 0o755} }

// hostile is an image whose links all try to leave the root.
func hostile() fstest.MapFS {
	return fstest.MapFS{
		"etc/shadow":                         file("image-shadow"),
		"etc/passwd":                         file("image-passwd"),
		"lib":                                link("usr/lib"),
		"usr/lib/systemd/system/a.service":   file("[Service]\n"),
		"etc/systemd/system/abs.service":     link("/lib/systemd/system/a.service"),
		"etc/systemd/system/rel.service":     link("../../../lib/systemd/system/a.service"),
		"etc/systemd/system/masked.service":  link("/dev/null"),
		"etc/systemd/system/relnull.service": link("../../../../../dev/null"),
		"shadow-abs":                         link("/etc/shadow"),
		"shadow-up":                          link("../../../../../../etc/shadow"),
		"up":                                 link("../../../.."),
		"proc-root":                          link("/proc/self/root/etc/passwd"),
		"loop-a":                             link("loop-b"),
		"loop-b":                             link("loop-a"),
		"self":                               link("self"),
		"file-as-dir":                        link("etc/passwd/x"),
		"dangling":                           link("/nonexistent/x"),
		"empty":                              dir(),
	}
}

func TestResolveStaysInRoot(t *testing.T) {
	v := rootfs.New(hostile())
	tests := []struct {
		name, want string
		err        error
	}{
		{"etc/systemd/system/abs.service", "usr/lib/systemd/system/a.service", nil},
		{"etc/systemd/system/rel.service", "usr/lib/systemd/system/a.service", nil},
		{"etc/systemd/system/masked.service", rootfs.NullName, nil},
		{"etc/systemd/system/relnull.service", rootfs.NullName, nil},
		{"shadow-abs", "etc/shadow", nil},
		{"shadow-up", "etc/shadow", nil},
		{"up", ".", nil},
		{"up/etc/passwd", "etc/passwd", nil},
		{"proc-root", "proc/self/root/etc/passwd", fs.ErrNotExist},
		{"loop-a", "", rootfs.ErrTooManyLinks},
		{"self", "", rootfs.ErrTooManyLinks},
		{"file-as-dir", "", rootfs.ErrNotDir},
		{"dangling", "nonexistent/x", fs.ErrNotExist},
		{"lib/systemd/system/a.service", "usr/lib/systemd/system/a.service", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := v.Resolve(tt.name)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				var pe *fs.PathError
				assert.True(t, errors.As(err, &pe), "error is a *fs.PathError")
			} else {
				require.NoError(t, err)
			}
			if tt.want != "" {
				assert.Equal(t, tt.want, got)
			}
		})
	}
}

func TestOpenReadsImageNotHost(t *testing.T) {
	v := rootfs.New(hostile())
	for _, name := range []string{"shadow-abs", "shadow-up", "up/etc/shadow"} {
		b, err := v.ReadFile(name)
		require.NoError(t, err, name)
		assert.Equal(t, "image-shadow", string(b), name)
	}
	_, err := v.Open("etc/systemd/system/masked.service")
	assert.ErrorIs(t, err, rootfs.ErrMasked)
	_, err = v.ReadFile("etc/systemd/system/masked.service")
	assert.ErrorIs(t, err, rootfs.ErrMasked)
	_, err = v.Open("/etc/shadow")
	assert.ErrorIs(t, err, fs.ErrInvalid, "names are io/fs names")
}

func TestLstatAndReadLink(t *testing.T) {
	v := rootfs.New(hostile())
	_, err := v.Lstat("lib/../etc/systemd/system/abs.service")
	require.Error(t, err, "io/fs names have no ..")
	fi, err := v.Lstat("etc/systemd/system/abs.service")
	require.NoError(t, err)
	assert.Equal(t, fs.ModeSymlink, fi.Mode().Type())
	tgt, err := v.ReadLink("etc/systemd/system/abs.service")
	require.NoError(t, err)
	assert.Equal(t, "/lib/systemd/system/a.service", tgt)
	// Parents are followed: lib -> usr/lib.
	fi, err = v.Lstat("lib/systemd/system/a.service")
	require.NoError(t, err)
	assert.True(t, fi.Mode().IsRegular())
	ents, err := v.ReadDir("lib/systemd/system")
	require.NoError(t, err)
	require.Len(t, ents, 1)
	assert.Equal(t, "a.service", ents[0].Name())
}

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"/":                   ".",
		"":                    ".",
		"/etc/ecs/ecs.config": "etc/ecs/ecs.config",
		"etc//x/":             "etc/x",
		"/../../etc/shadow":   "etc/shadow",
		"a/./b/../c":          "a/c",
	} {
		assert.Equal(t, want, rootfs.Clean(in), in)
	}
}

// TestDirNeverLeavesRoot builds the hostile tree on disk with real symlinks
// and a decoy "host" file next to the root: nothing may reach it.
func TestDirNeverLeavesRoot(t *testing.T) {
	top := t.TempDir()
	root := filepath.Join(top, "root")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(top, "secret"), []byte("host"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/secret"), []byte("image"), 0o600))
	for name, target := range map[string]string{
		"a": "/secret", "b": "../secret", "c": "../../../../secret",
		"d": filepath.Join(top, "secret"), "e": "/proc/self/root" + filepath.Join(top, "secret"),
	} {
		require.NoError(t, os.Symlink(target, filepath.Join(root, name)))
	}
	require.NoError(t, os.Symlink("etc", filepath.Join(root, "etclink")))
	d, err := rootfs.OpenDir(root)
	require.NoError(t, err)
	defer d.Close()
	v := rootfs.New(d)
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		b, err := v.ReadFile(name)
		if err == nil {
			assert.NotEqual(t, "host", string(b), name)
		} else {
			assert.ErrorIs(t, err, fs.ErrNotExist, name)
		}
	}
	b, err := v.ReadFile("etclink/secret")
	require.NoError(t, err)
	assert.Equal(t, "image", string(b))
}

func TestOpenDirErrors(t *testing.T) {
	_, err := rootfs.OpenDir(filepath.Join(t.TempDir(), "missing"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
	f := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(f, nil, 0o644))
	_, err = rootfs.OpenDir(f)
	assert.ErrorIs(t, err, rootfs.ErrNotDir)
}

func FuzzResolve(f *testing.F) {
	f.Add("a/b", "../../x", "/a")
	f.Add("x", "/dev/null", "x")
	f.Add("loop", "loop", "loop/z")
	f.Fuzz(func(t *testing.T, linkName, target, query string) {
		if !fs.ValidPath(linkName) || linkName == "." {
			return
		}
		m := fstest.MapFS{linkName: link(target), "etc/passwd": file("p")}
		v := rootfs.New(m)
		got, err := v.Resolve(rootfs.Clean(query))
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			if got != "" {
				// Names in images are bytes, not always UTF-8 (a link
				// target "\xb0"): what matters is that the name stays
				// inside the root — no "..", no leading "/", no empty
				// element.
				assert.True(t, fs.ValidPath(strings.ToValidUTF8(got, "?")), "resolved %q is a valid name", got)
			}
		}
	})
}

// hugeClaim is a Source whose one file claims an enormous size but holds a
// few bytes, or streams more than ReadFile may read.
type hugeClaim struct {
	m      fstest.MapFS
	stream int64
}

func (h hugeClaim) ReadDir(name string) ([]fs.DirEntry, error) { return h.m.ReadDir(name) }
func (h hugeClaim) Lstat(name string) (fs.FileInfo, error)     { return h.m.Lstat(name) }
func (h hugeClaim) ReadLink(name string) (string, error)       { return h.m.ReadLink(name) }

type claimFile struct {
	fs.File
	r io.Reader
}

func (c claimFile) Read(p []byte) (int, error) { return c.r.Read(p) }

func (h hugeClaim) Open(name string) (fs.File, error) {
	f, err := h.m.Open(name)
	if err != nil || h.stream == 0 {
		return f, err
	}
	return claimFile{f, io.LimitReader(zeros{}, h.stream)}, nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestReadFileNeverTrustsClaimedSizes(t *testing.T) {
	// MapFS reports the real length; the stream is what bounds the read.
	v := rootfs.New(hugeClaim{m: fstest.MapFS{"f": file("small")}, stream: rootfs.MaxReadFile + 10})
	_, err := v.ReadFile("f")
	assert.ErrorIs(t, err, rootfs.ErrTooLarge)
	v = rootfs.New(hugeClaim{m: fstest.MapFS{"f": file("small")}})
	b, err := v.ReadFile("f")
	require.NoError(t, err)
	assert.Equal(t, "small", string(b))
}
