package boot

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// TestLoadThroughMemo: loaded through a run's remembering view (read
// through its memory, shared with the enablement and the facts), the
// boot transaction and every unit in it are those of the plain view, on
// both Debian roots.
func TestLoadThroughMemo(t *testing.T) {
	for _, root := range testenv.DebianRoots {
		t.Run(root.Cache, func(t *testing.T) {
			src, err := rootfs.OpenDir(root.Path(t))
			require.NoError(t, err)
			defer src.Close()
			plain, err := Load(rootfs.New(src), root.Systemd)
			require.NoError(t, err)
			memo := rootfs.New(src).Memo()
			viaMemo, err := Load(memo, root.Systemd)
			require.NoError(t, err)
			want, got := plain.Boot(), viaMemo.Boot()
			require.NotEmpty(t, want.Start)
			assert.Equal(t, want.Default, got.Default)
			assert.Equal(t, want.Start, got.Start)
			assert.Equal(t, want.Activated, got.Activated)
			assert.Equal(t, want.ActivatedBy, got.ActivatedBy)
			assert.Equal(t, want.Failure, got.Failure)
			for _, name := range want.Start {
				w, g := plain.Unit(name), viaMemo.Unit(name)
				assert.Equal(t, w.State, g.State, name)
				assert.Equal(t, w.Fragment, g.Fragment, name)
				assert.Equal(t, w.DropIns, g.DropIns, name)
				assert.Equal(t, w.Sources, g.Sources, name)
				assert.Equal(t, w.Deps, g.Deps, name)
			}
		})
	}
}
