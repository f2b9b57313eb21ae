package audit_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// benchRoot is the Debian root, or the directory AMILINT_BENCH_ROOT names
// (a generated root of make bench's scale table, say).
func benchRoot(b *testing.B) *rootfs.FS {
	dir := os.Getenv("AMILINT_BENCH_ROOT")
	if dir == "" {
		dir = testenv.Bookworm.Path(b)
	}
	src, err := rootfs.OpenDir(dir)
	require.NoError(b, err)
	b.Cleanup(func() { src.Close() })
	return rootfs.New(src)
}

// BenchmarkAuditStages times each stage of one scan in process: the model
// (enablement, boot), the facts, and the policies (input conversion and
// evaluation), each on a fresh view so nothing is remembered across runs.
func BenchmarkAuditStages(b *testing.B) {
	root := benchRoot(b)
	a, err := audit.New(audit.Config{})
	require.NoError(b, err)
	ctx := context.Background()
	eng, err := a.Engine(ctx, "bench")
	require.NoError(b, err)
	inv, err := audit.Model(root.Memo(), audit.ModelOptions{})
	require.NoError(b, err)
	doc, err := a.Facts(root.Memo(), inv)
	require.NoError(b, err)
	b.Run("model", func(b *testing.B) {
		for b.Loop() {
			_, err := audit.Model(root.Memo(), audit.ModelOptions{})
			require.NoError(b, err)
		}
	})
	b.Run("facts", func(b *testing.B) {
		for b.Loop() {
			_, err := a.Facts(root.Memo(), inv)
			require.NoError(b, err)
		}
	})
	b.Run("evaluate", func(b *testing.B) {
		for b.Loop() {
			_, err := eng.Evaluate(ctx, doc)
			require.NoError(b, err)
		}
	})
	b.Run("audit", func(b *testing.B) {
		for b.Loop() {
			_, err := a.Audit(ctx, root, finding.Target{Name: "bench"})
			require.NoError(b, err)
		}
	})
}
