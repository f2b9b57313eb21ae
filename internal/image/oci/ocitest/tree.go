package ocitest

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/stargz-snapshotter/estargz"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
)

// builderVersion changes when what CachedTreeLayout builds changes, so an
// old cached layout is not reused.
const builderVersion = "1"

// Split assigns each path of a tree (slash, relative) to a layer.
type Split func(rel string) int

// ByTopDir puts the listed top-level directories in layers 0, 1, … in
// order, and everything else in the last layer.
func ByTopDir(dirs ...string) Split {
	return func(rel string) int {
		top, _, _ := strings.Cut(rel, "/")
		for i, d := range dirs {
			if top == d {
				return i
			}
		}
		return len(dirs)
	}
}

// CachedTreeLayout returns an OCI layout of the host tree root, one image
// for the host's platform whose layers split assigns (layers layers) in
// format f, built once and kept under cacheDir keyed by the tree's
// listing (names, modes, sizes, times, link targets), the format and the
// split; large trees are streamed to files, never held in memory.
func CachedTreeLayout(t testing.TB, root, cacheDir string, f Format, layers int, split Split, platform string) string {
	t.Helper()
	key := treeKey(t, root, f, layers, split, platform)
	dir := filepath.Join(cacheDir, key)
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err == nil {
		return dir
	}
	require.NoError(t, os.MkdirAll(cacheDir, 0o755))
	tmp, err := os.MkdirTemp(cacheDir, ".build-")
	require.NoError(t, err)
	defer os.RemoveAll(tmp)
	var ls []Layer
	for i := range layers {
		ls = append(ls, streamLayer(t, root, filepath.Join(tmp, fmt.Sprintf("layer-%d.tar", i)), f, func(rel string) bool { return split(rel) == i }))
	}
	img := Image(t, platform, ls...)
	out := filepath.Join(tmp, "layout")
	WriteLayout(t, out, nil, img)
	if err := os.Rename(out, dir); err != nil && !os.IsExist(err) {
		// Another run built it meanwhile: use theirs.
		_, statErr := os.Stat(filepath.Join(dir, "index.json"))
		require.NoError(t, statErr, "cache %s: %v", dir, err)
	}
	return dir
}

// treeKey hashes what CachedTreeLayout's output depends on.
func treeKey(t testing.TB, root string, f Format, layers int, split Split, platform string) string {
	h := sha256.New()
	fmt.Fprintf(h, "v%s %s %d %s\n", builderVersion, f, layers, platform)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		fi, err := d.Info()
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		fmt.Fprintf(h, "%s %o %d %d %s %d\n", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano(), link, split(rel))
		return nil
	})
	require.NoError(t, err)
	return fmt.Sprintf("%s-%x", strings.ReplaceAll(string(f), ":", "-"), h.Sum(nil)[:12])
}

// streamLayer writes the entries of root that pick chooses as the layer
// file tarPath, in format f, streaming.
func streamLayer(t testing.TB, root, tarPath string, f Format, pick func(rel string) bool) Layer {
	t.Helper()
	tf, err := os.Create(tarPath)
	require.NoError(t, err)
	var w io.Writer = tf
	var closeZ func() error
	switch f {
	case Gzip:
		zw, err := gzip.NewWriterLevel(tf, gzip.BestSpeed)
		require.NoError(t, err)
		w, closeZ = zw, zw.Close
	case Zstd:
		zw, err := zstd.NewWriter(tf, zstd.WithEncoderLevel(zstd.SpeedFastest))
		require.NoError(t, err)
		w, closeZ = zw, zw.Close
	}
	writeTree(t, w, root, pick)
	if closeZ != nil {
		require.NoError(t, closeZ())
	}
	require.NoError(t, tf.Close())
	opener := func() (io.ReadCloser, error) { return os.Open(tarPath) }
	switch f {
	case Plain, Gzip, Zstd:
		mt := map[Format]types.MediaType{Plain: types.OCIUncompressedLayer, Gzip: types.OCILayer, Zstd: types.OCILayerZStd}[f]
		l, err := tarball.LayerFromOpener(opener, tarball.WithMediaType(mt))
		require.NoError(t, err)
		if f == Plain {
			l = plainLayer{l}
		}
		return Layer{Layer: l}
	case Estargz:
		st, err := os.Stat(tarPath)
		require.NoError(t, err)
		tf, err := os.Open(tarPath)
		require.NoError(t, err)
		defer tf.Close()
		blob, err := estargz.Build(io.NewSectionReader(tf, 0, st.Size()), estargz.WithCompressionLevel(gzip.BestSpeed))
		require.NoError(t, err)
		defer blob.Close()
		out := tarPath + ".estargz"
		of, err := os.Create(out)
		require.NoError(t, err)
		_, err = io.Copy(of, blob)
		require.NoError(t, err)
		require.NoError(t, of.Close())
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return os.Open(out) }, tarball.WithMediaType(types.OCILayer))
		require.NoError(t, err)
		return Layer{Layer: l, Annotations: map[string]string{estargz.TOCJSONDigestAnnotation: blob.TOCDigest().String()}}
	}
	t.Fatalf("ocitest: no streamed layers in format %q", f)
	return Layer{}
}

// plainLayer keeps an uncompressed layer uncompressed (go-containerregistry
// would gzip it when written).
type plainLayer struct{ v1.Layer }

func (p plainLayer) Compressed() (io.ReadCloser, error) { return p.Layer.Uncompressed() }
func (p plainLayer) Digest() (v1.Hash, error)           { return p.Layer.DiffID() }
func (p plainLayer) Size() (int64, error) {
	rc, err := p.Layer.Uncompressed()
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	return io.Copy(io.Discard, rc)
}

// writeTree writes the chosen entries of root (and their parents) as a tar
// stream to w.
func writeTree(t testing.TB, w io.Writer, root string, pick func(rel string) bool) {
	tw := tar.NewWriter(w)
	written := map[string]bool{}
	var parent func(rel string)
	parent = func(rel string) {
		p := filepath.ToSlash(filepath.Dir(rel))
		if p == "." || written[p] {
			return
		}
		parent(p)
		fi, err := os.Lstat(filepath.Join(root, p))
		require.NoError(t, err)
		written[p] = true
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: p + "/", Typeflag: tar.TypeDir, Mode: tarMode(fi.Mode()), ModTime: fi.ModTime(), Format: tar.FormatPAX}))
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if rel == "." || !pick(rel) {
			return nil
		}
		fi, err := d.Info()
		require.NoError(t, err)
		parent(rel)
		h := &tar.Header{Name: rel, Mode: tarMode(fi.Mode()), ModTime: fi.ModTime(), Format: tar.FormatPAX}
		switch {
		case d.IsDir():
			if written[rel] {
				return nil
			}
			written[rel] = true
			h.Name, h.Typeflag = rel+"/", tar.TypeDir
			require.NoError(t, tw.WriteHeader(h))
		case fi.Mode()&fs.ModeSymlink != 0:
			h.Typeflag = tar.TypeSymlink
			h.Linkname, err = os.Readlink(p)
			require.NoError(t, err)
			require.NoError(t, tw.WriteHeader(h))
		case fi.Mode().IsRegular():
			h.Typeflag, h.Size = tar.TypeReg, fi.Size()
			require.NoError(t, tw.WriteHeader(h))
			src, err := os.Open(p)
			require.NoError(t, err)
			_, err = io.Copy(tw, src)
			src.Close()
			require.NoError(t, err)
		}
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, tw.Close())
}
