package fix

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The atomic renames of Apply: swap two directories, or rename one only
// where nothing is (renameat2(2)).
const (
	renameExchange  = unix.RENAME_EXCHANGE
	renameNoReplace = unix.RENAME_NOREPLACE
)

func renameat(fromfd int, from string, tofd int, to string, mode int) error {
	return unix.Renameat2(fromfd, from, tofd, to, uint(mode))
}

// statTimes returns the access and modification times of st.
func statTimes(st *syscall.Stat_t) (atime, mtime time.Time) {
	return time.Unix(st.Atim.Unix()), time.Unix(st.Mtim.Unix())
}

// onOverlayfs reports whether the open directory fd is on overlayfs.
func onOverlayfs(fd int) bool {
	var st unix.Statfs_t
	return unix.Fstatfs(fd, &st) == nil && st.Type == unix.OVERLAYFS_SUPER_MAGIC
}
