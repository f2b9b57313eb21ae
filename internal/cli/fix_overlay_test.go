//go:build linux

package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/fixtures/testenv"
)

// TestFixOverlayLowerLayer runs fix and fix --harden on an image that is
// an overlay mount whose /etc/systemd/system is in the lower layer, as a
// container's or a build's root often is. overlayfs will not rename that
// directory unless mounted with redirect_dir=on, so fix's atomic swap
// cannot happen: exit 2, one line naming the problem and what to do, the
// image untouched. With redirect_dir=on, fix works.
func TestFixOverlayLowerLayer(t *testing.T) {
	testenv.Root(t, "mounting overlayfs")
	lower := filepath.Join(t.TempDir(), "dlami")
	require.NoError(t, fixtures.Materialize("dlami", lower))
	mount := func(options string) string {
		tmp := t.TempDir()
		upper, work, merged := filepath.Join(tmp, "upper"), filepath.Join(tmp, "work"), filepath.Join(tmp, "merged")
		for _, d := range []string{upper, work, merged} {
			require.NoError(t, os.Mkdir(d, 0o755))
		}
		require.NoError(t, unix.Mount("overlay", merged, "overlay", 0, "lowerdir="+lower+",upperdir="+upper+",workdir="+work+options))
		t.Cleanup(func() {
			if err := unix.Unmount(merged, 0); err != nil {
				_ = unix.Unmount(merged, unix.MNT_DETACH)
			}
		})
		return merged
	}

	merged := mount("")
	before := treeState(t, merged)
	for _, args := range [][]string{{"fix", merged}, {"fix", merged, "--harden"}} {
		code, out, stderr := fixCLI(t, args...)
		require.Equal(t, ExitError, code, "%v\n%s\n%s", args, out, stderr)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		assert.Contains(t, stderr, "amilint fix: apply: exchange /etc/systemd/system atomically: it is an overlayfs directory from a lower layer")
		assert.Contains(t, stderr, "nothing was changed: remount the overlay with redirect_dir=on")
		assert.Equal(t, before, treeState(t, merged), "%v: the image is as it was", args)
	}

	merged = mount(",redirect_dir=on")
	code, out, stderr := fixCLI(t, "fix", merged)
	require.Equal(t, ExitOK, code, "%s\n%s", out, stderr)
	assert.Contains(t, out, "fixed: nothing at or above high remains")
	assert.Equal(t, "disabled", isEnabled(t, merged, "ecs.service"))
}
