//go:build !amilint_guest

package target

import (
	"io"

	"github.com/amilint/amilint/internal/image/fs/ext4"
	"github.com/amilint/amilint/internal/image/fs/xfs"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// openExt4 plugs internal/image/fs/ext4 into disk images.
func openExt4(r io.ReaderAt, size int64) (rootfs.Source, error) {
	f, err := ext4.Open(r, size)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// openXFS plugs internal/image/fs/xfs into disk images.
func openXFS(r io.ReaderAt, size int64) (rootfs.Source, error) {
	f, err := xfs.Open(r, size)
	if err != nil {
		return nil, err
	}
	return f, nil
}
