package oci

import (
	"archive/tar"
	"bytes"
	"errors"
	"io/fs"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/fs/tarfs"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// ent is one tar entry for tests.
type ent struct {
	name, body, link string
	typ              byte
	mode             int64
}

func dir(name string) ent       { return ent{name: name, typ: tar.TypeDir, mode: 0o755} }
func reg(name, body string) ent { return ent{name: name, body: body, typ: tar.TypeReg, mode: 0o644} }
func sym(name, target string) ent {
	return ent{name: name, link: target, typ: tar.TypeSymlink, mode: 0o777}
}
func hard(name, target string) ent {
	return ent{name: name, link: target, typ: tar.TypeLink, mode: 0o644}
}
func whiteout(dir, name string) ent           { return reg(dir+"/.wh."+name, "") }
func opaque(dir string) ent                   { return reg(dir+"/.wh..wh..opq", "") }
func keepAll(string, int64, fs.FileMode) bool { return true }

func tarOf(t testing.TB, ents ...ent) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Size: int64(len(e.body)), Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		require.NoError(t, tw.WriteHeader(h))
		if e.typ == tar.TypeReg {
			_, err := tw.Write([]byte(e.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return b.Bytes()
}

// applyAll applies each layer's entries in order.
func applyAll(t testing.TB, opt TreeOptions, layers ...[]ent) (*Tree, error) {
	tree := NewTree(opt)
	for i, l := range layers {
		if err := tree.ApplyLayer(i, bytes.NewReader(tarOf(t, l...))); err != nil {
			return tree, err
		}
	}
	return tree, nil
}

// listing is every entry of a tree: name → type and content or target.
func listing(t testing.TB, src rootfs.Source) map[string]string {
	out := map[string]string{}
	require.NoError(t, fs.WalkDir(rootfs.New(src), ".", func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		if p == "." {
			return nil
		}
		switch {
		case d.IsDir():
			out[p] = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			l, err := src.ReadLink(p)
			require.NoError(t, err)
			out[p] = "-> " + l
		default:
			b, err := src.(*Tree).ReadFile(p)
			if errors.Is(err, tarfs.ErrNotKept) {
				out[p] = "(not kept)"
				return nil
			}
			require.NoError(t, err)
			out[p] = string(b)
		}
		return nil
	}))
	return out
}

func TestApplyLayers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layers [][]ent
		want   map[string]string
	}{
		{"later layer replaces a file", [][]ent{
			{dir("etc"), reg("etc/a", "1")},
			{reg("etc/a", "2")},
		}, map[string]string{"etc": "dir", "etc/a": "2"}},
		{"whiteout removes a lower file", [][]ent{
			{dir("etc"), reg("etc/a", "1"), reg("etc/b", "1")},
			{whiteout("etc", "a")},
		}, map[string]string{"etc": "dir", "etc/b": "1"}},
		{"whiteout removes a lower directory whole", [][]ent{
			{dir("opt"), dir("opt/x"), reg("opt/x/f", "1")},
			{whiteout("opt", "x")},
		}, map[string]string{"opt": "dir"}},
		{"whiteout leaves an entry of its own layer, whatever the order", [][]ent{
			{dir("etc"), reg("etc/a", "1")},
			{reg("etc/a", "2"), whiteout("etc", "a")},
		}, map[string]string{"etc": "dir", "etc/a": "2"}},
		{"whiteout of something absent is nothing", [][]ent{
			{dir("etc")},
			{whiteout("etc", "nothing"), whiteout("nowhere", "x")},
		}, map[string]string{"etc": "dir"}},
		{"opaque directory hides the lower layers' entries only", [][]ent{
			{dir("etc"), dir("etc/d"), reg("etc/d/old", "1"), reg("etc/keep", "k")},
			{dir("etc/d"), reg("etc/d/new", "2"), opaque("etc/d")},
		}, map[string]string{"etc": "dir", "etc/keep": "k", "etc/d": "dir", "etc/d/new": "2"}},
		{"a whiteout then the name again in a later layer", [][]ent{
			{dir("etc"), reg("etc/a", "1")},
			{whiteout("etc", "a")},
			{reg("etc/a", "3")},
		}, map[string]string{"etc": "dir", "etc/a": "3"}},
		{"hard link to a file of a lower layer survives the file's whiteout", [][]ent{
			{dir("usr"), reg("usr/f", "data")},
			{hard("usr/g", "usr/f")},
			{whiteout("usr", "f")},
		}, map[string]string{"usr": "dir", "usr/g": "data"}},
		{"entries through a link in a lower layer land at its target", [][]ent{
			{dir("usr"), dir("usr/lib"), sym("lib", "usr/lib")},
			{dir("lib/systemd"), reg("lib/systemd/x.service", "u")},
		}, map[string]string{"usr": "dir", "usr/lib": "dir", "lib": "-> usr/lib", "usr/lib/systemd": "dir", "usr/lib/systemd/x.service": "u"}},
		{"an absolute link is followed inside the root", [][]ent{
			{dir("usr"), dir("usr/etc"), sym("etc", "/usr/etc")},
			{reg("etc/hostname", "h"), whiteout("etc", "hostname2")},
		}, map[string]string{"usr": "dir", "usr/etc": "dir", "etc": "-> /usr/etc", "usr/etc/hostname": "h"}},
		{"missing parents are created", [][]ent{
			{reg("a/b/c", "x")},
		}, map[string]string{"a": "dir", "a/b": "dir", "a/b/c": "x"}},
		{"a file replaces a directory and the reverse", [][]ent{
			{dir("x"), reg("x/y", "1"), reg("z", "2")},
			{reg("x", "f"), dir("z")},
		}, map[string]string{"x": "f", "z": "dir"}},
		{"names are cleaned", [][]ent{
			{reg("./etc/./a", "1"), reg("/etc/b", "2"), reg("etc/c/../d", "3")},
		}, map[string]string{"etc": "dir", "etc/a": "1", "etc/b": "2", "etc/d": "3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree, err := applyAll(t, TreeOptions{Keep: keepAll}, tc.layers...)
			require.NoError(t, err)
			assert.Equal(t, tc.want, listing(t, tree))
		})
	}
}

// TestApplyRefusesHostileEntries checks that a layer that would write
// outside the root, or hide something outside its directory, is refused.
func TestApplyRefusesHostileEntries(t *testing.T) {
	for _, tc := range []struct {
		name  string
		layer []ent
		want  error
	}{
		{"dot-dot past the root", []ent{reg("../../etc/passwd", "x")}, ErrHostile},
		{"dot-dot inside a name", []ent{reg("etc/../../x", "x")}, ErrHostile},
		{"hard link past the root", []ent{hard("etc/x", "../../../etc/shadow")}, ErrHostile},
		{"whiteout of the parent", []ent{reg("etc/.wh..", "")}, ErrHostile},
		{"whiteout of the directory itself", []ent{reg("etc/.wh.", "")}, ErrHostile},
		{"whiteout escaping with dot-dot", []ent{reg("../.wh.etc", "")}, ErrHostile},
		{"hard link to nothing", []ent{hard("etc/x", "etc/nothing")}, ErrCorrupt},
		{"hard link to a directory", []ent{dir("etc"), hard("x", "etc")}, ErrCorrupt},
		{"a file under a file", []ent{reg("f", "1"), reg("f/g", "2")}, ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := applyAll(t, TreeOptions{Keep: keepAll}, []ent{dir("etc"), reg("etc/passwd", "root")}, tc.layer)
			require.Error(t, err)
			assert.ErrorIs(t, err, tc.want)
		})
	}
}

func TestApplyLinkLoopIsBounded(t *testing.T) {
	_, err := applyAll(t, TreeOptions{Keep: keepAll}, []ent{sym("a", "b"), sym("b", "a")}, []ent{reg("a/x", "1")})
	assert.ErrorIs(t, err, rootfs.ErrTooManyLinks)
}

func TestApplyBounds(t *testing.T) {
	_, err := applyAll(t, TreeOptions{Keep: keepAll, MaxEntries: 3}, []ent{reg("a", "1"), reg("b", "2"), reg("c", "3"), reg("d", "4")})
	assert.ErrorIs(t, err, ErrTooLarge)
	_, err = applyAll(t, TreeOptions{Keep: keepAll, MaxMemory: 10}, []ent{reg("a", "123456"), reg("b", "123456")})
	assert.ErrorIs(t, err, ErrTooLarge)
}

// TestKeepRule checks that only configuration is kept by default: a
// program's content is not, its metadata is.
func TestKeepRule(t *testing.T) {
	tree, err := applyAll(t, TreeOptions{}, []ent{
		reg("etc/ssh/sshd_config", "Port 22"),
		reg("usr/etc/os-release", "ID=fedora"),
		{name: "usr/bin/sshd", body: "\x7fELF", typ: tar.TypeReg, mode: 0o755},
	})
	require.NoError(t, err)
	b, err := tree.ReadFile("etc/ssh/sshd_config")
	require.NoError(t, err)
	assert.Equal(t, "Port 22", string(b))
	_, err = tree.ReadFile("usr/etc/os-release")
	assert.NoError(t, err)
	fi, err := tree.Lstat("usr/bin/sshd")
	require.NoError(t, err)
	assert.Equal(t, int64(4), fi.Size())
	assert.Equal(t, fs.FileMode(0o755), fi.Mode())
	_, err = tree.Open("usr/bin/sshd")
	assert.ErrorIs(t, err, tarfs.ErrNotKept)
}
