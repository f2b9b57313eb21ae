package security

import (
	"testing"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/rootfs"
)

func BenchmarkSteps(b *testing.B) {
	root := testenv.Bookworm.Path(b)
	d, _ := rootfs.OpenDir(root)
	defer d.Close()
	for b.Loop() {
		fsys := rootfs.New(d)
		ScoreImage(fsys, Options{})
	}
}
