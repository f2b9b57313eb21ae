package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// walkAll reads everything a tree serves through the chroot view, as the
// audit would: every directory listed, every link resolved, every file
// read. It must never panic or loop.
func walkAll(t *testing.T, tree *Tree) {
	view := rootfs.New(tree)
	_ = fs.WalkDir(view, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if !d.IsDir() {
			_, _ = view.ReadFile(p)
			_, _ = view.Resolve(p)
		}
		return nil
	})
}

// FuzzApplyLayer feeds arbitrary bytes as two layers (the second over the
// first, split at an offset) and reads the result back: errors are fine, a panic, a hang or an
// entry outside the root are not.
func FuzzApplyLayer(f *testing.F) {
	seeds := [][]ent{
		{dir("etc"), reg("etc/a", "1"), sym("lib", "usr/lib"), reg("usr/lib/x", "y"), hard("etc/b", "etc/a")},
		{whiteout("etc", "a"), opaque("usr/lib"), reg("lib/z", "q"), reg("etc/.wh..wh.plnk", "")},
		{sym("a", "/a/b"), reg("a/c", "x"), reg("../x", "escape")},
		{reg("etc/.wh..", ""), hard("x", "../../etc/passwd")},
	}
	for i := range seeds {
		a, b := tarOf(f, seeds[i]...), tarOf(f, seeds[(i+1)%len(seeds)]...)
		f.Add(uint16(len(a)), append(a, b...))
	}
	f.Fuzz(func(t *testing.T, split uint16, data []byte) {
		a, b := data[:min(int(split), len(data))], data[min(int(split), len(data)):]
		tree := NewTree(TreeOptions{MaxEntries: 1 << 12, MaxMemory: 1 << 20})
		if err := tree.ApplyLayer(0, bytes.NewReader(a)); err != nil {
			return
		}
		_ = tree.ApplyLayer(1, bytes.NewReader(b))
		walkAll(t, tree)
		for _, n := range []string{"..", "../etc", "/etc"} {
			if _, err := tree.Lstat(n); err == nil {
				t.Fatalf("lstat %q: a name outside fs.ValidPath answered", n)
			}
		}
	})
}

// FuzzTOC feeds arbitrary bytes as a layer with a table of contents, read
// by range: the footer, the table and the files it lists.
func FuzzTOC(f *testing.F) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "etc/os-release", Typeflag: tar.TypeReg, Size: 5, Mode: 0o644})
	_, _ = tw.Write([]byte("ID=x\n"))
	_ = tw.Close()
	f.Add(buf.Bytes())
	f.Add([]byte("\x1f\x8b\x08\x04\x00\x00\x00\x00\x00\xff\x1a\x00SG\x16\x000000000000000000STARGZ"))
	f.Fuzz(func(t *testing.T, blob []byte) {
		desc := v1.Descriptor{Size: int64(len(blob)), Annotations: map[string]string{}}
		toc, err := readTOC(bytes.NewReader(blob), desc)
		if err != nil {
			return
		}
		tree := NewTree(TreeOptions{MaxEntries: 1 << 12})
		if err := applyTOC(tree, 0, toc, bytes.NewReader(blob)); err != nil {
			return
		}
		walkAll(t, tree)
	})
}

// FuzzOpenArchive feeds arbitrary bytes as an image archive (an OCI
// layout or a docker-archive in a tarball).
func FuzzOpenArchive(f *testing.F) {
	f.Add(tarOf(f, reg("oci-layout", `{"imageLayoutVersion":"1.0.0"}`), reg("index.json", `{"schemaVersion":2,"manifests":[]}`)))
	f.Add(tarOf(f, reg("manifest.json", `[{"Config":"c.json","Layers":["l/layer.tar"]}]`), reg("c.json", `{"rootfs":{"diff_ids":["sha256:00"]}}`), reg("l/layer.tar", "x")))
	f.Fuzz(func(t *testing.T, b []byte) {
		im, err := OpenArchive(context.Background(), bytes.NewReader(b), int64(len(b)), "", Options{Platform: "linux/amd64", Tree: TreeOptions{MaxEntries: 1 << 12}})
		if err != nil {
			if errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			return
		}
		walkAll(t, im.Tree)
	})
}
