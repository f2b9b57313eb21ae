package fix

import (
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ownerEnv names the image directory a test re-run as the image's owner
// works on.
const ownerEnv = "AMILINT_FIX_TEST_OWNER_DIR"

// nobody is the unprivileged user a test run as root hands the image to.
const nobody = 65534

// asOwner runs the test body on a tree made by mk, as an unprivileged
// owner of the tree: root writes into any directory, the owner of an
// unpacked image only into those whose mode lets it. Run as root, the
// test re-runs itself as nobody on a tree nobody owns (the test binary is
// copied where nobody can run it); run as anyone else, it runs the body
// in place.
func asOwner(t *testing.T, mk func(t *testing.T, dir string), body func(t *testing.T, dir string)) {
	t.Helper()
	if dir := os.Getenv(ownerEnv); dir != "" {
		body(t, dir)
		return
	}
	if os.Geteuid() != 0 {
		dir := t.TempDir()
		mk(t, dir)
		// Let the test's own clean-up remove what the body leaves.
		t.Cleanup(func() {
			_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					_ = os.Chmod(p, 0o755)
				}
				return nil
			})
		})
		body(t, dir)
		return
	}
	base := t.TempDir()
	// The test's temporary directory and its parent are the test's own.
	require.NoError(t, os.Chmod(filepath.Dir(base), 0o755))
	require.NoError(t, os.Chmod(base, 0o755))
	dir := filepath.Join(base, "image")
	require.NoError(t, os.Mkdir(dir, 0o755))
	mk(t, dir)
	require.NoError(t, filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, nobody, nobody)
	}))
	bin := filepath.Join(base, "fix.test")
	src, err := os.Open(os.Args[0])
	require.NoError(t, err)
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(dst, src)
	src.Close()
	require.NoError(t, err)
	require.NoError(t, dst.Close())
	cmd := exec.Command(bin, "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), ownerEnv+"="+dir)
	cmd.Dir = base
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	t.Log(strings.TrimSpace(string(out)))
	require.NoError(t, err, "the test run as the image's owner failed")
}

// TestApplyAsOwnerWithReadOnlyDirectory: an image unpacked by a user may
// hold a directory that user may not write (mode 0555) under
// /etc/systemd/system, which systemctl --root leaves alone when nothing
// in it changes. Apply, run by the same user, swaps the copy in and then
// removes the old tree, read-only directory included: that must not
// fail, nor leave a tree behind that every later Open fails to remove.
func TestApplyAsOwnerWithReadOnlyDirectory(t *testing.T) {
	mk := func(t *testing.T, dir string) {
		base, _ := crashTree(t)
		require.NoError(t, os.CopyFS(dir, os.DirFS(base)))
		ro := filepath.Join(dir, "etc/systemd/system/ro.d")
		require.NoError(t, os.Mkdir(ro, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(ro, "keep.conf"), []byte("kept\n"), 0o644))
		require.NoError(t, os.Chmod(ro, 0o555))
	}
	asOwner(t, mk, func(t *testing.T, dir string) {
		p := &Plan{Changes: []Change{{Op: OpUnlink, Path: "/etc/systemd/system/multi-user.target.wants/a.service"}}}
		require.NoError(t, Apply(dir, p))
		_, err := os.Lstat(filepath.Join(dir, "etc/systemd/system/multi-user.target.wants/a.service"))
		assert.ErrorIs(t, err, fs.ErrNotExist)
		fi, err := os.Lstat(filepath.Join(dir, "etc/systemd/system/ro.d"))
		require.NoError(t, err)
		assert.Equal(t, fs.ModeDir|0o555, fi.Mode(), "the kept directory keeps its mode")
		b, err := os.ReadFile(filepath.Join(dir, "etc/systemd/system/ro.d/keep.conf"))
		require.NoError(t, err)
		assert.Equal(t, "kept\n", string(b))
		assert.Empty(t, leftovers(t, dir))

		// A change the owner may not make (inside the read-only
		// directory, where systemctl fails too) fails, and leaves
		// nothing for the next Open to trip on.
		require.NoError(t, os.Symlink("/dev/null", filepath.Join(dir, "etc/systemd/system/multi-user.target.wants/x.service")))
		err = Apply(dir, &Plan{Changes: []Change{{Op: OpWrite, Path: "/etc/systemd/system/ro.d/new.conf", Content: "x"}}})
		require.ErrorIs(t, err, fs.ErrPermission)
		assert.Empty(t, leftovers(t, dir))
		tr, err := Open(dir)
		require.NoError(t, err)
		require.NoError(t, tr.Close())
	})
}
