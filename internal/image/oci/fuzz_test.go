package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/imagetest"
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

// layerNames and layerBodies are what fuzzed layers are built from
// (imagetest.Tar): whiteouts, opaque directories, links leaving the
// root, names that clean to the root or outside it.
var (
	layerNames = []string{"etc", "etc/a", "etc/b", "lib", "usr/lib", "usr/lib/x", "lib/z", "etc/.wh.a", "usr/lib/.wh..wh..opq",
		"etc/.wh..wh.plnk", "etc/.wh..", "a", "a/c", "/a/b", "../x", "../../etc/passwd", "x", ".", "./etc//a/", "etc/systemd/system/x.service"}
	layerBodies = []string{"1", "y", "", "escape", "[Service]\nExecStart=/bin/true\n"}
)

// FuzzApplyLayer applies two layers (the second over the first) built
// from fuzzed entries (imagetest.Tar over layerNames) and corrupted by
// fuzzed patches, and reads the result back: errors are fine, a panic, a
// hang or an entry outside the root are not. The input is the few bytes
// that build and patch the layers, not kilobytes of tar (the engine spent
// its time minimizing those).
func FuzzApplyLayer(f *testing.F) {
	// entry: name, kind, body or link target (indices, see imagetest.Tar).
	seeds := [][]byte{
		{0, 1, 0, 1, 0, 0, 3, 2, 4, 5, 0, 1, 2, 3, 1},       // dir etc, etc/a, lib -> usr/lib, usr/lib/x, hard etc/b -> etc/a
		{7, 0, 2, 8, 0, 2, 6, 0, 1, 9, 0, 2},                // whiteout etc/a, opaque usr/lib, lib/z, a hard-link whiteout
		{11, 2, 13, 12, 0, 0, 14, 0, 3},                     // a -> /a/b, a/c, ../x
		{10, 0, 2, 16, 3, 15, 17, 1, 0, 18, 0, 1, 19, 8, 4}, // etc/.wh.., hard x -> ../../etc/passwd, ".", PAX names
	}
	for i := range seeds {
		f.Add(seeds[i], seeds[(i+1)%len(seeds)], []byte{})
	}
	f.Add(seeds[0], seeds[1], []byte{0x9c, 0, 0, 0, '7', 0x01, 0x02, 0, 0, 0})
	f.Fuzz(func(t *testing.T, lower, upper, patch []byte) {
		a := imagetest.Tar(lower, layerNames, layerBodies)
		data := imagetest.Patch(append(a, imagetest.Tar(upper, layerNames, layerBodies)...), 1<<10, patch)
		tree := NewTree(TreeOptions{MaxEntries: 1 << 12, MaxMemory: 1 << 20})
		if err := tree.ApplyLayer(0, bytes.NewReader(data[:len(a)])); err != nil {
			return
		}
		_ = tree.ApplyLayer(1, bytes.NewReader(data[len(a):]))
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

// FuzzOpenArchive opens image archives built from fuzzed parameters and
// corrupted by fuzzed patches: an OCI layout or a docker-archive in a
// tarball, with one or two layers built from fuzzed entries
// (imagetest.Tar), plain or gzipped, with digests that match or not and a
// platform that matches or not. The input is the few bytes that build and
// patch the archive, not the archive: random bytes never got past the
// digests, and kilobytes of tar as input left the engine minimizing.
func FuzzOpenArchive(f *testing.F) {
	f.Add(uint8(0), []byte{0, 1, 0, 1, 0, 0, 19, 0, 4}, []byte{})
	f.Add(uint8(archOCI), []byte{0, 1, 0, 1, 0, 0, 19, 0, 4}, []byte{})
	f.Add(uint8(archOCI|archGzip|archTwoLayers), []byte{0, 1, 0, 1, 0, 0, 7, 0, 2, 3, 2, 4}, []byte{})
	f.Add(uint8(archGzip|archTwoLayers), []byte{0, 1, 0, 1, 0, 0, 7, 0, 2, 3, 2, 4}, []byte{})
	f.Add(uint8(archOCI|archBadDigest), []byte{1, 0, 0}, []byte{})
	f.Add(uint8(archOtherPlatform), []byte{1, 0, 0}, []byte{})
	f.Add(uint8(archOCI|archOtherPlatform), []byte{1, 0, 0}, []byte{0x00, 0x02, 0, 0, '{', 0x41, 0x10, 0, 0, '"'})
	f.Fuzz(func(t *testing.T, kind uint8, layer, patch []byte) {
		b := imagetest.Patch(imageArchive(t, kind, layer), 4<<10, patch)
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

// What imageArchive builds.
const (
	archOCI           = 1 << iota // an OCI layout (else a docker-archive)
	archGzip                      // gzipped layers
	archTwoLayers                 // the second from the second half of the entries
	archBadDigest                 // the configuration's diff IDs do not match
	archOtherPlatform             // linux/arm64 where linux/amd64 is asked for
)

// imageArchive builds an image archive holding the layers built from spec
// (see FuzzOpenArchive).
func imageArchive(t *testing.T, kind uint8, spec []byte) []byte {
	layers := [][]byte{imagetest.Tar(spec, layerNames, layerBodies)}
	if kind&archTwoLayers != 0 {
		layers = append(layers, imagetest.Tar(spec[len(spec)/2:], layerNames, layerBodies))
	}
	sum := func(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }
	var members [][2]string
	var diffIDs, layerDescs, dockerLayers []string
	for _, l := range layers {
		diff := sum(l)
		if kind&archBadDigest != 0 {
			diff = sum(append(l, 0))
		}
		diffIDs = append(diffIDs, strconv.Quote(diff))
		blob, mt := l, "application/vnd.oci.image.layer.v1.tar"
		if kind&archGzip != 0 {
			var zb bytes.Buffer
			zw := gzip.NewWriter(&zb)
			_, err := zw.Write(l)
			require.NoError(t, err)
			require.NoError(t, zw.Close())
			blob, mt = zb.Bytes(), mt+"+gzip"
		}
		members = append(members, [2]string{"blobs/sha256/" + sum(blob)[7:], string(blob)})
		layerDescs = append(layerDescs, fmt.Sprintf(`{"mediaType":%q,"digest":%q,"size":%d}`, mt, sum(blob), len(blob)))
		dockerLayers = append(dockerLayers, strconv.Quote("blobs/sha256/"+sum(blob)[7:]))
	}
	arch := "amd64"
	if kind&archOtherPlatform != 0 {
		arch = "arm64"
	}
	config := fmt.Sprintf(`{"architecture":%q,"os":"linux","config":{},"rootfs":{"type":"layers","diff_ids":[%s]}}`, arch, strings.Join(diffIDs, ","))
	members = append(members, [2]string{"blobs/sha256/" + sum([]byte(config))[7:], config})
	if kind&archOCI != 0 {
		manifest := fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":%d},"layers":[%s]}`,
			sum([]byte(config)), len(config), strings.Join(layerDescs, ","))
		index := fmt.Sprintf(`{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":%d,"platform":{"architecture":%q,"os":"linux"}}]}`,
			sum([]byte(manifest)), len(manifest), arch)
		members = append(members, [2]string{"blobs/sha256/" + sum([]byte(manifest))[7:], manifest},
			[2]string{"oci-layout", `{"imageLayoutVersion":"1.0.0"}`}, [2]string{"index.json", index})
	} else {
		members = append(members, [2]string{"manifest.json", fmt.Sprintf(`[{"Config":%q,"RepoTags":["x:latest"],"Layers":[%s]}]`,
			"blobs/sha256/"+sum([]byte(config))[7:], strings.Join(dockerLayers, ","))})
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, m := range members {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: m[0], Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(m[1]))}))
		_, err := tw.Write([]byte(m[1]))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return b.Bytes()
}
