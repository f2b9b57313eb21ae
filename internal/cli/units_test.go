package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
)

// unitsTree is a small image with one unit in each common state.
func unitsTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"lib/systemd/system/ecs.service":          "[Service]\nExecStart=/usr/libexec/amazon-ecs-init start\n[Install]\nWantedBy=multi-user.target\n",
		"lib/systemd/system/multi-user.target":    "[Unit]\nDescription=Multi-User System\n",
		"lib/systemd/system/off.service":          "[Install]\nWantedBy=multi-user.target\n",
		"lib/systemd/system/static.service":       "[Service]\nExecStart=/bin/true\n",
		"lib/systemd/system/ecs.service.d/x.conf": "[Service]\nRestart=always\n",
		"lib/systemd/system/bad.service":          "[Install\n",
		"etc/systemd/system/m.service":            "",
		"lib/systemd/system-preset/90.preset":     "disable off.service\n",
	}
	for p, c := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644))
	}
	links := map[string]string{
		"etc/systemd/system/multi-user.target.wants/ecs.service": "/lib/systemd/system/ecs.service",
		"lib/systemd/system/ecs-alias.service":                   "ecs.service",
	}
	for p, target := range links {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		require.NoError(t, os.Symlink(target, filepath.Join(dir, p)))
	}
	return dir
}

func runUnitsCLI(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUnitsTSVMatchesSystemctl(t *testing.T) {
	if _, err := os.Stat("/usr/bin/systemctl"); err != nil {
		testenv.Missing(t, "no /usr/bin/systemctl (Debian package systemd): %v", err)
	}
	dir := unitsTree(t)
	code, out, errs := runUnitsCLI("units", dir, "-o", "tsv")
	require.Equal(t, ExitOK, code, errs)

	cmd := exec.Command("/usr/bin/systemctl", "--root="+dir, "list-unit-files", "--no-legend", "--no-pager")
	cmd.Env = []string{"SYSTEMD_LOG_LEVEL=emerg", "PATH=/usr/bin:/bin"}
	ref, err := cmd.Output()
	require.NoError(t, err)
	var want []string
	for _, l := range strings.Split(strings.TrimSpace(string(ref)), "\n") {
		f := strings.Fields(l)
		want = append(want, f[0]+"\t"+f[1])
	}
	// systemctl orders by type, then name; amilint by name: same lines.
	slices.Sort(want)
	assert.Equal(t, strings.Join(want, "\n")+"\n", out)
	assert.Contains(t, out, "ecs.service\tenabled\n")
}

func TestUnitsTextAndJSON(t *testing.T) {
	dir := unitsTree(t)
	code, out, errs := runUnitsCLI("units", dir)
	require.Equal(t, ExitOK, code, errs)
	assert.Contains(t, out, "UNIT FILE")
	assert.Regexp(t, `(?m)^ecs\.service +enabled +enable$`, out)
	assert.Regexp(t, `(?m)^off\.service +disabled +disable$`, out)
	assert.Regexp(t, `(?m)^ecs-alias\.service +alias +-$`, out)
	assert.Contains(t, out, "\n7 unit files listed.\n")

	code, out, errs = runUnitsCLI("units", "-o", "json", dir)
	require.Equal(t, ExitOK, code, errs)
	var doc unitsDoc
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	assert.Equal(t, "amilint/v1", doc.Schema)
	assert.True(t, doc.FirstBoot, "no /etc/machine-id means first boot")
	byName := map[string]unitJSON{}
	for _, u := range doc.Units {
		byName[u.Name] = u
	}
	ecs := byName["ecs.service"]
	assert.Equal(t, "enabled", ecs.State)
	assert.Equal(t, "/lib/systemd/system/ecs.service", ecs.Fragment)
	assert.Equal(t, []string{"/lib/systemd/system/ecs.service.d/x.conf"}, ecs.DropIns)
	assert.Equal(t, []string{"ecs-alias.service"}, ecs.Aliases)
	assert.Equal(t, "enable", ecs.Preset)
	assert.Equal(t, "alias", byName["ecs-alias.service"].State)
	assert.Equal(t, "masked", byName["m.service"].State)
	assert.Equal(t, "bad", byName["bad.service"].State)
	assert.NotEmpty(t, byName["bad.service"].Error)
	assert.Equal(t, "disable", byName["off.service"].Preset)
}

func TestUnitsBadInput(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"missing target", []string{"units", filepath.Join(t.TempDir(), "nope")}, "no such file"},
		{"not a directory", []string{"units", file}, file},
		{"no target", []string{"units"}, "missing TARGET"},
		{"two targets", []string{"units", "a", "b"}, "one TARGET"},
		{"bad flag", []string{"units", "--bogus", t.TempDir()}, "bogus"},
		{"bad format", []string{"units", "-o", "xml", t.TempDir()}, "xml"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runUnitsCLI(tc.args...)
			assert.Equal(t, ExitError, code)
			assert.Empty(t, out)
			assert.Equal(t, 1, strings.Count(errs, "\n"), "one line: %q", errs)
			assert.Contains(t, errs, tc.want)
		})
	}
}

// TestUnitsFixtureShowsTheIncident runs units on the embedded DLAMI-like
// fixture: ecs.service is enabled there, as on the AMI of the incident.
func TestUnitsFixtureShowsTheIncident(t *testing.T) {
	code, out, errs := runUnitsCLI("units", "fixture:dlami", "-o", "tsv")
	require.Equal(t, ExitOK, code, errs)
	assert.Contains(t, out, "\necs.service\tenabled\n")
	code, out, errs = runUnitsCLI("units", "fixture:hardened", "-o", "tsv")
	require.Equal(t, ExitOK, code, errs)
	assert.Contains(t, out, "\necs.service\tdisabled\n")
}
