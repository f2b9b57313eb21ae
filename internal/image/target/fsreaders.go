//go:build !amilint_guest

package target

import (
	"io"

	"github.com/amilint/amilint/internal/image/fs/btrfs"
	"github.com/amilint/amilint/internal/image/fs/ext4"
	"github.com/amilint/amilint/internal/image/fs/xfs"
	"github.com/amilint/amilint/internal/image/integrity"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// openExt4 plugs internal/image/fs/ext4 into disk images.
func openExt4(r io.ReaderAt, size int64, check *integrity.Checker) (rootfs.Source, error) {
	f, err := ext4.OpenWith(r, size, check)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// openXFS plugs internal/image/fs/xfs into disk images.
func openXFS(r io.ReaderAt, size int64, check *integrity.Checker) (rootfs.Source, error) {
	f, err := xfs.OpenWith(r, size, check)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// openBtrfs plugs internal/image/fs/btrfs into disk images.
func openBtrfs(r io.ReaderAt, size int64, check *integrity.Checker) (rootfs.Source, error) {
	f, err := btrfs.OpenWith(r, size, check)
	if err != nil {
		return nil, err
	}
	return f, nil
}
