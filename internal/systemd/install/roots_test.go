package install

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// debianRoot is the debootstrap root fixtures/debian/build.sh makes; it is
// complete whenever it exists (the script renames it into place).
func debianRoot(t testing.TB) string {
	t.Helper()
	return testenv.Bookworm.Path(t)
}

// TestFixturesMatchSystemctl compares every embedded fixture tree.
func TestFixturesMatchSystemctl(t *testing.T) {
	needSystemctl(t)
	names := fixtures.Names()
	require.NotEmpty(t, names)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, fixtures.Materialize(name, dir))
			compareTree(t, dir, true)
		})
	}
}

// TestDebianRootMatchesSystemctl compares a full Debian 12 root with ~250
// units, when make has built it.
func TestDebianRootMatchesSystemctl(t *testing.T) {
	needSystemctl(t)
	dir := debianRoot(t)
	compareTree(t, dir, true)
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
	needSystemctl(b)
	dir := benchRoot(b)
	src, err := rootfs.OpenDir(dir)
	require.NoError(b, err)
	defer src.Close()
	fsys := rootfs.New(src)

	const refRuns = 5
	var ref time.Duration
	for range refRuns {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, systemctlPath, "--root="+dir, "list-unit-files", "--no-legend", "--no-pager")
		cmd.Env = []string{"SYSTEMD_LOG_LEVEL=emerg", "PATH=/usr/bin:/bin"}
		start := time.Now()
		err := cmd.Run()
		ref += time.Since(start)
		cancel()
		require.NoError(b, err)
	}
	ref /= refRuns

	var units int
	b.ResetTimer()
	start := time.Now()
	n := 0
	for b.Loop() {
		us, err := List(fsys)
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
