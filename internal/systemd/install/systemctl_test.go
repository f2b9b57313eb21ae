package install

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/systemdtest"
)

// refEntry is one line of `systemctl list-unit-files`.
type refEntry struct {
	state  string
	preset string
}

// systemctlList runs the real systemctl of sd offline on dir and parses
// columns UNIT FILE, STATE and VENDOR PRESET.
func systemctlList(t testing.TB, sd systemdtest.Systemd, dir string) map[string]refEntry {
	t.Helper()
	out := sd.ListUnitFiles(t, dir)
	got := map[string]refEntry{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		require.GreaterOrEqual(t, len(f), 2, "systemctl line %q", l)
		e := refEntry{state: f[1]}
		if len(f) > 2 {
			e.preset = f[2]
		}
		got[f[0]] = e
	}
	return got
}

// ours lists dir with this package as systemd version v, in the same shape.
func ours(t testing.TB, dir string, v int) (map[string]refEntry, []UnitFile) {
	t.Helper()
	src, err := rootfs.OpenDir(dir)
	require.NoError(t, err)
	defer src.Close()
	fsys := rootfs.New(src)
	units, err := List(fsys, v)
	require.NoError(t, err)
	ps, err := LoadPresets(fsys, v)
	require.NoError(t, err)
	got := map[string]refEntry{}
	for _, u := range units {
		e := refEntry{state: string(u.State), preset: "-"}
		if u.State.ShowsPreset() {
			e.preset = string(ps.Query(u.Name)) + "d"
		}
		got[u.Name] = e
	}
	return got, units
}

// compareTree asserts that List agrees with systemctl of sd on dir, unit by
// unit, and returns systemctl's answer.
func compareTree(t testing.TB, sd systemdtest.Systemd, dir string, withPreset bool) map[string]refEntry {
	t.Helper()
	want := systemctlList(t, sd, dir)
	got, units := ours(t, dir, sd.Version)
	var diffs []string
	for n, w := range want {
		g, ok := got[n]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: systemctl %s, amilint missing", n, w.state))
		case g.state != w.state:
			diffs = append(diffs, fmt.Sprintf("%s: systemctl %s, amilint %s (%v)", n, w.state, g.state, errOf(units, n)))
		case withPreset && g.preset != w.preset:
			diffs = append(diffs, fmt.Sprintf("%s: preset systemctl %s, amilint %s", n, w.preset, g.preset))
		}
	}
	for n, g := range got {
		if _, ok := want[n]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: amilint %s, systemctl missing", n, g.state))
		}
	}
	slices.Sort(diffs)
	if len(diffs) > 0 {
		t.Errorf("tree %s differs from systemctl %d in %d units:\n%s\n%s", dir, sd.Version, len(diffs), strings.Join(diffs, "\n"), describeTree(dir))
	}
	return want
}

func errOf(units []UnitFile, name string) error {
	for _, u := range units {
		if u.Name == name {
			return u.Err
		}
	}
	return nil
}

// describeTree lists a tree for failure messages.
func describeTree(dir string) string {
	var b strings.Builder
	_ = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			tgt, _ := os.Readlink(p)
			fmt.Fprintf(&b, "  %s -> %s\n", rel, tgt)
		case fi.Mode().IsRegular():
			data, _ := os.ReadFile(p)
			if len(data) > 200 {
				data = data[:200]
			}
			fmt.Fprintf(&b, "  %s: %q\n", rel, data)
		}
		return nil
	})
	return b.String()
}
