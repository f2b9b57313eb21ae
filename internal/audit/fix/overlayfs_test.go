//go:build linux

package fix

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/amilint/amilint/fixtures/testenv"
)

// mountOverlay mounts an overlay of lower and a new upper layer with the
// extra options (may be "") and returns the merged directory and the
// upper layer; the test unmounts it.
func mountOverlay(t *testing.T, lower, options string) (merged, upper string) {
	t.Helper()
	tmp := t.TempDir()
	upper, work, merged := filepath.Join(tmp, "upper"), filepath.Join(tmp, "work"), filepath.Join(tmp, "merged")
	for _, d := range []string{upper, work, merged} {
		require.NoError(t, os.Mkdir(d, 0o755))
	}
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
	if options != "" {
		opts += "," + options
	}
	require.NoError(t, unix.Mount("overlay", merged, "overlay", 0, opts), "mount overlay %s", opts)
	t.Cleanup(func() {
		if err := unix.Unmount(merged, 0); err != nil {
			_ = unix.Unmount(merged, unix.MNT_DETACH)
		}
	})
	return merged, upper
}

// TestApplyOverlayLowerLayer applies a plan to an image that is an
// overlay whose /etc/systemd/system comes from the lower layer. overlayfs
// refuses to rename such a directory (EXDEV) unless mounted with
// redirect_dir=on: Apply then says so and what to do, and the image is
// exactly as before, with nothing left behind; with redirect_dir=on the
// same plan applies, atomically, as on a plain directory, and the lower
// layer is never written.
func TestApplyOverlayLowerLayer(t *testing.T) {
	testenv.Root(t, "mounting overlayfs")
	plainDir, p := crashTree(t)
	require.NoError(t, Apply(plainDir, p))
	want := snapshot(t, filepath.Join(plainDir, "etc/systemd/system"))

	lower, _ := crashTree(t)
	lowerBefore := snapshot(t, lower)
	sys := "etc/systemd/system"

	t.Run("default mount", func(t *testing.T) {
		merged, _ := mountOverlay(t, lower, "")
		before := snapshot(t, filepath.Join(merged, sys))
		err := Apply(merged, p)
		require.ErrorIs(t, err, unix.EXDEV)
		assert.ErrorContains(t, err, "/etc/systemd/system atomically: it is an overlayfs directory from a lower layer")
		assert.ErrorContains(t, err, "nothing was changed: remount the overlay with redirect_dir=on")
		assert.NotContains(t, err.Error(), "\n", "one line")
		assert.Equal(t, before, snapshot(t, filepath.Join(merged, sys)), "the image is as it was")
		assert.Empty(t, leftovers(t, merged))
		// A second run fails the same way, with nothing to remove.
		tree, err := Open(merged)
		require.NoError(t, err)
		assert.Empty(t, tree.Removed)
		require.ErrorIs(t, tree.Apply(p), unix.EXDEV)
		require.NoError(t, tree.Close())
		assert.Equal(t, before, snapshot(t, filepath.Join(merged, sys)))
	})
	t.Run("redirect_dir=on", func(t *testing.T) {
		merged, upper := mountOverlay(t, lower, "redirect_dir=on")
		require.NoError(t, Apply(merged, p))
		assert.Equal(t, want, snapshot(t, filepath.Join(merged, sys)))
		assert.Empty(t, leftovers(t, merged))
		_, err := os.Lstat(filepath.Join(upper, sys))
		assert.NoError(t, err, "the new tree is in the upper layer")
	})
	assert.Equal(t, lowerBefore, snapshot(t, lower), "the lower layer is never written")
}
