package target

import (
	"io"

	"github.com/amilint/amilint/internal/rootfs"
)

// openExt4 and openXFS plug the filesystem readers into disk images. They
// are nil until internal/ext4 and internal/xfs land.
var (
	openExt4 func(r io.ReaderAt, size int64) (rootfs.Source, error)
	openXFS  func(r io.ReaderAt, size int64) (rootfs.Source, error)
)
