package xfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/imagetest"
)

// BenchmarkListSystemdDirs measures listing the systemd unit directories
// of an XFS image of the Debian root another task's debootstrap leaves in
// .cache/debian-root, or else of a generated tree of 20,000 files. Device
// nodes are left out (a proto file would need them made for real).
func BenchmarkListSystemdDirs(b *testing.B) {
	img := scratch.BenchImage(b, func(dir, src string) string {
		proto := filepath.Join(dir, "proto")
		imagetest.ProtoFile(b, src, proto)
		img := filepath.Join(dir, "fs.img")
		require.NoError(b, os.WriteFile(img, nil, 0o644))
		require.NoError(b, os.Truncate(img, 3<<30))
		out, err := exec.Command("mkfs.xfs", "-q", "-f", "-p", proto, img).CombinedOutput()
		require.NoError(b, err, "mkfs.xfs: %s", out)
		fixRemoteSymlinks(b, img, src)
		return img
	})
	imagetest.BenchmarkListSystemdDirs(b, img, Open)
}
