package security

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/stretchr/testify/require"
)

// The oracle is systemd-analyze itself, of the version a Debian root ships:
// `systemd-analyze security --offline=true --root=TREE` run chrooted in
// that root (bookworm: 252, trixie: 257) with TREE bind-mounted inside it,
// in a private mount namespace, so neither root is ever written. /proc,
// /sys and the cgroup hierarchy are mounted as on a host: without them
// systemd refuses units with IP{Ingress,Egress}FilterPath= (it cannot
// tell whether BPF firewalling works).

// analyzer is one Debian root's systemd-analyze.
type analyzer struct {
	version int
	root    string
}

// analyzers returns the roots the oracle tests compare against.
func analyzers(t testing.TB) []analyzer {
	t.Helper()
	testenv.Root(t, "the systemd-analyze oracle (unshare, mount, chroot)")
	for _, tool := range []string{"unshare", "chroot", "mount"} {
		testenv.Tool(t, tool, "util-linux/coreutils")
	}
	return []analyzer{
		{252, testenv.Bookworm.Path(t)},
		{257, testenv.Trixie.Path(t)},
	}
}

// run runs systemd-analyze ARGS in the root with tree visible at
// /mnt/case, and returns its stdout, stderr and exit code.
func (a analyzer) run(t testing.TB, tree string, env []string, args ...string) (string, string, int) {
	t.Helper()
	script := `set -e
r=$1; tree=$2; shift 2
mount -t tmpfs tmpfs "$r/mnt"
mkdir "$r/mnt/case"
if [ -n "$tree" ]; then mount --bind "$tree" "$r/mnt/case"; fi
mount -t proc proc "$r/proc"
mount -t sysfs -o ro sysfs "$r/sys"
mount --rbind /sys/fs/cgroup "$r/sys/fs/cgroup"
exec chroot "$r" /usr/bin/env "$@"`
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	argv := append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", a.root, tree},
		append(append(append([]string{}, env...), "SYSTEMD_COLORS=0", "SYSTEMD_PAGER=cat", "SYSTEMD_LOG_COLOR=0"), append([]string{"systemd-analyze"}, args...)...)...)
	cmd := exec.CommandContext(ctx, "unshare", argv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		require.True(t, ok, "systemd-analyze %d: %v: %s", a.version, err, stderr.String())
		code = ee.ExitCode()
	}
	require.NoError(t, ctx.Err(), "systemd-analyze %d timed out", a.version)
	return stdout.String(), stderr.String(), code
}

// oracleCheck is one check of `systemd-analyze security --json=short` with
// SYSTEMD_ANALYZE_DEBUG=1 (which adds weight, badness and range).
type oracleCheck struct {
	Set         *bool       `json:"set"`
	Name        string      `json:"name"`
	JSONField   string      `json:"json_field"`
	Description *string     `json:"description"`
	Weight      json.Number `json:"weight"`
	Badness     json.Number `json:"badness"`
	Range       json.Number `json:"range"`
	Exposure    *string     `json:"exposure"`
}

// oracleUnit is systemd-analyze's assessment of one unit.
type oracleUnit struct {
	ID       string
	Exposure string // "9.6"
	Level    string
	Checks   map[string]oracleCheck
}

var overallLine = regexp.MustCompile(`Overall exposure level for (\S+): (\d+\.\d) (\S+)`)

// security scores units of tree with the version's systemd-analyze. It
// returns the units that loaded, keyed by unit id, and the stderr of the
// text run (its warnings say which settings were ignored).
func (a analyzer) security(t testing.TB, tree string, policy string, units []string) (map[string]oracleUnit, string) {
	t.Helper()
	args := []string{"security", "--offline=true", "--root=/mnt/case", "--no-pager"}
	if policy != "" {
		args = append(args, "--security-policy=/mnt/case/"+policy)
	}
	args = append(args, units...)
	text, stderr, _ := a.run(t, tree, nil, args...)
	var ids, exposures, levels []string
	for _, m := range overallLine.FindAllStringSubmatch(text, -1) {
		ids, exposures, levels = append(ids, m[1]), append(exposures, m[2]), append(levels, m[3])
	}
	js, _, _ := a.run(t, tree, []string{"SYSTEMD_ANALYZE_DEBUG=1"}, append([]string{args[0], "--json=short"}, args[1:]...)...)
	var arrays [][]oracleCheck
	sc := bufio.NewScanner(strings.NewReader(js))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" {
			continue
		}
		var arr []oracleCheck
		dec := json.NewDecoder(strings.NewReader(l))
		dec.UseNumber()
		require.NoError(t, dec.Decode(&arr), "systemd-analyze %d --json: %s", a.version, l)
		arrays = append(arrays, arr)
	}
	require.Len(t, arrays, len(ids), "systemd-analyze %d: the text and JSON runs scored as many units\n%s", a.version, stderr)
	out := map[string]oracleUnit{}
	for i, id := range ids {
		u := oracleUnit{ID: id, Exposure: exposures[i], Level: levels[i], Checks: map[string]oracleCheck{}}
		for _, c := range arrays[i] {
			u.Checks[c.JSONField] = c
		}
		out[id] = u
	}
	return out, stderr
}

// writeTree writes files (path relative to the tree -> content) under a
// new temporary directory.
func writeTree(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		if target, ok := strings.CutPrefix(content, "->"); ok {
			require.NoError(t, os.Symlink(target, full))
			continue
		}
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
	return dir
}

// tenths parses "9.6" as 96.
func tenths(t testing.TB, s string) int {
	t.Helper()
	whole, frac, ok := strings.Cut(s, ".")
	require.True(t, ok, "exposure %q", s)
	w, err := strconv.Atoi(whole)
	require.NoError(t, err)
	f, err := strconv.Atoi(frac)
	require.NoError(t, err)
	return w*10 + f
}

func fmtTenths(n int) string { return fmt.Sprintf("%d.%d", n/10, n%10) }
