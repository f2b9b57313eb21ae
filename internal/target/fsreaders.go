package target

import (
	"io"

	"github.com/amilint/amilint/internal/ext4"
	"github.com/amilint/amilint/internal/rootfs"
	"github.com/amilint/amilint/internal/xfs"
)

// openExt4 plugs internal/ext4 into disk images.
func openExt4(r io.ReaderAt, size int64) (rootfs.Source, error) {
	f, err := ext4.Open(r, size)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// openXFS plugs internal/xfs into disk images.
func openXFS(r io.ReaderAt, size int64) (rootfs.Source, error) {
	f, err := xfs.Open(r, size)
	if err != nil {
		return nil, err
	}
	return f, nil
}
