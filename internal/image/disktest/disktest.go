// Package disktest builds real disk images for tests with the standard
// Debian tools (mke2fs, qemu-img, sfdisk, sgdisk). It is imported only by
// tests; a missing tool fails the test, since CI installs them all.
package disktest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Tree is a small image root: etc/os-release, a unit, an enablement
// symlink with an absolute target and a relative one.
func Tree(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "root")
	files := map[string]string{
		"usr/lib/os-release":                       "ID=debian\nVERSION_ID=12\n",
		"usr/lib/systemd/system/ecs.service":       "[Unit]\nDescription=ECS\n[Service]\nExecStart=/usr/bin/ecs\n[Install]\nWantedBy=multi-user.target\n",
		"usr/lib/systemd/system/ssh.service":       "[Service]\nExecStart=/usr/sbin/sshd\n[Install]\nWantedBy=multi-user.target\n",
		"usr/lib/systemd/system/multi-user.target": "[Unit]\nDescription=Multi-User\n",
		"etc/hostname":                             "image\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	// A pseudo-random blob spans many clusters and does not compress away.
	blob := make([]byte, 300<<10)
	x := uint32(2463534242)
	for i := range blob {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		blob[i] = byte(x)
	}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "usr/share/blob"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "usr/share/blob/data"), blob, 0o644))
	wants := filepath.Join(dir, "etc/systemd/system/multi-user.target.wants")
	require.NoError(t, os.MkdirAll(wants, 0o755))
	require.NoError(t, os.Symlink("/usr/lib/systemd/system/ecs.service", filepath.Join(wants, "ecs.service")))
	require.NoError(t, os.Symlink("../../../../usr/lib/systemd/system/ssh.service", filepath.Join(wants, "ssh.service")))
	require.NoError(t, os.Symlink("../usr/lib/os-release", filepath.Join(dir, "etc/os-release")))
	return dir
}

// Run runs a command and fails the test with its output if it fails.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "PATH="+os.Getenv("PATH")+":/usr/sbin:/sbin")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, out)
	return string(out)
}

// Ext4 builds an ext4 filesystem image of size (mke2fs syntax, "32M")
// holding dir and returns its path.
func Ext4(t testing.TB, dir, size string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "fs.ext4")
	Run(t, "mke2fs", "-q", "-F", "-t", "ext4", "-E", "root_owner=0:0", "-d", dir, img, size)
	return img
}

// debugfs runs debugfs's request on the ext4 image img and returns the
// numbers (decimal or 0x-hex) that re's groups match in its output.
func debugfs(t testing.TB, img, request, re string) []int64 {
	t.Helper()
	out := Run(t, "debugfs", "-R", request, img)
	m := regexp.MustCompile(re).FindStringSubmatch(out)
	require.NotNil(t, m, "%s in %q", re, out)
	nums := make([]int64, len(m)-1)
	for i, g := range m[1:] {
		n, err := strconv.ParseInt(g, 0, 64)
		require.NoError(t, err)
		nums[i] = n
	}
	return nums
}

// blockSize returns the block size of the ext4 image img.
func blockSize(t testing.TB, img string) int64 {
	return debugfs(t, img, "stats -h", `Block size:\s+(\d+)`)[0]
}

// DamageBlock overwrites the first block of path in the ext4 image img
// with garbage, where debugfs says it lies.
func DamageBlock(t testing.TB, img, path string) {
	t.Helper()
	blk := debugfs(t, img, "blocks "+path, `(?m)^(\d+)\s*$`)[0]
	bs := blockSize(t, img)
	f, err := os.OpenFile(img, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(bytes.Repeat([]byte{0xa5}, int(bs)), blk*bs)
	require.NoError(t, err)
}

// DamageInode flips a byte of path's inode (i_atime) in the ext4 image
// img, where debugfs says it lies: with metadata_csum the inode then
// fails its checksum.
func DamageInode(t testing.TB, img, path string) {
	t.Helper()
	at := debugfs(t, img, "imap "+path, `located at block (\d+), offset (0x[0-9a-f]+)`)
	off := at[0]*blockSize(t, img) + at[1] + 0x8
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off)
	require.NoError(t, err)
	b[0] ^= 0xff
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
}

// Convert converts the raw image src with qemu-img to format (qcow2,
// vmdk, vpc, vhdx) with extra qemu-img arguments and returns the new path.
func Convert(t testing.TB, src, format string, extra ...string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "disk."+format)
	args := append([]string{"convert", "-f", "raw", "-O", format}, extra...)
	Run(t, "qemu-img", append(args, src, dst)...)
	return dst
}

// SHA256 is the hex sha256 of the first n bytes of r.
func SHA256(t testing.TB, r io.ReaderAt, n int64) string {
	t.Helper()
	h := sha256.New()
	_, err := io.Copy(h, io.NewSectionReader(r, 0, n))
	require.NoError(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// FileSHA256 is the hex sha256 of a whole file and its size.
func FileSHA256(t testing.TB, path string) (string, int64) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	return SHA256(t, f, fi.Size()), fi.Size()
}

// Blkid is what `blkid -p -o udev` (low-level probing, no cache) says of
// img: the values udev's blkid builtin sets and names the /dev/disk links
// after. A volume blkid finds nothing on (its exit 2, no output) is an
// empty map.
func Blkid(t testing.TB, img string) map[string]string {
	t.Helper()
	cmd := exec.Command("blkid", "-p", "-o", "udev", img)
	cmd.Env = append(os.Environ(), "PATH="+os.Getenv("PATH")+":/usr/sbin:/sbin")
	o, err := cmd.Output()
	var exit *exec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 2 && len(o) == 0 {
		return map[string]string{}
	}
	require.NoError(t, err, "blkid -p %s", img)
	kv := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(o)), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			kv[k] = v
		}
	}
	return kv
}
