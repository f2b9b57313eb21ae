package cli_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/target"
	"github.com/amilint/amilint/internal/systemd/install"
)

// benchTree is the Debian root the team's tools build under .cache (about
// 250 units, 29,000 files), else a generated tree.
func benchTree(b *testing.B) string {
	if p, err := filepath.Abs("../../.cache/debian-root"); err == nil {
		if _, err := os.Stat(filepath.Join(p, "usr/lib/os-release")); err == nil {
			return p
		}
	}
	dir := disktest.Tree(b)
	for i := range 2000 {
		p := filepath.Join(dir, fmt.Sprintf("usr/share/doc/pkg%d/copyright", i))
		require.NoError(b, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(b, os.WriteFile(p, []byte("Copyright\n"), 0o644))
	}
	return dir
}

var (
	benchOnce   sync.Once
	benchImages struct{ dir, raw, qcow2, tarZst string }
)

// images builds (once per tree, cached in the user cache directory across
// runs) a 4 GiB sparse raw GPT disk whose partition 2 is an ext4
// filesystem holding the tree, a qcow2 of it, and a tar.zst of the tree.
func images(b *testing.B) (dir, raw, qcow2, tarZst string) {
	benchOnce.Do(func() {
		tree := benchTree(b)
		fi, err := os.Stat(tree)
		require.NoError(b, err)
		key := sha256.Sum256([]byte(fmt.Sprint(tree, fi.ModTime().UnixNano(), "v1")))
		cache, err := os.UserCacheDir()
		require.NoError(b, err)
		out := filepath.Join(cache, "amilint-bench", hex.EncodeToString(key[:8]))
		benchImages.dir = tree
		benchImages.raw = filepath.Join(out, "disk.raw")
		benchImages.qcow2 = filepath.Join(out, "disk.qcow2")
		benchImages.tarZst = filepath.Join(out, "root.tar.zst")
		if _, err := os.Stat(benchImages.tarZst); err != nil {
			require.NoError(b, os.MkdirAll(out, 0o755))
			disktest.Run(b, "tar", "--zstd", "-cf", benchImages.tarZst+".tmp", "-C", tree, ".")
			require.NoError(b, os.Rename(benchImages.tarZst+".tmp", benchImages.tarZst))
		}
		if _, err := os.Stat(benchImages.qcow2); err == nil {
			return
		}
		require.NoError(b, os.MkdirAll(out, 0o755))
		tmp := benchImages.raw + ".tmp"
		require.NoError(b, os.WriteFile(tmp, nil, 0o644))
		require.NoError(b, os.Truncate(tmp, 4<<30))
		disktest.Run(b, "sgdisk", "-n", "1:2048:+8M", "-t", "1:ef00", "-n", "2:0:0", "-t", "2:8300", tmp)
		start := int64(2048+16384) * 512
		sizeK := (4<<30 - start - 1<<20) / 1024
		disktest.Run(b, "mke2fs", "-q", "-F", "-t", "ext4", "-E", fmt.Sprintf("offset=%d,root_owner=0:0", start),
			"-d", tree, tmp, fmt.Sprintf("%dk", sizeK))
		require.NoError(b, os.Rename(tmp, benchImages.raw))
		disktest.Run(b, "qemu-img", "convert", "-f", "raw", "-O", "qcow2", benchImages.raw, benchImages.qcow2+".tmp")
		require.NoError(b, os.Rename(benchImages.qcow2+".tmp", benchImages.qcow2))
	})
	return benchImages.dir, benchImages.raw, benchImages.qcow2, benchImages.tarZst
}

// BenchmarkOpenImage measures opening a target and finding its root (the
// partition holding os-release), and reports the bytes of the image file
// read and their share of the image.
func BenchmarkOpenImage(b *testing.B) {
	dir, raw, qcow2, _ := images(b)
	for _, tc := range []struct{ name, path string }{{"dir", dir}, {"raw", raw}, {"qcow2", qcow2}} {
		b.Run(tc.name, func(b *testing.B) {
			var read int64
			for b.Loop() {
				im, err := target.Open(context.Background(), tc.path, target.Options{})
				require.NoError(b, err)
				_, err = im.FS.ReadFile("etc/os-release")
				require.NoError(b, err)
				read = im.BytesRead()
				im.Close()
			}
			report(b, tc.path, read)
		})
	}
}

// BenchmarkUnits measures the whole unit file scan (`amilint units`) of
// the same tree as a directory, a raw disk, a qcow2, a tar.zst (which is
// decompressed whole to be indexed) and the same tar.zst read once as a
// stream (the "-" target).
func BenchmarkUnits(b *testing.B) {
	dir, raw, qcow2, tarZst := images(b)
	for _, tc := range []struct{ name, path string }{{"dir", dir}, {"raw", raw}, {"qcow2", qcow2}, {"tar.zst", tarZst}, {"stdin tar.zst", tarZst}} {
		b.Run(tc.name, func(b *testing.B) {
			var read int64
			var n int
			for b.Loop() {
				spec, opt := tc.path, target.Options{}
				var stream *os.File
				if tc.name == "stdin tar.zst" { // read once as a stream, as "-" is
					f, err := os.Open(tc.path)
					require.NoError(b, err)
					spec, opt.Stdin, stream = target.StdinTarget, onlyRead{f}, f
				}
				im, err := target.Open(context.Background(), spec, opt)
				require.NoError(b, err)
				units, err := install.List(im.FS, 0)
				require.NoError(b, err)
				n = len(units)
				read = im.BytesRead()
				im.Close()
				if stream != nil {
					stream.Close()
				}
			}
			b.ReportMetric(float64(n), "units")
			report(b, tc.path, read)
		})
	}
}

func report(b *testing.B, path string, read int64) {
	fi, err := os.Stat(path)
	require.NoError(b, err)
	if fi.IsDir() {
		return
	}
	b.ReportMetric(float64(read), "bytes-read/op")
	b.ReportMetric(100*float64(read)/float64(fi.Size()), "%file-read")
}

// onlyRead hides everything of a file but Read, as a pipe would.
type onlyRead struct{ f *os.File }

func (o onlyRead) Read(p []byte) (int, error) { return o.f.Read(p) }
