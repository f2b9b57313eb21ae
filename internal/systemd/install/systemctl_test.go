package install

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// systemctlPath is the reference implementation the differential tests
// compare against.
const systemctlPath = "/usr/bin/systemctl"

// needSystemctl skips only when the machine truly lacks systemctl.
func needSystemctl(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(systemctlPath); err != nil {
		testenv.Missing(t, "no %s on this machine (Debian package systemd): %v", systemctlPath, err)
	}
}

// refEntry is one line of `systemctl list-unit-files`.
type refEntry struct {
	state  string
	preset string
}

// systemctlList runs the real systemctl offline on dir and parses columns
// UNIT FILE, STATE and VENDOR PRESET.
func systemctlList(t testing.TB, dir string) map[string]refEntry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, systemctlPath, "--root="+dir, "list-unit-files", "--no-legend", "--no-pager")
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SYSTEMD_LOG_LEVEL=emerg", "LANG=C", "SYSTEMD_COLORS=0"}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(t, cmd.Run(), "systemctl on %s: %s", dir, errb.String())
	got := map[string]refEntry{}
	for _, l := range strings.Split(out.String(), "\n") {
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

// ours lists dir with this package, in the same shape.
func ours(t testing.TB, dir string) (map[string]refEntry, []UnitFile) {
	t.Helper()
	src, err := rootfs.OpenDir(dir)
	require.NoError(t, err)
	defer src.Close()
	fsys := rootfs.New(src)
	units, err := List(fsys)
	require.NoError(t, err)
	ps, err := LoadPresets(fsys)
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

// compareTree asserts that List agrees with systemctl on dir, unit by unit,
// and returns systemctl's answer.
func compareTree(t testing.TB, dir string, withPreset bool) map[string]refEntry {
	t.Helper()
	want := systemctlList(t, dir)
	got, units := ours(t, dir)
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
		t.Errorf("tree %s differs from systemctl in %d units:\n%s\n%s", dir, len(diffs), strings.Join(diffs, "\n"), describeTree(dir))
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
