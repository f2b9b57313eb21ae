package install

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/systemdtest"
)

// TestFixturesMatchSystemctl compares every embedded fixture tree.
func TestFixturesMatchSystemctl(t *testing.T) {
	names := fixtures.Names()
	require.NotEmpty(t, names)
	for _, sd := range systemdtest.Versions() {
		for _, name := range names {
			t.Run(sd.Name()+"/"+name, func(t *testing.T) {
				dir := t.TempDir()
				require.NoError(t, fixtures.Materialize(name, dir))
				compareTree(t, sd, dir, true)
			})
		}
	}
}

// TestDebianRootMatchesSystemctl compares the full Debian roots, each with
// its own systemctl (bookworm's ~250 units with 252, trixie's with 257).
func TestDebianRootMatchesSystemctl(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			compareTree(t, sd, sd.Root.Path(t), true)
		})
	}
}

// benchRoot returns the Debian root (the benchmark make bench reports), or
// the dlami fixture materialized.
func benchRoot(b *testing.B) string {
	if dir := filepath.Join(testenv.RepoRoot(b), ".cache", "debian-root"); fileExists(filepath.Join(dir, "etc", "os-release")) {
		return dir
	}
	dir := b.TempDir()
	require.NoError(b, fixtures.Materialize(fixtures.Default, dir))
	return dir
}

// BenchmarkListVsSystemctl measures List on the largest root at hand and
// reports how many times faster it is than systemctl --root
// list-unit-files on the same root (metric "x-faster-than-systemctl").
func BenchmarkListVsSystemctl(b *testing.B) {
	dir := benchRoot(b)
	src, err := rootfs.OpenDir(dir)
	require.NoError(b, err)
	defer src.Close()
	fsys := rootfs.New(src)

	const refRuns = 5
	var ref time.Duration
	for range refRuns {
		start := time.Now()
		systemdtest.Bookworm.ListUnitFiles(b, dir)
		ref += time.Since(start)
	}
	ref /= refRuns

	var units int
	b.ResetTimer()
	start := time.Now()
	n := 0
	for b.Loop() {
		us, err := List(fsys, 0)
		if err != nil {
			b.Fatal(err)
		}
		units = len(us)
		n++
	}
	ours := time.Since(start) / time.Duration(n)
	b.ReportMetric(float64(units), "units")
	b.ReportMetric(float64(ref.Nanoseconds()), "systemctl-ns/op")
	b.ReportMetric(float64(ref)/float64(ours), "x-faster-than-systemctl")
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
