package policy_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/policy"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// BenchmarkInputDebian converts the facts of the Debian root (or of the
// root AMILINT_BENCH_ROOT names) to the Rego input, as every evaluation
// does: whole (a user's policy is loaded) and without what the catalog
// does not read.
func BenchmarkInputDebian(b *testing.B) {
	dir := os.Getenv("AMILINT_BENCH_ROOT")
	if dir == "" {
		dir = testenv.Bookworm.Path(b)
	}
	src, err := rootfs.OpenDir(dir)
	require.NoError(b, err)
	defer src.Close()
	fsys := rootfs.New(src).Memo()
	a, err := audit.New(audit.Config{})
	require.NoError(b, err)
	inv, err := audit.Model(fsys, audit.ModelOptions{})
	require.NoError(b, err)
	doc, err := a.Facts(fsys, inv)
	require.NoError(b, err)
	b.Run("whole", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, err := policy.GoValue(doc)
			require.NoError(b, err)
		}
	})
	b.Run("catalog", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, err := policy.CatalogInput(doc)
			require.NoError(b, err)
		}
	})
}
