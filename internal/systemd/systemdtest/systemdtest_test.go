package systemdtest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunReportsVersion: each root's binaries are the version they claim,
// whatever the host runs.
func TestRunReportsVersion(t *testing.T) {
	for _, s := range Versions() {
		t.Run(s.Name(), func(t *testing.T) {
			o := s.Run(t, "", "systemctl", "--version")
			require.NoError(t, o.Err, "%s", o.Stderr)
			assert.True(t, strings.HasPrefix(string(o.Stdout), fmt.Sprintf("systemd %d ", s.Version)), "%s", o.Stdout)
		})
	}
}

// TestSystemctlSeesTheTree: systemctl --root lists the tree's units, not
// the root's, through the bind mount (and on the host for 252).
func TestSystemctlSeesTheTree(t *testing.T) {
	for _, s := range Versions() {
		t.Run(s.Name(), func(t *testing.T) {
			dir := t.TempDir()
			Write(t, dir,
				File("/usr/lib/systemd/system/probe.service", "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"),
				Link("/etc/systemd/system/multi-user.target.wants/probe.service", "/usr/lib/systemd/system/probe.service"))
			out := string(s.ListUnitFiles(t, dir))
			assert.Regexp(t, `(?m)^probe\.service\s+enabled\b`, out)
			assert.NotContains(t, out, "ssh.service", "the root's own units are not the tree's")
			assert.Empty(t, s.ListUnitFiles(t, t.TempDir()), "an empty tree lists nothing")

			// Run with the placeholder reaches the same tree.
			o := s.Run(t, dir, "systemctl", "--root="+Tree, "is-enabled", "probe.service")
			require.NoError(t, o.Err, "%s", o.Stderr)
			assert.Equal(t, "enabled\n", string(o.Stdout))
		})
	}
}

// TestRunLeavesTheRootAlone: systemd-analyze and systemctl write under
// /run and /tmp (systemd-units-load, temporary files); in a Run they write
// into tmpfs mounts of their own, never into the cached root.
func TestRunLeavesTheRootAlone(t *testing.T) {
	for _, s := range Versions() {
		t.Run(s.Name(), func(t *testing.T) {
			root := s.Path(t)
			dir := t.TempDir()
			Write(t, dir, File("/usr/lib/systemd/system/probe.service", "[Service]\nExecStart=/bin/true\n"))
			// The root's /run/systemd may hold a stamp an earlier run left;
			// what matters is that this run changes nothing there.
			mtimes := func() map[string]int64 {
				m := map[string]int64{}
				for _, p := range []string{"run", "run/systemd", "run/systemd/systemd-units-load", "tmp"} {
					if fi, err := os.Lstat(filepath.Join(root, p)); err == nil {
						m[p] = fi.ModTime().UnixNano()
					}
				}
				return m
			}
			before := mtimes()
			o := s.Run(t, dir, "systemd-analyze", "security", "--offline=true", "--root="+Tree, "probe.service")
			require.NoError(t, o.Err, "%s", o.Stderr)
			assert.Equal(t, before, mtimes(), "systemd-analyze wrote into the root's /run or /tmp")
		})
	}
}

// TestBootFailsOnMaskedRequirement: a masked unit that default.target
// requires fails the transaction, and systemd says which.
func TestBootFailsOnMaskedRequirement(t *testing.T) {
	for _, s := range Versions() {
		t.Run(s.Name(), func(t *testing.T) {
			up := s.Upper(t, append(s.MaskGenerators(t), Link("/etc/systemd/system/basic.target", "/dev/null")))
			tr := s.Boot(t, up)
			assert.Empty(t, tr.Start)
			assert.Contains(t, tr.Failed, "basic.target")
			assert.Contains(t, tr.Failed, "masked")

			tr = s.Boot(t, s.Upper(t, s.MaskGenerators(t)))
			assert.Empty(t, tr.Failed)
			assert.Contains(t, tr.Start, "basic.target")
			assert.Contains(t, tr.Start, "multi-user.target")
		})
	}
}

// TestUpperResolvesRootLinks: an entry under a linked directory of the
// root lands where the link points, so the overlay merges instead of
// hiding the root's directory, and Remove hides a root entry from both
// systemd and View.
func TestUpperResolvesRootLinks(t *testing.T) {
	for _, s := range Versions() {
		t.Run(s.Name(), func(t *testing.T) {
			root := s.Root.Path(t)
			fi, err := os.Lstat(filepath.Join(root, "lib"))
			require.NoError(t, err)
			require.NotZero(t, fi.Mode()&fs.ModeSymlink, "a merged-/usr root")
			up := s.Upper(t, []Entry{
				File("/lib/systemd/system/probe.service", "[Service]\nExecStart=/bin/true\n"),
				Remove("/lib/systemd/system/default.target"),
			})
			_, err = os.Lstat(filepath.Join(up, "usr/lib/systemd/system/probe.service"))
			require.NoError(t, err)
			_, err = os.Lstat(filepath.Join(up, "lib"))
			require.ErrorIs(t, err, fs.ErrNotExist)

			v := s.View(t, up)
			_, err = v.Stat("lib/systemd/system/probe.service")
			assert.NoError(t, err)
			_, err = v.Stat("lib/systemd/system/default.target")
			assert.ErrorIs(t, err, fs.ErrNotExist)
			_, err = v.Stat("lib/systemd/system/multi-user.target")
			assert.NoError(t, err, "the root's other units stay")
			ents, err := v.ReadDir("usr/lib/systemd/system")
			require.NoError(t, err)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			assert.Contains(t, names, "probe.service")
			assert.Contains(t, names, "multi-user.target")
			assert.NotContains(t, names, "default.target")

			// systemd sees the same: no default.target, so it falls back.
			tr := s.Boot(t, s.Upper(t, append(s.MaskGenerators(t), Remove("/lib/systemd/system/default.target"))))
			assert.Equal(t, "rescue.target", tr.Fallback)
			assert.Contains(t, tr.Start, "rescue.target")
		})
	}
}
