package security

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTenthsFormat(t *testing.T) {
	for v, want := range map[Tenths]string{0: "0.0", 5: "0.5", 96: "9.6", 100: "10.0", 123: "12.3"} {
		assert.Equal(t, want, v.String())
		b, err := json.Marshal(v)
		require.NoError(t, err)
		assert.Equal(t, want, string(b))
	}
}

// TestTenthsIsSystemdsUint64: an exposure is systemd's uint64_t; a
// policy's weights can wrap its arithmetic, and systemd prints and ranks
// the wrapped number, never a negative one.
func TestTenthsIsSystemdsUint64(t *testing.T) {
	top := ^Tenths(0)
	assert.Equal(t, "1844674407370955161.5", top.String())
	b, err := json.Marshal(top)
	require.NoError(t, err)
	assert.True(t, json.Valid(b), "%s", b)
	assert.Equal(t, "DANGEROUS", Level(top))
	var back Tenths
	require.NoError(t, json.Unmarshal([]byte("9.6"), &back))
	assert.Equal(t, Tenths(96), back)
	for _, bad := range []string{"-1", "-0.1", "1e30", "NaN"} {
		assert.Error(t, back.UnmarshalJSON([]byte(bad)), bad)
	}
	// w*10 wrapped in int to 4 before: "0.4".
	for _, bad := range []string{"1844674407370955162", "11", "10.1", "-1"} {
		_, err := ParseTenths(bad)
		assert.Error(t, err, bad)
	}
	got, err := ParseTenths("10.0")
	require.NoError(t, err)
	assert.Equal(t, Tenths(100), got)
}

// TestTopIsTheSortedPrefix holds Top's selection to its definition: the
// failing checks sorted by gain (ties by id), cut to n. Gains tie often
// (equal weights and ranges), ids break the ties.
func TestTopIsTheSortedPrefix(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		a := &Assessment{}
		for i := range r.IntN(90) {
			c := Check{ID: fmt.Sprintf("c%02d", r.IntN(100)*100+i), Weight: uint64(r.IntN(4) * 500), Range: uint64(r.IntN(3))}
			if r.IntN(4) > 0 {
				b := uint64(r.IntN(3))
				c.Badness = &b
			}
			a.Checks = append(a.Checks, c)
		}
		var want []Check
		for _, c := range a.Checks {
			if c.Badness != nil && *c.Badness > 0 && c.Range > 0 {
				want = append(want, c)
			}
		}
		gain := func(c Check) float64 { return float64(*c.Badness) * float64(c.Weight) / float64(c.Range) }
		slices.SortFunc(want, func(x, y Check) int {
			if c := cmp.Compare(gain(y), gain(x)); c != 0 {
				return c
			}
			return strings.Compare(x.ID, y.ID)
		})
		for _, n := range []int{0, 1, 3, 100} {
			w := want[:min(n, len(want))]
			if w == nil {
				w = []Check{}
			}
			require.Equal(t, w, a.Top(n), "n=%d", n)
		}
	}
}

// TestOfflineSkipsGeneratedAndTransient: systemd-analyze --offline puts
// the generator and transient directories in a temporary directory of its
// own (LOOKUP_PATHS_TEMPORARY_GENERATED), so units and drop-ins a tree has
// there are not read (systemd 252 and 257: "Unit gen.service not found.",
// drop-in ignored); /run/systemd/system is read.
func TestOfflineSkipsGeneratedAndTransient(t *testing.T) {
	svc := "[Service]\nExecStart=/bin/true\n"
	net := "[Service]\nPrivateNetwork=yes\n"
	files := map[string]string{
		"usr/lib/systemd/system/plain.service":    svc,
		"usr/lib/systemd/system/run.service":      svc,
		"run/systemd/system/run.service.d/a.conf": net,
	}
	var only []string
	for _, d := range []string{"generator.early", "generator", "generator.late", "transient"} {
		n := strings.ReplaceAll(d, ".", "-")
		files["usr/lib/systemd/system/"+n+".service"] = svc
		files["run/systemd/"+d+"/"+n+".service.d/a.conf"] = net
		files["run/systemd/"+d+"/only-"+n+".service"] = svc
		only = append(only, "only-"+n+".service")
	}
	dir := writeTree(t, files)
	got, _ := scoreTree(t, dir, 252, nil, nil)
	for _, n := range only {
		assert.NotContains(t, got, n)
	}
	got, failed := scoreTree(t, dir, 252, nil, append([]string{"plain.service", "run.service", "generator-early.service", "generator.service", "generator-late.service", "transient.service"}, only...))
	for _, n := range only {
		assert.ErrorIs(t, failed[n], ErrNotLoaded, n)
	}
	require.Contains(t, got, "plain.service")
	assert.Less(t, got["run.service"].Exposure, got["plain.service"].Exposure, "/run/systemd/system is read")
	for _, n := range []string{"generator-early.service", "generator.service", "generator-late.service", "transient.service"} {
		require.Contains(t, got, n)
		assert.Equal(t, got["plain.service"].Exposure, got[n].Exposure, n)
		assert.Empty(t, got[n].DropIns, n)
	}
}
