package vdisk

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"io"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func zlibOf(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zlib.NewWriter(&buf)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// TestReadToEndChecksTheTrailer: a VMDK grain (zlib) is read to its end,
// so a wrong Adler-32 or a stream longer than the grain is corrupt, and
// a raw deflate qcow2 cluster must end where the cluster does.
func TestReadToEndChecksTheTrailer(t *testing.T) {
	data := bytes.Repeat([]byte("grain data "), 373)[:4096]
	good := zlibOf(t, data)
	out := make([]byte, 4096)
	require.NoError(t, readToEnd(mustZlib(t, good), out))
	assert.Equal(t, data, out)

	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 1
	assert.ErrorIs(t, readToEnd(mustZlib(t, bad), out), zlib.ErrChecksum)
	long := zlibOf(t, append(bytes.Clone(data), 'x'))
	assert.ErrorContains(t, readToEnd(mustZlib(t, long), out), "more than the cluster")
	assert.Error(t, readToEnd(mustZlib(t, good[:len(good)-2]), out), "no trailer")

	var raw bytes.Buffer
	fw, err := flate.NewWriter(&raw, flate.BestSpeed)
	require.NoError(t, err)
	_, err = fw.Write(append(bytes.Clone(data), "more"...))
	require.NoError(t, err)
	require.NoError(t, fw.Close())
	assert.ErrorContains(t, readToEnd(flate.NewReader(bytes.NewReader(raw.Bytes())), out), "more than the cluster")
}

func mustZlib(t *testing.T, b []byte) io.Reader {
	t.Helper()
	zr, err := zlib.NewReader(bytes.NewReader(b))
	require.NoError(t, err)
	return zr
}

// TestReadZstdToEnd reads qcow2 zstd clusters as qemu does: frames until
// the cluster is full, the last one ending there, padding or the next
// cluster after it; a wrong checksum or a frame running past the cluster
// is corrupt.
func TestReadZstdToEnd(t *testing.T) {
	data := bytes.Repeat([]byte("cluster "), 512)
	enc := func(b []byte) []byte {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(true))
		require.NoError(t, err)
		return e.EncodeAll(b, nil)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	require.NoError(t, err)
	defer dec.Close()
	out := make([]byte, len(data))
	one := enc(data)
	for name, src := range map[string][]byte{
		"one frame":                  one,
		"then padding":               append(bytes.Clone(one), 0, 0, 0, 0, 0, 0, 0),
		"then the next cluster":      append(bytes.Clone(one), enc([]byte("next"))...),
		"two frames":                 append(enc(data[:1000]), enc(data[1000:])...),
		"a skippable frame in front": append([]byte{0x50, 0x2a, 0x4d, 0x18, 2, 0, 0, 0, 'h', 'i'}, one...),
	} {
		clear(out)
		require.NoError(t, readZstdToEnd(dec, src, out), name)
		assert.Equal(t, data, out, name)
	}
	bad := bytes.Clone(one)
	bad[len(bad)-1] ^= 1
	assert.ErrorIs(t, readZstdToEnd(dec, bad, out), zstd.ErrCRCMismatch)
	assert.ErrorContains(t, readZstdToEnd(dec, enc(append(bytes.Clone(data), 'x')), out), "more than the cluster")
	assert.Error(t, readZstdToEnd(dec, one[:len(one)-5], out), "cut short")
	assert.Error(t, readZstdToEnd(dec, []byte("not zstd at all"), out))
}
