//go:build linux

package archive

import (
	"io/fs"
	"syscall"
)

// allocated is the space a file takes on disk (its holes take none).
func allocated(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}
