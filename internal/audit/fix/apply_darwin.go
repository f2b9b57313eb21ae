package fix

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The atomic renames of Apply on macOS: renameatx_np(2) with RENAME_SWAP
// and RENAME_EXCL are renameat2's RENAME_EXCHANGE and RENAME_NOREPLACE.
const (
	renameExchange  = unix.RENAME_SWAP
	renameNoReplace = unix.RENAME_EXCL
)

func renameat(fromfd int, from string, tofd int, to string, mode int) error {
	return unix.RenameatxNp(fromfd, from, tofd, to, uint32(mode))
}

// statTimes returns the access and modification times of st.
func statTimes(st *syscall.Stat_t) (atime, mtime time.Time) {
	return time.Unix(st.Atimespec.Unix()), time.Unix(st.Mtimespec.Unix())
}

// onOverlayfs reports whether the open directory fd is on overlayfs,
// which macOS does not have.
func onOverlayfs(int) bool { return false }
