package xfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/ext4/imagetest"
	"github.com/amilint/amilint/internal/rootfs"
)

var (
	benchOnce sync.Once
	benchImg  string
)

// benchImage builds, once per test binary, an XFS image of the Debian
// root another task's debootstrap leaves in .cache/debian-root, or else of
// a generated tree of 20,000 files. Device nodes are left out (a proto
// file would need them made for real).
func benchImage(b *testing.B) string {
	b.Helper()
	benchOnce.Do(func() {
		dir, err := os.MkdirTemp("", "xfs-bench-")
		require.NoError(b, err)
		benchDirs = append(benchDirs, dir)
		src := imagetest.BenchTree(b, dir)
		proto := filepath.Join(dir, "proto")
		imagetest.ProtoFile(b, src, proto)
		img := filepath.Join(dir, "fs.img")
		require.NoError(b, os.WriteFile(img, nil, 0o644))
		require.NoError(b, os.Truncate(img, 3<<30))
		out, err := exec.Command("mkfs.xfs", "-q", "-f", "-p", proto, img).CombinedOutput()
		require.NoError(b, err, "mkfs.xfs: %s", out)
		fixRemoteSymlinks(b, img, src)
		benchImg = img
	})
	require.NotEmpty(b, benchImg, "bench image build failed earlier")
	return benchImg
}

// BenchmarkListSystemdDirs measures what listing the three systemd unit
// directories of an image costs: opening the filesystem, resolving the
// paths through the chroot view (/lib is a link on merged-/usr Debian) and
// reading the directories. B/op-read is the image bytes read.
func BenchmarkListSystemdDirs(b *testing.B) {
	img := benchImage(b)
	fh, err := os.Open(img)
	require.NoError(b, err)
	defer fh.Close()
	fi, err := fh.Stat()
	require.NoError(b, err)
	b.ResetTimer()
	var read int64
	entries := 0
	for b.Loop() {
		c := &imagetest.CountingReaderAt{R: fh}
		f, err := Open(c, fi.Size())
		require.NoError(b, err)
		view := rootfs.New(f)
		entries = 0
		for _, d := range imagetest.SystemdDirs {
			list, err := view.ReadDir(d)
			require.NoError(b, err)
			entries += len(list)
		}
		read += c.Bytes.Load()
	}
	b.ReportMetric(float64(read)/float64(b.N), "B/op-read")
	b.ReportMetric(float64(entries), "entries")
	b.ReportMetric(100*float64(read)/float64(b.N)/float64(fi.Size()), "%image-read")
}
