package install

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// TestListThroughMemo: listed through a run's remembering view (whose raw
// source the index reads, sharing what the boot model and the facts read),
// the unit files and their states are those of the plain view, on both
// Debian roots.
func TestListThroughMemo(t *testing.T) {
	for _, root := range testenv.DebianRoots {
		t.Run(root.Cache, func(t *testing.T) {
			src, err := rootfs.OpenDir(root.Path(t))
			require.NoError(t, err)
			defer src.Close()
			want, err := List(rootfs.New(src), root.Systemd)
			require.NoError(t, err)
			require.NotEmpty(t, want)
			memo := rootfs.New(src).Memo()
			require.True(t, rootfs.IsRaw(memo.Raw()))
			got, err := List(memo, root.Systemd)
			require.NoError(t, err)
			assert.Equal(t, want, got)
			again, err := List(memo, root.Systemd) // from memory only
			require.NoError(t, err)
			assert.Equal(t, want, again)
		})
	}
}
