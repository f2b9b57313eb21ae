package btrfs

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/imagetest"
	"github.com/amilint/amilint/internal/image/integrity"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// smallTree is the tree the fuzz seeds hold: os-release, a unit, an
// enablement link, a long link, a compressible file.
func smallTree(t testing.TB) string {
	t.Helper()
	src := t.TempDir()
	for name, body := range map[string]string{
		"etc/os-release":                     "ID=debian\n",
		"usr/lib/systemd/system/ssh.service": strings.Repeat("[Unit]\n", 20),
		"usr/share/text":                     strings.Repeat("some text to compress\n", 2000),
	} {
		p := filepath.Join(src, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(src, "etc/systemd/system/multi-user.target.wants"), 0o755))
	require.NoError(t, os.Symlink("/usr/lib/systemd/system/ssh.service", filepath.Join(src, "etc/systemd/system/multi-user.target.wants/ssh.service")))
	require.NoError(t, os.Symlink(strings.Repeat("slow/", 20), filepath.Join(src, "etc/slow")))
	return src
}

// fuzzImage is a seed image and where its structures are: the superblock
// and the tree blocks a walk reads, so patches land in them.
type fuzzImage struct {
	b      []byte
	size   int64
	blocks []int64 // physical offsets of the tree blocks read
	node   int64
}

func newFuzzImage(t testing.TB, img string) fuzzImage {
	t.Helper()
	fh, err := os.Open(img)
	require.NoError(t, err)
	defer fh.Close()
	fi, err := fh.Stat()
	require.NoError(t, err)
	f, err := Open(fh, fi.Size())
	require.NoError(t, err)
	_, err = imagetest.Walk(f, 2000)
	require.NoError(t, err)
	im := fuzzImage{b: imagetest.Compact(t, fh, fi.Size(), nil), size: fi.Size(), node: f.nodeSize}
	for l := range f.nodes {
		at, err := f.physical(l, f.nodeSize)
		require.NoError(t, err)
		im.blocks = append(im.blocks, at)
	}
	return im
}

// patched applies patch, offset and value pairs of five bytes: an even
// offset lands in the superblock, an odd one in a tree block read.
func (im fuzzImage) patched(patch []byte) io.ReaderAt {
	p := &imagetest.Patched{Base: imagetest.NewCompactReader(im.b, im.size), Patches: map[int64]byte{}}
	for i := 0; i+5 <= len(patch) && i < 5*64; i += 5 {
		off := int64(binary.LittleEndian.Uint32(patch[i:]))
		if off&1 == 0 || len(im.blocks) == 0 {
			off = superOff + off%superSize
		} else {
			off >>= 1
			off = im.blocks[off%int64(len(im.blocks))] + (off/int64(len(im.blocks)))%im.node
		}
		p.Patches[off] = patch[i+4]
	}
	return p
}

// FuzzBtrfs damages the superblock and tree blocks of small images (the
// checksums left as they are, so strictly they are mostly mismatches, and
// leniently the damaged structures are parsed): never a panic or a hang.
func FuzzBtrfs(f *testing.F) {
	src := smallTree(f)
	var images []fuzzImage
	for _, args := range [][]string{{"-m", "single"}, {"-n", "4096", "--csum", "xxhash"}} {
		images = append(images, newFuzzImage(f, mkfs(f, src, "128M", args...)))
	}
	for i := range images {
		f.Add(uint8(i), []byte{})
		f.Add(uint8(i), []byte{0x61, 0x00, 0x00, 0x00, 0xff})
		f.Add(uint8(i), []byte{0xa0, 0x00, 0x00, 0x00, 0x07, 0x31, 0x01, 0x00, 0x00, 0x00})
	}
	f.Fuzz(func(t *testing.T, which uint8, patch []byte) {
		im := images[int(which)%len(images)]
		for _, check := range []*integrity.Checker{nil, integrity.Lenient(&integrity.Log{})} {
			fsys, err := OpenWith(im.patched(patch), im.size, check)
			if err != nil {
				continue
			}
			_, _ = imagetest.Walk(fsys, 2000)
			_, _ = fsys.ReadLink("etc/slow")
			_, _ = fsys.ReadFile("usr/share/text")
			_, _ = rootfs.New(fsys).ReadFile("etc/systemd/system/multi-user.target.wants/ssh.service")
		}
	})
}

// FuzzDecompress runs the decompressors on arbitrary extents: never a
// panic, never more than the extent's size.
func FuzzDecompress(f *testing.F) {
	text := []byte(strings.Repeat("some text to compress\n", 400))
	var zl bytes.Buffer
	zw := zlibWriter(&zl)
	_, _ = zw.Write(text)
	_ = zw.Close()
	f.Add(uint8(compZlib), zl.Bytes(), uint32(len(text)))
	f.Add(uint8(compZstd), zstdEncode(text), uint32(len(text)))
	// LZO1X: a literal run, a match, the end marker, in btrfs's segments.
	lzo := []byte{17 + 4, 'a', 'b', 'c', 'd', 0x20 | 3, 0x0c, 0x00, 0x11, 0x00, 0x00}
	seg := binary.LittleEndian.AppendUint32(nil, uint32(8+len(lzo)))
	seg = binary.LittleEndian.AppendUint32(seg, uint32(len(lzo)))
	f.Add(uint8(compLZO), append(seg, lzo...), uint32(9))
	f.Fuzz(func(t *testing.T, comp uint8, src []byte, ram uint32) {
		n := int(ram % (maxCompressed + 1))
		out, err := decompress(comp%4, src, n, 4096)
		if err == nil && len(out) != n {
			t.Fatalf("%d bytes out, want %d", len(out), n)
		}
		dst := make([]byte, 4096)
		got, _ := lzo1xDecompress(dst, src)
		if got < 0 || got > len(dst) {
			t.Fatalf("lzo1x wrote %d bytes", got)
		}
	})
}

func zlibWriter(w io.Writer) io.WriteCloser { return zlib.NewWriter(w) }

func zstdEncode(b []byte) []byte {
	e, err := zstd.NewWriter(nil)
	if err != nil {
		panic(err)
	}
	return e.EncodeAll(b, nil)
}

// TestLZO1X decodes the hand-made seed: a literal run, an overlapping
// match and the end marker; the kernel-written extents are read back in
// TestCompressedExtents.
func TestLZO1X(t *testing.T) {
	dst := make([]byte, 16)
	n, err := lzo1xDecompress(dst, []byte{17 + 4, 'a', 'b', 'c', 'd', 0x20 | 3, 0x0c, 0x00, 0x11, 0x00, 0x00})
	require.NoError(t, err)
	require.Equal(t, "abcdabcda", string(dst[:n]))
	_, err = lzo1xDecompress(dst, []byte{17 + 4, 'a', 'b', 'c', 'd', 0x20 | 3, 0x0c, 0x00, 0x11, 0x00, 0x00, 0x00})
	require.ErrorIs(t, err, ErrCorrupt, "bytes after the end marker")
	_, err = lzo1xDecompress(dst, []byte{17 + 4, 'a', 'b', 'c', 'd', 0x20 | 3, 0xfc, 0x00, 0x11, 0x00, 0x00})
	require.ErrorIs(t, err, ErrCorrupt, "a match before the output")
}
