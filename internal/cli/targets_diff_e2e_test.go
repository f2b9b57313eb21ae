package cli_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/image/disktest"
)

// TestDifferencingDisks reads VHD and VHDX differencing disks whose parent
// lacks what the child restores (the GPT, the filesystem's first blocks,
// scattered sectors): with --backing, `units` and `scan` equal the tree's;
// without it, exit 2 naming the parent.
func TestDifferencingDisks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	require.NoError(t, fixtures.Materialize(fixtures.Default, dir))
	want, stderr, code := run("units", dir, "-o", "tsv")
	require.Equal(t, 0, code, stderr)
	wantScan, _, wantCode := run("scan", dir, "-o", "json", "--fail-on", "critical")

	final := disktest.GPTRoot(t, disktest.Ext4(t, dir, "24M"))
	b, err := os.ReadFile(final)
	require.NoError(t, err)
	clear(b[:12<<20]) // the GPT and the filesystem's first 3 MiB
	for off := 16 << 20; off < 40<<20; off += 5 * 512 {
		copy(b[off:off+512], make([]byte, 512))
	}
	parentRaw := filepath.Join(t.TempDir(), "parent.raw")
	require.NoError(t, os.WriteFile(parentRaw, b, 0o644))

	for _, tc := range []struct{ format, parent string }{
		{"vpc", `.\parent.vhd`},
		{"vhdx", `.\parent.vhdx`},
	} {
		t.Run(tc.format, func(t *testing.T) {
			child, parent := disktest.Differencing(t, tc.format, parentRaw, final, disktest.DiffOptions{})
			out, stderr, code := run("units", child, "-o", "tsv")
			assert.Equal(t, 2, code)
			assert.Empty(t, out)
			assert.Contains(t, stderr, "differencing disk whose parent is \""+tc.parent+"\"")

			got, stderr, code := run("units", child, "--backing", parent, "-o", "tsv")
			require.Equal(t, 0, code, stderr)
			assert.Equal(t, want, got)
			gotScan, stderr, code := run("scan", child, "--backing", parent, "-o", "json", "--fail-on", "critical")
			require.Equal(t, wantCode, code, stderr)
			assert.Equal(t, withoutTarget(t, wantScan), withoutTarget(t, gotScan))

			// The parent alone has no readable root.
			_, _, code = run("units", parent, "-o", "tsv")
			assert.Equal(t, 2, code)
		})
	}
}
