// Package ocitest builds container images for tests, in code, with
// go-containerregistry: layers from host trees or from entry lists (in any
// of the layer formats amilint reads: plain, gzip, zstd, eStargz,
// zstd:chunked), images and multi-arch indexes, written as OCI layouts and
// docker-archive tarballs or pushed to an in-process registry on loopback,
// with or without authentication. It is imported only by tests.
package ocitest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/stargz-snapshotter/estargz"
	"github.com/containerd/stargz-snapshotter/estargz/zstdchunked"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
)

// Entry is one tar entry of a layer.
type Entry struct {
	Name     string
	Type     byte // tar.TypeReg, TypeDir, TypeSymlink, TypeLink, …
	Mode     int64
	Body     []byte
	Linkname string
	ModTime  time.Time
}

// Reg, Dir, Symlink, Hardlink, Whiteout and Opaque make entries.
func Reg(name, body string) Entry {
	return Entry{Name: name, Type: tar.TypeReg, Mode: 0o644, Body: []byte(body)}
}

// Dir is a directory entry.
func Dir(name string) Entry { return Entry{Name: name, Type: tar.TypeDir, Mode: 0o755} }

// Symlink is a symbolic link entry.
func Symlink(name, target string) Entry {
	return Entry{Name: name, Type: tar.TypeSymlink, Mode: 0o777, Linkname: target}
}

// Hardlink is a hard link entry to an earlier file (of any layer).
func Hardlink(name, target string) Entry {
	return Entry{Name: name, Type: tar.TypeLink, Mode: 0o644, Linkname: target}
}

// Whiteout hides dir/name of the layers below.
func Whiteout(dir, name string) Entry { return Reg(dir+"/.wh."+name, "") }

// Opaque hides everything the layers below put in dir.
func Opaque(dir string) Entry { return Reg(dir+"/.wh..wh..opq", "") }

// Tar writes entries as an uncompressed tar.
func Tar(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Typeflag: e.Type, Mode: e.Mode, Linkname: e.Linkname, ModTime: e.ModTime, Format: tar.FormatPAX}
		if e.Type == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		require.NoError(t, tw.WriteHeader(h))
		if e.Type == tar.TypeReg {
			_, err := tw.Write(e.Body)
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return b.Bytes()
}

// DirEntries lists the host tree dir as entries, in walk order, with
// their modes, times, contents and link targets; pick (nil: all) chooses
// which, by slash path relative to dir. Parent directories of a chosen
// entry are listed too, as a layer diff lists them.
func DirEntries(t testing.TB, dir string, pick func(rel string) bool) []Entry {
	t.Helper()
	var out []Entry
	listed := map[string]bool{}
	var addParents func(rel string)
	addParents = func(rel string) {
		p := filepath.ToSlash(filepath.Dir(rel))
		if p == "." || listed[p] {
			return
		}
		addParents(p)
		fi, err := os.Lstat(filepath.Join(dir, p))
		require.NoError(t, err)
		listed[p] = true
		out = append(out, Entry{Name: p + "/", Type: tar.TypeDir, Mode: tarMode(fi.Mode()), ModTime: fi.ModTime()})
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		rel, err := filepath.Rel(dir, p)
		require.NoError(t, err)
		rel = filepath.ToSlash(rel)
		if rel == "." || (pick != nil && !pick(rel)) {
			return nil
		}
		fi, err := d.Info()
		require.NoError(t, err)
		addParents(rel)
		e := Entry{Name: rel, Mode: tarMode(fi.Mode()), ModTime: fi.ModTime()}
		switch {
		case d.IsDir():
			if listed[rel] {
				return nil
			}
			listed[rel] = true
			e.Name, e.Type = rel+"/", tar.TypeDir
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Type = tar.TypeSymlink
			e.Linkname, err = os.Readlink(p)
			require.NoError(t, err)
		case fi.Mode().IsRegular():
			e.Type = tar.TypeReg
			e.Body, err = os.ReadFile(p)
			require.NoError(t, err)
		default:
			return nil // devices, sockets: not in test trees
		}
		out = append(out, e)
		return nil
	})
	require.NoError(t, err)
	return out
}

// tarMode is a file mode as a tar header spells it.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	for bit, c := range map[fs.FileMode]int64{fs.ModeSetuid: 0o4000, fs.ModeSetgid: 0o2000, fs.ModeSticky: 0o1000} {
		if m&bit != 0 {
			mode |= c
		}
	}
	return mode
}

// Format is how a layer is stored.
type Format string

// The layer formats.
const (
	Plain       Format = "plain"
	Gzip        Format = "gzip"
	Zstd        Format = "zstd"
	Estargz     Format = "estargz"
	ZstdChunked Format = "zstd:chunked"
)

// Layer is a built layer and the annotations its descriptor carries.
type Layer struct {
	v1.Layer
	Annotations map[string]string
}

// NewLayer stores the uncompressed tar tarball in format f.
func NewLayer(t testing.TB, tarball []byte, f Format) Layer {
	t.Helper()
	switch f {
	case Plain:
		return Layer{Layer: static.NewLayer(tarball, types.OCIUncompressedLayer)}
	case Gzip:
		var b bytes.Buffer
		zw, err := gzip.NewWriterLevel(&b, gzip.BestSpeed)
		require.NoError(t, err)
		_, err = zw.Write(tarball)
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		return Layer{Layer: compressed(t, b.Bytes(), types.OCILayer)}
	case Zstd:
		zw, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
		require.NoError(t, err)
		return Layer{Layer: compressed(t, zw.EncodeAll(tarball, nil), types.OCILayerZStd)}
	case Estargz, ZstdChunked:
		opts := []estargz.Option{estargz.WithChunkSize(64 << 10)}
		mt := types.OCILayer
		meta := map[string]string{}
		if f == ZstdChunked {
			opts = append(opts, estargz.WithCompression(zstdChunked{&zstdchunked.Compressor{CompressionLevel: zstd.SpeedFastest, Metadata: meta}, &zstdchunked.Decompressor{}}))
			mt = types.OCILayerZStd
		}
		blob, err := estargz.Build(io.NewSectionReader(bytes.NewReader(tarball), 0, int64(len(tarball))), opts...)
		require.NoError(t, err)
		defer blob.Close()
		b, err := io.ReadAll(blob)
		require.NoError(t, err)
		ann := map[string]string{estargz.TOCJSONDigestAnnotation: blob.TOCDigest().String()}
		for k, v := range meta {
			ann[k] = v
		}
		return Layer{Layer: compressed(t, b, mt), Annotations: ann}
	}
	t.Fatalf("ocitest: unknown layer format %q", f)
	return Layer{}
}

// zstdChunked is estargz's zstd:chunked compression.
type zstdChunked struct {
	*zstdchunked.Compressor
	*zstdchunked.Decompressor
}

// compressed is a layer of already compressed bytes.
func compressed(t testing.TB, b []byte, mt types.MediaType) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }, tarball.WithMediaType(mt))
	require.NoError(t, err)
	return l
}

// Image stacks layers (the first at the bottom) into an OCI image for
// platform ("linux/amd64", "linux/arm64/v8").
func Image(t testing.TB, platform string, layers ...Layer) v1.Image {
	t.Helper()
	p, err := v1.ParsePlatform(platform)
	require.NoError(t, err)
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	adds := make([]mutate.Addendum, 0, len(layers))
	for _, l := range layers {
		adds = append(adds, mutate.Addendum{Layer: l.Layer, Annotations: l.Annotations})
	}
	img, err = mutate.Append(img, adds...)
	require.NoError(t, err)
	cfg, err := img.ConfigFile()
	require.NoError(t, err)
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = p.OS, p.Architecture, p.Variant
	img, err = mutate.ConfigFile(img, cfg)
	require.NoError(t, err)
	return img
}

// Index makes a multi-arch index of images, each described by its
// configuration's platform.
func Index(t testing.TB, imgs ...v1.Image) v1.ImageIndex {
	t.Helper()
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, img := range imgs {
		cfg, err := img.ConfigFile()
		require.NoError(t, err)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}}})
	}
	return idx
}

// WriteLayout writes images and indexes into the OCI layout dir, each
// tagged with the name at the same position of tags ("" for none).
func WriteLayout(t testing.TB, dir string, tags []string, items ...any) {
	t.Helper()
	p, err := layout.Write(dir, empty.Index)
	require.NoError(t, err)
	for i, it := range items {
		var opts []layout.Option
		if i < len(tags) && tags[i] != "" {
			opts = append(opts, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tags[i]}))
		}
		switch x := it.(type) {
		case v1.Image:
			require.NoError(t, p.AppendImage(x, opts...))
		case v1.ImageIndex:
			require.NoError(t, p.AppendIndex(x, opts...))
		default:
			t.Fatalf("ocitest: %T is neither an image nor an index", it)
		}
	}
}

// WriteDockerArchive writes img as `docker save` of go-containerregistry's
// tarball package writes it (manifest.json, the configuration and
// gzip layers) to path, tagged tag.
func WriteDockerArchive(t testing.TB, path, tag string, img v1.Image) {
	t.Helper()
	ref, err := name.NewTag(tag)
	require.NoError(t, err)
	require.NoError(t, tarball.WriteToFile(path, ref, img))
}

// WriteClassicDockerArchive writes img as Docker before 25 saved images:
// manifest.json, the configuration as HEX.json, and each layer
// uncompressed as ID/layer.tar, where ID is not the layer's digest.
func WriteClassicDockerArchive(t testing.TB, path, tag string, img v1.Image) {
	t.Helper()
	cfgName, err := img.ConfigName()
	require.NoError(t, err)
	cfg, err := img.RawConfigFile()
	require.NoError(t, err)
	layers, err := img.Layers()
	require.NoError(t, err)
	var files []Entry
	var paths []string
	for i, l := range layers {
		rc, err := l.Uncompressed()
		require.NoError(t, err)
		b, err := io.ReadAll(rc)
		require.NoError(t, err)
		rc.Close()
		id := strings.Repeat(string(rune('a'+i%26)), 64)
		paths = append(paths, id+"/layer.tar")
		files = append(files, Dir(id+"/"), Entry{Name: id + "/layer.tar", Type: tar.TypeReg, Mode: 0o644, Body: b})
	}
	manifest := `[{"Config":"` + cfgName.Hex + `.json","RepoTags":["` + tag + `"],"Layers":["` + strings.Join(paths, `","`) + `"]}]`
	files = append(files, Entry{Name: cfgName.Hex + ".json", Type: tar.TypeReg, Mode: 0o644, Body: cfg},
		Reg("manifest.json", manifest))
	require.NoError(t, os.WriteFile(path, Tar(t, files...), 0o644))
}

// TarDir tars the host directory dir (an OCI layout) into path, as an
// oci-archive or Docker 25's docker save (which adds manifest.json) are.
func TarDir(t testing.TB, dir, path string, extra ...Entry) {
	t.Helper()
	entries := DirEntries(t, dir, nil)
	slices.SortStableFunc(entries, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	require.NoError(t, os.WriteFile(path, Tar(t, append(entries, extra...)...), 0o644))
}
