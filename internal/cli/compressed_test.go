package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
)

// tarOf returns dir as a tarball.
func tarOf(t *testing.T, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.AddFS(os.DirFS(dir).(fs.ReadLinkFS)))
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

// gz compresses b as one gzip member at level.
func gz(t *testing.T, b []byte, level int) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, level)
	require.NoError(t, err)
	_, err = zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// tarGz returns dir as a tarball compressed with gzip at level.
func tarGz(t *testing.T, dir string, level int) []byte {
	t.Helper()
	return gz(t, tarOf(t, dir), level)
}

// scanBytes scans b given as a file and on standard input and returns
// both exit codes and stderrs.
func scanBytes(t *testing.T, b []byte) (file, stdin int, fileErr, stdinErr string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "image.tar.gz")
	require.NoError(t, os.WriteFile(p, b, 0o644))
	file, _, fileErr = runCLI(t, "scan", p, "-o", "json")
	stdin, _, stdinErr = runStdin(t, b, "scan", "-", "-o", "json")
	return
}

// runStdin runs the CLI in-process with b on a real pipe as its standard
// input.
func runStdin(t *testing.T, b []byte, args ...string) (int, string, string) {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	go func() {
		_, _ = w.Write(b)
		w.Close()
	}()
	old := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = old; r.Close() }()
	return runCLI(t, args...)
}

// TestCorruptGzipExitsTwo: a .tar.gz whose CRC does not match, whose
// trailer is missing, or whose stored data changed under its CRC (the
// crash-loop finding would silently go) exits 2 with one line, from a
// file and from standard input alike.
func TestCorruptGzipExitsTwo(t *testing.T) {
	dir := materialize(t, "dlami")
	good := tarGz(t, dir, gzip.NoCompression)
	file, stdin, _, _ := scanBytes(t, good)
	require.Equal(t, ExitFindings, file)
	require.Equal(t, ExitFindings, stdin)

	badCRC := bytes.Clone(good)
	badCRC[len(badCRC)-8] ^= 0x01 // CRC-32, first byte of the trailer
	badSize := bytes.Clone(good)
	badSize[len(badSize)-1] ^= 0x01
	i := bytes.Index(good, []byte("Restart=on-failure"))
	require.Positive(t, i, "stored blocks hold the unit file as is")
	edited := bytes.Clone(good)
	edited[i+len("Restart=on-")] = 'X' // Restart=on-Xailure: no restart, no crash loop
	for name, b := range map[string][]byte{
		"bad CRC":        badCRC,
		"bad length":     badSize,
		"no trailer":     good[:len(good)-8],
		"half a trailer": good[:len(good)-3],
		"edited data":    edited,
		"trailing junk":  append(bytes.Clone(good), "junk"...),
		"reserved flag":  append([]byte{good[0], good[1], good[2], good[3] | 0x80}, good[4:]...),
	} {
		file, stdin, fileErr, stdinErr := scanBytes(t, b)
		assert.Equal(t, ExitError, file, "%s from a file: %s", name, fileErr)
		assert.Equal(t, ExitError, stdin, "%s from stdin: %s", name, stdinErr)
		for _, e := range []string{fileErr, stdinErr} {
			assert.Equal(t, 1, strings.Count(e, "\n"), "%s: one line: %q", name, e)
			assert.Contains(t, e, "gzip: corrupt tarball", name)
		}
	}
	// A tarball split over two members (pigz, concatenated files) is one
	// valid gzip file; a flipped CRC in its first member is caught too.
	tb := tarOf(t, dir)
	first := gz(t, tb[:len(tb)/2], gzip.NoCompression)
	two := append(bytes.Clone(first), gz(t, tb[len(tb)/2:], gzip.BestSpeed)...)
	file, stdin, fileErr, _ := scanBytes(t, two)
	assert.Equal(t, ExitFindings, file, fileErr)
	assert.Equal(t, ExitFindings, stdin)
	two[len(first)-8] ^= 0x01
	file, stdin, fileErr, _ = scanBytes(t, two)
	assert.Equal(t, ExitError, file)
	assert.Equal(t, ExitError, stdin)
	assert.Contains(t, fileErr, "member 1: the data does not match the CRC-32 or length in its trailer")
}

// TestCorruptZstdExitsTwo: a .tar.zst whose frame checksum does not
// match, or that is cut short, exits 2 from a file and from stdin.
func TestCorruptZstdExitsTwo(t *testing.T) {
	dir := materialize(t, "dlami")
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithEncoderCRC(true))
	require.NoError(t, err)
	_, err = zw.Write(tarOf(t, dir))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	good := buf.Bytes()
	file, stdin, _, _ := scanBytes(t, good)
	require.Equal(t, ExitFindings, file)
	require.Equal(t, ExitFindings, stdin)
	badSum := bytes.Clone(good)
	badSum[len(badSum)-1] ^= 0x01
	for name, b := range map[string][]byte{"bad checksum": badSum, "cut short": good[:len(good)-2]} {
		file, stdin, fileErr, stdinErr := scanBytes(t, b)
		assert.Equal(t, ExitError, file, "%s from a file: %s", name, fileErr)
		assert.Equal(t, ExitError, stdin, "%s from stdin: %s", name, stdinErr)
		assert.Contains(t, fileErr, "zstd: corrupt tarball", name)
	}
}

// TestGzipFlipsGzipRejects flips one byte at seeded places of a .tar.gz:
// every flip `gzip -t` rejects exits 2 from a file and from stdin.
// AMILINT_GZIP_FLIPS raises the number of flips (default 24).
func TestGzipFlipsGzipRejects(t *testing.T) {
	testenv.Tool(t, "gzip", "gzip")
	dir := materialize(t, "dlami")
	good := tarGz(t, dir, gzip.BestCompression)
	flips := 24
	if v := os.Getenv("AMILINT_GZIP_FLIPS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		flips = n
	}
	r := rand.New(rand.NewPCG(19, uint64(len(good))))
	rejected := 0
	for k := range flips {
		b := bytes.Clone(good)
		// Spread the flips over the header, the data and the trailer.
		var at int
		switch k % 3 {
		case 0:
			at = r.IntN(10)
		case 1:
			at = 10 + r.IntN(len(b)-18)
		default:
			at = len(b) - 8 + r.IntN(8)
		}
		b[at] ^= byte(1 + r.IntN(255))
		p := filepath.Join(t.TempDir(), "flip.tar.gz")
		require.NoError(t, os.WriteFile(p, b, 0o644))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := exec.CommandContext(ctx, "gzip", "-t", p).Run()
		cancel()
		if err == nil {
			continue // gzip accepts it (a changed MTIME, say)
		}
		rejected++
		file, stdin, fileErr, stdinErr := scanBytes(t, b)
		assert.Equal(t, ExitError, file, "byte %d flipped, from a file: %s", at, fileErr)
		assert.Equal(t, ExitError, stdin, "byte %d flipped, from stdin: %s", at, stdinErr)
	}
	t.Logf("gzip -t rejected %d of %d flips", rejected, flips)
	assert.Greater(t, rejected, flips/2)
}
