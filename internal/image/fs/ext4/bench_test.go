package ext4

import (
	"path/filepath"
	"testing"

	"github.com/amilint/amilint/internal/image/imagetest"
)

// BenchmarkListSystemdDirs measures listing the systemd unit directories
// of an ext4 image of the Debian root another task's debootstrap leaves in
// .cache/debian-root, or else of a generated tree of 20,000 files.
func BenchmarkListSystemdDirs(b *testing.B) {
	img := scratch.BenchImage(b, func(dir, src string) string {
		return mkfsAt(b, src, filepath.Join(dir, "fs.img"), "3G", "-t", "ext4")
	})
	imagetest.BenchmarkListSystemdDirs(b, img, Open)
}
