package report

import (
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// BenchmarkWriteFactsDebian writes the facts of the Debian root, built
// once: the writer alone, warm (a process writes it once, cold, with
// every page it allocates faulted in: see `make bench` for that).
func BenchmarkWriteFactsDebian(b *testing.B) {
	aud, err := audit.New(audit.Config{FactsOnly: true})
	require.NoError(b, err)
	src, err := rootfs.OpenDir(testenv.Bookworm.Path(b))
	require.NoError(b, err)
	defer src.Close()
	fsys := rootfs.New(src).Memo()
	inv, err := audit.Model(fsys, audit.ModelOptions{})
	require.NoError(b, err)
	doc, err := aud.Facts(fsys, inv)
	require.NoError(b, err)
	b.ReportAllocs()
	for b.Loop() {
		require.NoError(b, WriteFacts(io.Discard, doc))
	}
}
