package cli

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/fixtures/testenv"
)

func fixCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func fixTree(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	require.NoError(t, fixtures.Materialize(name, dir))
	return dir
}

// treeState lists every entry below dir with its type and link target.
func treeState(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := map[string]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		m[rel] = d.Type().String()
		if d.Type()&fs.ModeSymlink != 0 {
			tgt, err := os.Readlink(p)
			if err != nil {
				return err
			}
			m[rel] += " -> " + tgt
		}
		return nil
	}))
	return m
}

func isEnabled(t *testing.T, dir, unit string) string {
	t.Helper()
	testenv.Tool(t, "systemctl", "systemd")
	out, _ := exec.Command("systemctl", "--root="+dir, "is-enabled", unit).CombinedOutput()
	return strings.TrimSpace(string(out))
}

func TestFixThenScanExitsZero(t *testing.T) {
	dir := fixTree(t, "dlami")
	code, out, errOut := fixCLI(t, "fix", dir)
	require.Equal(t, ExitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "rm /etc/systemd/system/multi-user.target.wants/ecs.service\n")
	assert.Contains(t, out, "systemctl --root="+dir+" disable ")
	assert.Contains(t, out, "fixed: nothing at or above high remains")
	_, err := os.Lstat(filepath.Join(dir, "etc/systemd/system/multi-user.target.wants/ecs.service"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
	assert.Equal(t, "disabled", isEnabled(t, dir, "ecs.service"))

	code, out, errOut = fixCLI(t, "scan", dir)
	assert.Equal(t, ExitOK, code, "scan after fix:\n%s\n%s", out, errOut)

	// A second fix has nothing left to do.
	code, out, _ = fixCLI(t, "fix", dir)
	assert.Equal(t, ExitOK, code)
	assert.Contains(t, out, "nothing to change")
}

func TestFixAtMediumMasksAndReportsWhatRemains(t *testing.T) {
	dir := fixTree(t, "dlami")
	code, out, errOut := fixCLI(t, "fix", dir, "--fail-on", "medium")
	// Findings whose remediation is "configure" cannot be fixed by disable
	// or mask (containerd.service's crash-loop restart policy in dlami):
	// fix says so and exits as the re-audit does.
	require.Equal(t, ExitFindings, code, "%s\n%s", out, errOut)
	assert.Contains(t, out, "remaining: medium crash-loop-restart containerd.service (remediation configure: not fixable by disable/mask)\n")
	assert.Contains(t, out, "ln -s /dev/null /etc/systemd/system/")
	assert.Contains(t, out, " mask ")
	code2, _, _ := fixCLI(t, "scan", dir, "--fail-on", "medium")
	assert.Equal(t, code, code2, "fix exits as a re-audit does")
}

func TestFixDryRunWritesNothing(t *testing.T) {
	dir := fixTree(t, "dlami")
	before := treeState(t, dir)
	code, out, _ := fixCLI(t, "fix", "--dry-run", dir)
	assert.Equal(t, ExitFindings, code, "a dry run exits as the audit of the unchanged image")
	assert.Contains(t, out, "would apply (dry run)")
	assert.Contains(t, out, "rm /etc/systemd/system/multi-user.target.wants/ecs.service\n")
	assert.Equal(t, before, treeState(t, dir))
	assert.Equal(t, "enabled", isEnabled(t, dir, "ecs.service"))
}

func TestFixLeavesConfiguredECSEnabled(t *testing.T) {
	dir := fixTree(t, "dlami-ecs-configured")
	code, out, errOut := fixCLI(t, "fix", dir)
	require.Equal(t, ExitOK, code, "%s\n%s", out, errOut)
	assert.NotContains(t, out, "ecs.service")
	_, err := os.Lstat(filepath.Join(dir, "etc/systemd/system/multi-user.target.wants/ecs.service"))
	assert.NoError(t, err)
	assert.Equal(t, "enabled", isEnabled(t, dir, "ecs.service"))
}

func TestFixRefusesReadOnlyTargets(t *testing.T) {
	dir := fixTree(t, "dlami")
	tarball := filepath.Join(t.TempDir(), "image.tar")
	tarOut, err := exec.Command("tar", "-cf", tarball, "-C", dir, ".").CombinedOutput()
	require.NoError(t, err, "%s", tarOut)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no target", []string{"fix"}, "is read-only; unpack it first"},
		{"fixture", []string{"fix", "fixture:dlami"}, "a fixture target is read-only"},
		{"tarball", []string{"fix", tarball}, "a tar target is read-only"},
		{"two targets", []string{"fix", dir, dir}, "one TARGET expected"},
		{"bad flag", []string{"fix", "--fail-on", "worst", dir}, "--fail-on"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errOut := fixCLI(t, c.args...)
			assert.Equal(t, ExitError, code)
			assert.Contains(t, errOut, c.want)
		})
	}
	assert.Equal(t, "enabled", isEnabled(t, dir, "ecs.service"))
}

// TestFixSaysWhyAUnitStillStarts: when the link that enables a unit lives
// in a .wants directory reached through a symlink, disable (like systemctl
// disable) does not remove it; fix names what still makes the unit start
// instead of pointing at notes it did not print.
func TestFixSaysWhyAUnitStillStarts(t *testing.T) {
	dir := fixTree(t, "dlami")
	wants := filepath.Join(dir, "etc/systemd/system/multi-user.target.wants")
	require.NoError(t, os.Rename(wants, filepath.Join(dir, "etc/wants-elsewhere")))
	require.NoError(t, os.Symlink("/etc/wants-elsewhere", wants))
	code, out, errOut := fixCLI(t, "fix", dir)
	require.Equal(t, ExitFindings, code, "%s\n%s", out, errOut)
	assert.Contains(t, out, "remaining: high ecs-agent-unconfigured ecs.service (remediation disable: still starts at boot after the change, as it would after systemctl disable; what makes it start is /etc/systemd/system/multi-user.target.wants/ecs.service)")
	assert.NotContains(t, out, "see the notes above")
}
