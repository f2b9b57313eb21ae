package boot

import (
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
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
				var both []string
				for _, n := range b.Start {
					if slices.Contains(want.Start, n) {
						both = append(both, n)
					}
				}
				got := modelAfter(g, both)
				for _, u := range both {
					var w []string
					for _, a := range want.After[u] {
						if slices.Contains(both, a) && a != u {
							w = append(w, a)
						}
					}
					sort.Strings(w)
					w = slices.Compact(w)
					assert.Equal(t, w, got[u], "%s starts after", u)
				}
			})
		}
	}
}
