package imagetest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
)

// MkfsBtrfs makes img a btrfs filesystem of size ("64M") holding the tree
// src ("": empty), with mkfs.btrfs's further args.
func MkfsBtrfs(t testing.TB, img, size, src string, args ...string) {
	t.Helper()
	testenv.Tool(t, "mkfs.btrfs", "btrfs-progs")
	fh, err := os.Create(img)
	require.NoError(t, err)
	require.NoError(t, fh.Close())
	require.NoError(t, exec.Command("truncate", "-s", size, img).Run())
	a := append([]string{"-q", "-f"}, args...)
	if src != "" {
		a = append(a, "--rootdir", src)
	}
	out, err := exec.Command("mkfs.btrfs", append(a, img)...).CombinedOutput()
	require.NoError(t, err, "mkfs.btrfs %v: %s", args, out)
}

// MountBtrfs mounts the btrfs image img (a loop mount with the options
// opts, "" for none), runs the shell script in the mount point, and
// unmounts it: the kernel writes what mkfs.btrfs cannot (compressed
// extents, subvolumes). The mount is made in a mount namespace of its own,
// so that no process copying this one's mounts meanwhile (a container
// starting) keeps the filesystem mounted past the unmount, its last
// transaction unwritten. It needs root and loop devices; without them it
// stops t as missing.
func MountBtrfs(t testing.TB, img, opts, script string) {
	t.Helper()
	testenv.Root(t, "a btrfs loop mount")
	testenv.Tool(t, "btrfs", "btrfs-progs")
	testenv.Tool(t, "unshare", "util-linux")
	mnt := t.TempDir()
	o := "loop"
	if opts != "" {
		o += "," + opts
	}
	const noMount = 97 // the script's exit status when the mount fails
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-ec",
		"mount -t btrfs -o "+o+" "+shellQuote(img)+" "+shellQuote(mnt)+" || exit 97\n"+
			"cd "+shellQuote(mnt)+"\n"+
			"( "+script+" ) || { s=$?; cd /; umount "+shellQuote(mnt)+"; exit $s; }\n"+
			"sync -f .\ncd /\numount "+shellQuote(mnt))
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == noMount || errors.Is(err, exec.ErrNotFound) {
		testenv.Missing(t, "mount -o %s of a btrfs image in a mount namespace failed (unshare, loop devices, btrfs in the kernel): %v: %s", o, err, out)
		return
	}
	require.NoError(t, err, "in a btrfs mount (%s): %s: %s", o, script, out)
}

// Sh runs a shell command line in dir, failing t with its output.
func Sh(t testing.TB, dir, script string) {
	t.Helper()
	cmd := exec.Command("sh", "-ec", script)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s: %s", script, out)
}

// BtrfsFedora makes img (size "256M") a btrfs filesystem laid out as
// Fedora Cloud's: the top level (the default subvolume) holding the
// subvolumes root, with a copy of the tree src, and home; mount options
// opts ("compress=zstd:1") apply to the copy.
func BtrfsFedora(t testing.TB, img, size, src, opts string) {
	t.Helper()
	MkfsBtrfs(t, img, size, "")
	MountBtrfs(t, img, opts, "btrfs -q subvolume create root && btrfs -q subvolume create home && "+
		"mkdir -p home/user && echo hi > home/user/.profile && cp -a "+shellQuote(filepath.Clean(src))+"/. root/")
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
