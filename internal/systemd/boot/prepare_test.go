package boot

import (
	"reflect"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// TestPrepareChangesNothing: a graph whose units were read ahead by
// Prepare (all of them first, in either order, or beside the loading) has
// the boot transaction and every unit, field for field, of a graph that
// read each unit as it loaded it. On every fixture and both Debian roots.
func TestPrepareChangesNothing(t *testing.T) {
	check := func(t *testing.T, src rootfs.Source, version int) {
		fsys := rootfs.New(src).Memo()
		plain, err := Load(fsys, version)
		require.NoError(t, err)
		names := plain.Names()
		want := plain.Boot()
		for _, n := range names {
			plain.Unit(n)
		}
		reversed := slices.Clone(names)
		slices.Reverse(reversed)
		never := func() bool { return false }
		for _, c := range []struct {
			name    string
			prepare func(g *Graph) func()
		}{
			{"ahead", func(g *Graph) func() { g.Prepare(names, never); return func() {} }},
			{"ahead-reversed", func(g *Graph) func() { g.Prepare(reversed, never); return func() {} }},
			{"beside", func(g *Graph) func() {
				var stop atomic.Bool
				done := make(chan struct{})
				go func() { defer close(done); g.Prepare(names, stop.Load) }()
				return func() { stop.Store(true); <-done }
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				g, err := Load(fsys, version)
				require.NoError(t, err)
				wait := c.prepare(g)
				waiting := pending(g)
				got := g.Boot()
				for _, n := range names {
					g.Unit(n)
				}
				wait()
				if c.name != "beside" {
					taken := waiting - pending(g)
					assert.Positive(t, taken, "units were prepared and taken")
					t.Logf("%d units prepared and taken of %d names", taken, len(names))
				}
				assert.Equal(t, want.Default, got.Default)
				assert.Equal(t, want.Start, got.Start)
				assert.Equal(t, want.Activated, got.Activated)
				assert.Equal(t, want.ActivatedBy, got.ActivatedBy)
				assert.Equal(t, want.Failure, got.Failure)
				for _, n := range names {
					w, u := plain.Unit(n), g.Unit(n)
					if !reflect.DeepEqual(w, u) {
						t.Errorf("%s: prepared %+v\nplain %+v", n, u, w)
					}
				}
			})
		}
	}
	for _, name := range fixtures.Names() {
		t.Run(name, func(t *testing.T) {
			src, err := fixtures.Source(name)
			require.NoError(t, err)
			check(t, src, 0)
		})
	}
	for _, root := range testenv.DebianRoots {
		t.Run(root.Cache, func(t *testing.T) {
			src, err := rootfs.OpenDir(root.Path(t))
			require.NoError(t, err)
			defer src.Close()
			check(t, src, root.Systemd)
		})
	}
}

// pending is how many prepared units wait to be taken.
func pending(g *Graph) int {
	n := 0
	g.prepared.Range(func(any, any) bool { n++; return true })
	return n
}
