package facts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// TestExecExistsAgainstSystemd is differential: systemd-analyze verify
// --root (systemd's own executable lookup, chasing links inside the root)
// decides which ExecStart= commands cannot be executed; exec_start.exists
// must say false for exactly those.
func TestExecExistsAgainstSystemd(t *testing.T) {
	tool := testenv.Tool(t, "systemd-analyze", "systemd")
	root := t.TempDir()
	mk := func(p, data string, mode os.FileMode) {
		full := filepath.Join(root, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(data), mode))
	}
	link := func(p, target string) {
		full := filepath.Join(root, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.Symlink(target, full))
	}
	mk("usr/bin/foo", "#!/bin/sh\n", 0o755)
	mk("opt/app/real", "#!/bin/sh\n", 0o755)
	mk("usr/sbin/daemon", "#!/bin/sh\n", 0o755)
	require.NoError(t, os.MkdirAll(filepath.Join(root, "opt/app/dir"), 0o755))
	link("bin", "usr/bin")
	link("opt/app/run", "/opt/app/real")
	link("opt/app/escape", "../../../../usr/bin/foo")
	link("opt/app/dangling", "/opt/app/none")
	link("opt/app/loop", "loop")
	link("etc/alternatives/d", "/usr/sbin/daemon")
	link("usr/local/bin/d", "/etc/alternatives/d")

	// Commands with a "-" prefix are not checked by systemd (their failure
	// is ignored), and verify does not apply ExecSearchPath=; both are left
	// out of the comparison.
	cases := map[string]string{
		"absolute.service":         "/usr/bin/foo --flag",
		"missing.service":          "/opt/missing",
		"plain.service":            "foo",
		"plain-missing.service":    "bar",
		"dir-link.service":         "/bin/foo",
		"abs-link.service":         "/opt/app/run",
		"escape.service":           "/opt/app/escape",
		"dangling.service":         "/opt/app/dangling",
		"loop.service":             "/opt/app/loop",
		"directory.service":        "/opt/app/dir",
		"relative.service":         "usr/bin/foo",
		"alternatives.service":     "/usr/local/bin/d",
		"plain-alt.service":        "d",
		"prefixed.service":         "+@/usr/bin/foo foo",
		"prefixed-missing.service": ":/usr/bin/nope",
	}
	var ins []UnitInput
	var paths []string
	for name, cmd := range cases {
		text := "[Service]\nExecStart=" + cmd + "\n"
		mk("etc/systemd/system/"+name, text, 0o644)
		paths = append(paths, filepath.Join(root, "etc/systemd/system", name))
		ins = append(ins, UnitInput{Name: name, Options: parseUnit(t, text)})
	}
	args := append([]string{"verify", "--root=" + root, "--man=no", "--generators=no"}, paths...)
	out, _ := exec.Command(tool, args...).CombinedOutput()
	refused := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		for name := range cases {
			if strings.HasPrefix(line, name+": Command ") && strings.Contains(line, "is not executable") ||
				strings.Contains(line, "/"+name+":") && strings.Contains(line, "Neither a valid executable name nor an absolute path") {
				refused[name] = true
			}
		}
	}
	require.True(t, refused["missing.service"], "systemd-analyze verify output not understood:\n%s", out)
	t.Logf("systemd refuses: %v", refused)

	src, err := rootfs.OpenDir(root)
	require.NoError(t, err)
	defer src.Close()
	d, err := Build(rootfs.New(src), ins, Options{})
	require.NoError(t, err)
	for name := range cases {
		e := d.Units[name].ExecStart
		require.NotNil(t, e, name)
		require.NotNil(t, e.Exists, name)
		assert.Equal(t, refused[name], !*e.Exists, "%s (ExecStart=%s): systemd refuses=%v, facts exists=%v\n%s", name, cases[name], refused[name], *e.Exists, out)
	}
}
