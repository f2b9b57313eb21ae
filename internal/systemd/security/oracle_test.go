package security

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
	"github.com/stretchr/testify/require"
)

// The oracle is systemd-analyze itself, of the version a Debian root ships:
// `systemd-analyze security --offline=true --root=TREE` run by the test kit
// systemdtest, chrooted in that root (bookworm: 252, trixie: 257) with TREE
// bind-mounted inside it, so neither root is ever written. sysfs and a
// cgroup hierarchy are mounted as on a host: without them systemd refuses
// units with IP{Ingress,Egress}FilterPath= (it cannot tell whether BPF
// firewalling works).

// analyzer is one Debian root's systemd-analyze.
type analyzer struct {
	systemdtest.Systemd
	root string
}

// analyzers returns the systemds the oracle tests compare against.
func analyzers(t testing.TB) []analyzer {
	t.Helper()
	var out []analyzer
	for _, s := range systemdtest.Versions() {
		out = append(out, analyzer{s, s.Path(t)})
	}
	return out
}

// analyzeScript runs systemd-analyze inside the chroot with /sys and a
// cgroup2 hierarchy mounted, warnings logged, and the environment given.
const analyzeScript = `mount -t sysfs -o ro sysfs /sys && mount -t cgroup2 cgroup2 /sys/fs/cgroup && exec env SYSTEMD_LOG_LEVEL=warning "$@"`

// run runs systemd-analyze ARGS in the root with tree visible at
// systemdtest.TreeMount, and returns its stdout, stderr and exit code.
func (a analyzer) run(t testing.TB, tree string, env []string, args ...string) (string, string, int) {
	t.Helper()
	argv := append([]string{"/bin/sh", "-c", analyzeScript, "sh"}, env...)
	argv = append(argv, "systemd-analyze")
	out := a.Run(t, tree, append(argv, args...)...)
	code := out.ExitCode()
	require.NotEqual(t, -1, code, "systemd-analyze %d: %v: %s", a.Version, out.Err, out.Stderr)
	return string(out.Stdout), string(out.Stderr), code
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
	args := []string{"security", "--offline=true", "--root=" + systemdtest.Tree, "--no-pager"}
	if policy != "" {
		args = append(args, "--security-policy="+systemdtest.Tree+"/"+policy)
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
		require.NoError(t, dec.Decode(&arr), "systemd-analyze %d --json: %s", a.Version, l)
		arrays = append(arrays, arr)
	}
	require.Len(t, arrays, len(ids), "systemd-analyze %d: the text and JSON runs scored as many units\n%s", a.Version, stderr)
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
