package boot

import (
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// modelAfter is, for each unit of start, the units of start it starts
// after in the model, sorted.
func modelAfter(g *Graph, start []string) map[string][]string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var jobs []*Unit
	for _, n := range start {
		jobs = append(jobs, g.load(n))
	}
	out := map[string][]string{}
	for first, thens := range g.buildOrder(jobs) {
		for _, then := range thens {
			out[then.Name] = append(out[then.Name], first.Name)
		}
	}
	for _, l := range out {
		sort.Strings(l)
	}
	return out
}

// TestOracleOrder compares the ordering among the start jobs of each
// variant with systemd's: for every unit both start, the units (both
// start) it starts after, as systemd's dump lists them ("After:").
func TestOracleOrder(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		for name, ops := range variants(t) {
			t.Run(sd.Name()+"/"+name, func(t *testing.T) {
				v := newVariant(t, sd, ops)
				want := v.oracle(t)
				if want.Failed != "" {
					return
				}
				g := v.graph(t)
				b := g.Boot()
				compareOrder(t, g, want, b.Start)
			})
		}
	}
}

// compareOrder checks that every unit both tr and the model (start) start
// starts after the same of those units in both. A target with PartOf= is
// left out: it starts after the unit it is part of only when systemd
// happened to load that unit before it (target_add_default_dependencies),
// which the model does not follow.
func compareOrder(t *testing.T, g *Graph, tr systemdtest.Transaction, start []string) {
	t.Helper()
	var both []string
	for _, n := range start {
		if slices.Contains(tr.Start, n) {
			both = append(both, n)
		}
	}
	got := modelAfter(g, both)
	for _, u := range both {
		if unit.Type(u) == "target" && slices.ContainsFunc(g.Unit(u).Deps, func(d Dep) bool { return d.Kind == "PartOf" }) {
			continue
		}
		var w []string
		for _, a := range tr.After[u] {
			if slices.Contains(both, a) && a != u {
				w = append(w, a)
			}
		}
		sort.Strings(w)
		w = slices.Compact(w)
		assert.Equal(t, w, got[u], "%s starts after", u)
	}
}
