package security

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/boot"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scoreTree scores names (every service when nil) of a directory tree
// with version v's tables; failures to load are returned apart.
func scoreTree(t testing.TB, dir string, v int, policy *Policy, names []string) (map[string]*Assessment, map[string]error) {
	t.Helper()
	d, err := rootfs.OpenDir(dir)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	fsys := rootfs.New(d)
	g, err := boot.LoadTree(fsys, v) // systemd-analyze reads /run as the tree has it
	require.NoError(t, err)
	tb, err := TablesFor(v)
	require.NoError(t, err)
	require.Equal(t, v, tb.Version)
	s := NewScorer(fsys, g, tb, policy)
	if names == nil {
		names = s.Services()
	}
	got, failed := map[string]*Assessment{}, map[string]error{}
	for _, n := range names {
		a, err := s.Score(n)
		if err != nil {
			failed[n] = err
			continue
		}
		got[n] = a
	}
	return got, failed
}

// compare requires amilint's assessments to equal systemd-analyze's, check
// by check, and returns how many units were compared.
func compare(t *testing.T, version int, got map[string]*Assessment, failed map[string]error, want map[string]oracleUnit, stderr string) int {
	t.Helper()
	names := make([]string, 0, len(got)+len(failed))
	for n := range got {
		names = append(names, n)
	}
	for n := range failed {
		names = append(names, n)
	}
	sort.Strings(names)
	compared := 0
	for _, n := range names {
		a := got[n]
		id := n
		if a != nil {
			id = a.ID
		}
		o, loaded := want[id]
		if a == nil {
			if !assert.False(t, loaded, "systemd %d scores %s (%s), amilint does not: %v", version, n, o.Exposure, failed[n]) {
				continue
			}
			compared++
			continue
		}
		if !assert.True(t, loaded, "systemd %d does not score %s (%s), amilint does: %s\n%s", version, n, id, a.Exposure, grepLines(stderr, strings.TrimSuffix(n, ".service"))) {
			continue
		}
		compared++
		ok := assert.Equal(t, o.Exposure, a.Exposure.String(), "systemd %d: %s overall exposure", version, n)
		ok = assert.Equal(t, o.Level, a.Level, "systemd %d: %s level", version, n) && ok
		require.Len(t, a.Checks, len(o.Checks), "%s checks", n)
		for _, c := range a.Checks {
			w := o.Checks[c.ID]
			badness := "18446744073709551615"
			if c.Badness != nil {
				badness = fmt.Sprint(*c.Badness)
			}
			ok = assert.Equal(t, w.Badness.String(), badness, "systemd %d: %s %s badness (%s)", version, n, c.ID, deref(w.Description)) && ok
			ok = assert.Equal(t, w.Weight.String(), fmt.Sprint(c.Weight), "systemd %d: %s %s weight", version, n, c.ID) && ok
			ok = assert.Equal(t, w.Range.String(), fmt.Sprint(c.Range), "systemd %d: %s %s range", version, n, c.ID) && ok
			ok = assert.Equal(t, w.Set, c.Set, "systemd %d: %s %s set", version, n, c.ID) && ok
			ok = assert.Equal(t, deref(w.Description), c.Description, "systemd %d: %s %s description", version, n, c.ID) && ok
			var exp *string
			if c.Exposure != nil && *c.Exposure != 0 {
				s := c.Exposure.String()
				exp = &s
			}
			ok = assert.Equal(t, w.Exposure, exp, "systemd %d: %s %s exposure", version, n, c.ID) && ok
		}
		if !ok {
			t.Logf("%s notes: %v\nsystemd: %s", n, a.Notes, grepLines(stderr, strings.TrimSuffix(n, ".service")))
		}
	}
	return compared
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// grepLines returns the lines of s that mention word.
func grepLines(s, word string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestDebianRoots scores every service of the Debian roots as their own
// systemd-analyze does: bookworm's with 252, trixie's with 257.
func TestDebianRoots(t *testing.T) {
	for _, a := range analyzers(t) {
		t.Run(fmt.Sprint(a.Version), func(t *testing.T) {
			got, failed := scoreTree(t, a.root, a.Version, nil, nil)
			require.Greater(t, len(got), 50, "a Debian root has many services")
			names := make([]string, 0, len(got)+len(failed))
			for n := range got {
				names = append(names, n)
			}
			for n := range failed {
				names = append(names, n)
			}
			sort.Strings(names)
			want, stderr := a.security(t, a.root, "", names)
			n := compare(t, a.Version, got, failed, want, stderr)
			t.Logf("systemd %d: %d services of %s compared, %d scored", a.Version, n, a.root, len(got))
		})
	}
}

// TestPolicyAgrees scores a random tree with security policies in
// systemd's format — weights changed and zeroed, ranges widened,
// descriptions replaced, values of the wrong type and items that are no
// objects (which systemd ignores) — as systemd-analyze --security-policy
// scores it.
func TestPolicyAgrees(t *testing.T) {
	policies := []string{
		`{"UserOrDynamicUser": {"weight": 0}, "PrivateNetwork": {"weight": 5000, "description_bad": "reaches the network"}, "UMask": {"range": 20}}`,
		`{"PrivateTmp": {"weight": "heavy", "range": -1}, "NoNewPrivileges": "no object", "SystemCallFilter_swap": {"weight": 1.0e3, "description_good": "no swap"}, "ProtectHome": {"range": 10.0}}`,
		`{"CapabilityBoundingSet_CAP_SYS_ADMIN": {"weight": 1}, "CapabilityBoundingSet_CAP_SYS_ADMIN": {"weight": 9999}, "RemoveIPC": {"description_na": "root anyway"}, "DeviceAllow": {"weight": 0}}`,
	}
	for _, a := range analyzers(t) {
		for i, pol := range policies {
			t.Run(fmt.Sprintf("%d/policy%d", a.Version, i), func(t *testing.T) {
				files, names := randomTree(uint64(500+i), 80)
				files["policy.json"] = pol
				dir := writeTree(t, files)
				p, err := ParsePolicy([]byte(pol))
				require.NoError(t, err)
				got, failed := scoreTree(t, dir, a.Version, p, names)
				want, stderr := a.security(t, dir, "policy.json", names)
				assert.Greater(t, compare(t, a.Version, got, failed, want, stderr), 50)
			})
		}
	}
}
