package security

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/install"
	"github.com/stretchr/testify/require"
)

// BenchmarkSecurityVsUnits scores every service of the Debian 12 root, and
// in the same iteration lists its unit files as `amilint units` does and
// runs systemd-analyze security --offline=true on the same services: the
// ratios (security/units, security/systemd-analyze) are the figures of
// make bench. Each iteration opens the root afresh, as a command does.
func BenchmarkSecurityVsUnits(b *testing.B) {
	root := testenv.Bookworm.Path(b)
	analyze := testenv.Tool(b, "systemd-analyze", "systemd")
	// open opens the root as a command does, and returns its closer.
	open := func() (*rootfs.FS, func()) {
		d, err := rootfs.OpenDir(root)
		require.NoError(b, err)
		return rootfs.New(d), func() { d.Close() }
	}
	fsys, done := open()
	rep, err := ScoreImage(fsys, Options{})
	require.NoError(b, err)
	done()
	var names []string
	for _, u := range rep.Units {
		names = append(names, u.Unit)
	}
	cwd := b.TempDir()
	var tUnits, tSecurity, tAnalyze time.Duration
	for b.Loop() {
		start := time.Now()
		fsys, done := open()
		_, err := install.List(fsys, 252)
		require.NoError(b, err)
		done()
		tUnits += time.Since(start)

		start = time.Now()
		fsys, done = open()
		_, err = ScoreImage(fsys, Options{})
		require.NoError(b, err)
		done()
		tSecurity += time.Since(start)

		start = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, analyze, append([]string{"security", "--offline=true", "--root=" + root, "--no-pager"}, names...)...)
		cmd.Dir = cwd
		cmd.Env = append(os.Environ(), "SYSTEMD_COLORS=0")
		_ = cmd.Run() // exits non-zero when a unit is above its threshold
		cancel()
		tAnalyze += time.Since(start)
	}
	b.ReportMetric(float64(len(names)), "services")
	b.ReportMetric(float64(tSecurity)/float64(tUnits), "security/units")
	b.ReportMetric(float64(tSecurity)/float64(tAnalyze), "security/systemd-analyze")
	b.ReportMetric(float64(tSecurity.Milliseconds())/float64(b.N), "security-ms/op")
}
