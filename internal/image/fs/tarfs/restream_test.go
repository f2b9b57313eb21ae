package tarfs_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/fs/tarfs"
)

// mutable is a tarball whose bytes a test changes after opening it, as
// another process (or failing storage) could.
type mutable struct{ b []byte }

func (m *mutable) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(p, m.b[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// randomBytes are n incompressible bytes: gzip and zstd store them as
// they are, so a flipped byte of the stream is a flipped byte of the
// content and the stream still decodes.
func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 18))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func gzipStored(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.NoCompression)
	require.NoError(t, err)
	_, err = zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func zstdOf(t *testing.T, b []byte) []byte {
	zw, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(true))
	require.NoError(t, err)
	return zw.EncodeAll(b, nil)
}

// naiveReread is how a member was read again before its chunks were
// checked: decompress up to it and read its declared size.
func naiveReread(t *testing.T, stream []byte, comp tarfs.Compression, name string) ([]byte, error) {
	zr, err := tarfs.Decompress(bytes.NewReader(stream), comp)
	require.NoError(t, err)
	defer zr.Close()
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err != nil {
			return nil, err
		}
		if h.Name == name {
			return io.ReadAll(io.LimitReader(tr, h.Size))
		}
	}
}

// TestStreamedFileCheckedOnSecondReading opens a compressed tarball whose
// file is larger than MaxHeld (so it is streamed again when opened), then
// changes one byte of the stream inside that file's content and reads the
// file: the stream still decodes up to and through the file (only its
// trailer, further on, would tell), and the second reading fails instead
// of serving the changed bytes.
func TestStreamedFileCheckedOnSecondReading(t *testing.T) {
	const size = 3*64<<10 + 5000 // three whole chunks and a short one
	content := randomBytes(1, size)
	tarball := build(t, []entry{
		{name: "etc/os-release", typ: tar.TypeReg, body: "ID=debian\n"},
		{name: "usr/lib/big", typ: tar.TypeReg, body: string(content)},
		{name: "usr/lib/after", typ: tar.TypeReg, body: "after"},
		// The zstd decoder decodes a block ahead: with the file near
		// the end, reading it would reach the frame's checksum.
		{name: "usr/lib/tail", typ: tar.TypeReg, body: string(randomBytes(4, 512<<10))},
	})
	for _, tc := range []struct {
		comp   tarfs.Compression
		encode func(*testing.T, []byte) []byte
	}{{tarfs.Gzip, gzipStored}, {tarfs.Zstd, zstdOf}} {
		stream := tc.encode(t, tarball)
		for _, at := range []int{0, 70000, size - 1} {
			t.Run(fmt.Sprintf("%s/byte %d", tc.comp, at), func(t *testing.T) {
				// Where the content's byte at is in the stream.
				lo := max(0, min(at-16, size-32))
				i := bytes.Index(stream, content[lo:lo+32])
				require.Positive(t, i, "content stored as it is in the stream")
				i += at - lo
				m := &mutable{b: bytes.Clone(stream)}
				tf, err := tarfs.Open(m, int64(len(m.b)), tarfs.Options{})
				require.NoError(t, err)
				m.b[i] ^= 0x20

				// Without the check the changed byte is served, no error.
				naive, err := naiveReread(t, m.b, tc.comp, "usr/lib/big")
				require.NoError(t, err)
				require.NotEqual(t, content, naive)
				// The whole stream would fail only at its trailer.
				_, err = tarfs.Open(bytes.NewReader(m.b), int64(len(m.b)), tarfs.Options{})
				require.ErrorIs(t, err, tarfs.ErrCorrupt)

				_, err = tf.ReadFile("usr/lib/big")
				require.ErrorIs(t, err, tarfs.ErrCorrupt)
				assert.ErrorContains(t, err, "differ from the first, verified reading")
				// Read in small pieces: no byte of the changed chunk is
				// served before the error.
				f, err := tf.Open("usr/lib/big")
				require.NoError(t, err)
				got, err := io.ReadAll(iotest.OneByteReader(f))
				f.Close()
				require.ErrorIs(t, err, tarfs.ErrCorrupt)
				assert.Equal(t, content[:at/(64<<10)*(64<<10)], got, "what was served before the error is the chunks before the changed one")

				// Changed back, the file reads whole and equal.
				m.b[i] ^= 0x20
				b, err := tf.ReadFile("usr/lib/big")
				require.NoError(t, err)
				assert.Equal(t, content, b)
			})
		}
	}
}

// TestStreamedFileOtherValidStream replaces the tarball after opening it
// by another well-formed one whose big file differs in one byte: every
// trailer checks, and the second reading still fails.
func TestStreamedFileOtherValidStream(t *testing.T) {
	content := randomBytes(2, 100<<10)
	other := bytes.Clone(content)
	other[len(other)-1] ^= 1
	mk := func(body []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, err := zw.Write(build(t, []entry{{name: "big", typ: tar.TypeReg, body: string(body)}}))
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		return buf.Bytes()
	}
	m := &mutable{b: mk(content)}
	tf, err := tarfs.Open(m, int64(len(m.b)), tarfs.Options{})
	require.NoError(t, err)
	m.b = mk(other)
	_, err = tarfs.Open(bytes.NewReader(m.b), int64(len(m.b)), tarfs.Options{})
	require.NoError(t, err, "the replacement is a good tarball")
	_, err = tf.ReadFile("big")
	require.ErrorIs(t, err, tarfs.ErrCorrupt)
}

// sparseTar is a tarball holding one PAX 1.0 sparse file (GNU tar's
// --sparse format) of size bytes, half of data at the start and half at
// the end, a hole between, and then a small file. archive/tar writes no
// sparse files: the PAX header is written as a file and retyped.
func sparseTar(t *testing.T, data []byte, size int) []byte {
	half := len(data) / 2
	sparseMap := fmt.Sprintf("2\n0\n%d\n%d\n%d\n", half, size-(len(data)-half), len(data)-half)
	body := sparseMap + strings.Repeat("\x00", 512-len(sparseMap)) + string(data)
	var records strings.Builder
	for _, kv := range [][2]string{{"GNU.sparse.major", "1"}, {"GNU.sparse.minor", "0"}, {"GNU.sparse.name", "var/hole"}, {"GNU.sparse.realsize", fmt.Sprint(size)}} {
		rec := " " + kv[0] + "=" + kv[1] + "\n"
		n := len(rec) + 2
		if len(fmt.Sprint(n))+len(rec) != n {
			n++
		}
		fmt.Fprintf(&records, "%d%s", n, rec)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range [][2]string{{"PaxHeaders/hole", records.String()}, {"GNUSparseFile.0/hole", body}, {"etc/after", "after"}} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: f[0], Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f[1])), Format: tar.FormatUSTAR}))
		_, err := tw.Write([]byte(f[1]))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	b := buf.Bytes()
	h := b[:512]
	h[156] = tar.TypeXHeader
	copy(h[148:156], "        ")
	sum := 0
	for _, c := range h {
		sum += int(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// TestStreamedSparseFileCheckedAtItsEnd: a sparse file's second reading
// is checked by reading the stream on to its trailer before its last
// bytes are returned (its holes are not summed on the first reading: a
// few bytes of tarball may declare terabytes of them).
func TestStreamedSparseFileCheckedAtItsEnd(t *testing.T) {
	data := randomBytes(3, 8000)
	const size = 1 << 20
	stream := gzipStored(t, sparseTar(t, data, size))
	want := make([]byte, size)
	copy(want, data[:4000])
	copy(want[size-4000:], data[4000:])

	m := &mutable{b: bytes.Clone(stream)}
	tf, err := tarfs.Open(m, int64(len(m.b)), tarfs.Options{})
	require.NoError(t, err)
	b, err := tf.ReadFile("var/hole")
	require.NoError(t, err)
	require.Equal(t, want, b)

	// Uncompressed, the sparse file is streamed from the tarball as it is.
	plain := sparseTar(t, data, size)
	pf, err := tarfs.Open(bytes.NewReader(plain), int64(len(plain)), tarfs.Options{})
	require.NoError(t, err)
	b, err = pf.ReadFile("var/hole")
	require.NoError(t, err)
	require.Equal(t, want, b)

	i := bytes.Index(m.b, data[5000:5032])
	require.Positive(t, i)
	m.b[i] ^= 0x20
	_, err = tf.ReadFile("var/hole")
	require.ErrorIs(t, err, tarfs.ErrCorrupt)
	assert.ErrorContains(t, err, "CRC-32")
}
