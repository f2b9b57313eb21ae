package tarfs_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/fs/tarfs"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// snapshot describes every entry of a Source: type, permissions, size and
// content hash or link target, so two Sources can be compared whole.
func snapshot(t *testing.T, src rootfs.Source) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(dir string)
	walk = func(dir string) {
		ents, err := src.ReadDir(dir)
		require.NoError(t, err, dir)
		for _, e := range ents {
			name := e.Name()
			if dir != "." {
				name = dir + "/" + name
			}
			fi, err := src.Lstat(name)
			require.NoError(t, err, name)
			desc := fi.Mode().String()
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				l, err := src.ReadLink(name)
				require.NoError(t, err)
				desc += " -> " + l
			case fi.Mode().IsRegular():
				f, err := src.Open(name)
				require.NoError(t, err)
				h := sha256.New()
				_, err = bytes.NewBuffer(nil).ReadFrom(f)
				require.NoError(t, err)
				f.Close()
				b, err := fs.ReadFile(src, name)
				require.NoError(t, err)
				h.Write(b)
				desc += " " + hex.EncodeToString(h.Sum(nil))[:16]
				assert.Equal(t, int64(len(b)), fi.Size(), name)
			case fi.IsDir():
				walk(name)
			}
			out[name] = desc
		}
	}
	walk(".")
	return out
}

func openTar(t *testing.T, path string, opt tarfs.Options) (*tarfs.FS, error) {
	f, err := os.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	require.NoError(t, err)
	return tarfs.Open(f, fi.Size(), opt)
}

// tree is the shared test tree plus a hard link and a whiteout.
func tree(t *testing.T) string {
	dir := disktest.Tree(t)
	require.NoError(t, os.Link(filepath.Join(dir, "etc/hostname"), filepath.Join(dir, "etc/hostname.hard")))
	return dir
}

// TestTarballsMatchTheirTree packs a tree with GNU tar in every supported
// style and compression and checks the index equals the directory.
func TestTarballsMatchTheirTree(t *testing.T) {
	dir := tree(t)
	d, err := rootfs.OpenDir(dir)
	require.NoError(t, err)
	defer d.Close()
	want := snapshot(t, d)
	require.Contains(t, want, "etc/hostname.hard")
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"dot prefix", []string{"-cf", "X", "-C", dir, "."}},
		{"docker export style", []string{"-cf", "X", "-C", dir, "etc", "usr"}},
		{"leading slash", []string{"-cPf", "X", "--transform", "flags=r;s,^,/,", "-C", dir, "etc", "usr"}},
		{"gzip", []string{"-czf", "X", "-C", dir, "."}},
		{"zstd", []string{"--zstd", "-cf", "X", "-C", dir, "."}},
		{"pax", []string{"--format=pax", "-cf", "X", "-C", dir, "."}},
		{"v7", []string{"--format=v7", "-cf", "X", "-C", dir, "."}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "root.tar")
			args := append([]string{}, tt.args...)
			for i, a := range args {
				if a == "X" {
					args[i] = out
				}
			}
			disktest.Run(t, "tar", args...)
			tf, err := openTar(t, out, tarfs.Options{})
			require.NoError(t, err)
			assert.Equal(t, want, snapshot(t, tf))
			// Every file streamed again from the tarball, none held.
			tf2, err := openTar(t, out, tarfs.Options{MaxHeld: 1})
			require.NoError(t, err)
			assert.Equal(t, want, snapshot(t, tf2))

			// Through the chroot view: the absolute enablement link
			// resolves inside the tarball.
			v := rootfs.New(tf)
			b, err := v.ReadFile("etc/systemd/system/multi-user.target.wants/ecs.service")
			require.NoError(t, err)
			assert.Contains(t, string(b), "Description=ECS")
		})
	}
}

func TestConformance(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct{ name, body string }{{"a/b.txt", "b"}, {"a/c/d.txt", "dd"}, {"e", ""}} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(e.body))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	tf, err := tarfs.Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()), tarfs.Options{})
	require.NoError(t, err)
	require.NoError(t, fstest.TestFS(tf, "a/b.txt", "a/c/d.txt", "e"))
}

type entry struct {
	name, link string
	typ        byte
	body       string
}

func build(t testing.TB, es []entry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body)), Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if e.typ == tar.TypeDir {
			h.Mode = 0o755
		}
		require.NoError(t, tw.WriteHeader(h))
		if h.Size > 0 {
			_, err := tw.Write([]byte(e.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

func TestHostileNames(t *testing.T) {
	b := build(t, []entry{
		{name: "../../x", typ: tar.TypeReg, body: "x1"},
		{name: "/etc/passwd", typ: tar.TypeReg, body: "root"},
		{name: "a/../../../b", typ: tar.TypeReg, body: "b"},
		{name: "./etc/../etc/shadow-link", typ: tar.TypeSymlink, link: "../../../../etc/shadow"},
		{name: "h", typ: tar.TypeLink, link: "../../../etc/passwd"},
		{name: "etc/.wh.gone", typ: tar.TypeReg, body: "whiteout"},
		{name: "etc/.wh..wh..opq", typ: tar.TypeReg},
		{name: "x", typ: tar.TypeReg, body: "x2, the last wins"},
		{name: "d", typ: tar.TypeReg, body: "file first"},
		{name: "d/inner", typ: tar.TypeReg, body: "then a directory over it"},
		{name: "f/inner", typ: tar.TypeReg, body: "a directory first"},
		{name: "f", typ: tar.TypeReg, body: "then a file over it"},
	})
	tf, err := tarfs.Open(bytes.NewReader(b), int64(len(b)), tarfs.Options{})
	require.NoError(t, err)
	got := map[string]string{}
	for name, desc := range snapshot(t, tf) {
		got[name] = desc
	}
	names := make([]string, 0, len(got))
	for n := range got {
		names = append(names, n)
	}
	assert.ElementsMatch(t, []string{"x", "etc", "etc/passwd", "etc/shadow-link", "b", "h", "d", "d/inner", "f"}, names)
	read := func(n string) string {
		b, err := tf.ReadFile(n)
		require.NoError(t, err)
		return string(b)
	}
	assert.Equal(t, "x2, the last wins", read("x"))
	assert.Equal(t, "root", read("h"), "a hard link shares its target's content")
	assert.Equal(t, "then a file over it", read("f"))
	l, err := tf.ReadLink("etc/shadow-link")
	require.NoError(t, err)
	assert.Equal(t, "../../../../etc/shadow", l, "link targets are kept as stored; the view clamps them")
}

func TestErrors(t *testing.T) {
	good := build(t, []entry{{name: "etc/os-release", typ: tar.TypeReg, body: "ID=debian\n"}, {name: "big", typ: tar.TypeReg, body: string(make([]byte, 5000))}})
	gz := func(b []byte) []byte {
		p := filepath.Join(t.TempDir(), "x.tar")
		require.NoError(t, os.WriteFile(p, b, 0o644))
		disktest.Run(t, "gzip", "-kf", p)
		out, err := os.ReadFile(p + ".gz")
		require.NoError(t, err)
		return out
	}
	for _, tt := range []struct {
		name string
		data []byte
		opt  tarfs.Options
		want error
	}{
		{"truncated tar", good[:1024+100], tarfs.Options{}, tarfs.ErrCorrupt},
		{"truncated gzip", gz(good)[:60], tarfs.Options{}, tarfs.ErrCorrupt},
		{"not a tarball", bytes.Repeat([]byte("junk"), 200), tarfs.Options{}, tarfs.ErrCorrupt},
		{"hard link to nothing", build(t, []entry{{name: "h", typ: tar.TypeLink, link: "nope"}}), tarfs.Options{}, tarfs.ErrCorrupt},
		{"over the memory cap", gz(good), tarfs.Options{MaxMemory: 1000}, tarfs.ErrTooLarge},
		{"too many entries", good, tarfs.Options{MaxEntries: 1}, tarfs.ErrTooLarge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tarfs.Open(bytes.NewReader(tt.data), int64(len(tt.data)), tt.opt)
			require.ErrorIs(t, err, tt.want)
		})
	}
	// The cap does not apply to a plain tar: its contents stay in the file.
	_, err := tarfs.Open(bytes.NewReader(good), int64(len(good)), tarfs.Options{MaxMemory: 1000})
	require.NoError(t, err)
}

func FuzzOpen(f *testing.F) {
	b := build(f, []entry{
		{name: "etc/", typ: tar.TypeDir},
		{name: "etc/os-release", typ: tar.TypeReg, body: "ID=debian\n"},
		{name: "etc/l", typ: tar.TypeSymlink, link: "/etc/os-release"},
		{name: "etc/h", typ: tar.TypeLink, link: "etc/os-release"},
	})
	f.Add(b)
	f.Add(b[:700])
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	_, err := zw.Write(b)
	require.NoError(f, err)
	require.NoError(f, zw.Close())
	f.Add(zb.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		// MaxHeld of 4 bytes: most files of a compressed tarball are
		// streamed again when read, and checked against the first
		// reading.
		tf, err := tarfs.Open(bytes.NewReader(data), int64(len(data)), tarfs.Options{MaxMemory: 1 << 20, MaxEntries: 1000, MaxHeld: 4})
		if err != nil {
			return
		}
		// Whatever was indexed must be walkable and readable; the same
		// bytes read again are what the first reading saw.
		_ = fs.WalkDir(tf, ".", func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				_, err := tf.ReadFile(p)
				if err != nil && strings.Contains(err.Error(), "differ from the first") {
					t.Fatalf("%s: %v", p, err)
				}
			}
			return nil
		})
	})
}

// TestReadFileBounded reads a compressed tarball whose file is over
// rootfs.MaxReadFile: ReadFile refuses it instead of allocating its
// declared size, and Open still streams it whole.
func TestReadFileBounded(t *testing.T) {
	const size = rootfs.MaxReadFile + 1
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "etc/huge", Typeflag: tar.TypeReg, Mode: 0o644, Size: size}))
	_, err := io.CopyN(tw, zeros{}, size)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())

	tf, err := tarfs.Open(bytes.NewReader(buf.Bytes()), int64(buf.Len()), tarfs.Options{})
	require.NoError(t, err)
	_, err = tf.ReadFile("etc/huge")
	require.ErrorIs(t, err, rootfs.ErrTooLarge)
	f, err := tf.Open("etc/huge")
	require.NoError(t, err)
	defer f.Close()
	n, err := io.Copy(io.Discard, f)
	require.NoError(t, err)
	assert.Equal(t, int64(size), n)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// failingReader serves b up to limit and fails with err beyond it.
type failingReader struct {
	b     []byte
	limit int64
	err   error
}

func (f failingReader) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.limit {
		n := copy(p, f.b[off:max(off, min(f.limit, int64(len(f.b))))])
		return n, f.err
	}
	return copy(p, f.b[off:]), nil
}

// TestReadErrorKept reads a tarball whose storage fails part way: the
// storage's error stays in the chain, so a caller can tell a failed read
// from a damaged tarball.
func TestReadErrorKept(t *testing.T) {
	good := build(t, []entry{{name: "etc/os-release", typ: tar.TypeReg, body: "ID=debian\n"}, {name: "big", typ: tar.TypeReg, body: string(make([]byte, 5000))}})
	errDisk := errors.New("storage failed")
	_, err := tarfs.Open(failingReader{b: good, limit: 1024 + 100, err: errDisk}, int64(len(good)), tarfs.Options{})
	require.ErrorIs(t, err, errDisk)
}
