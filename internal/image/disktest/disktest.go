// Package disktest builds real disk images for tests with the standard
// Debian tools (mke2fs, qemu-img, sfdisk, sgdisk). It is imported only by
// tests; a missing tool fails the test, since CI installs them all.
package disktest

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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
