package live_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/host/live"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/bus"
	"github.com/stretchr/testify/require"
)

// BenchmarkPolicies measures what a steady exporter audit adds to the
// collectors: the overlay of the live facts on the cached static facts of
// the DLAMI-like root and the policy evaluation.
func BenchmarkPolicies(b *testing.B) {
	src, err := fixtures.Source("dlami")
	require.NoError(b, err)
	fsys := rootfs.New(src)
	a, err := audit.New(audit.Config{})
	require.NoError(b, err)
	inv, err := audit.Model(fsys, audit.ModelOptions{})
	require.NoError(b, err)
	static, err := a.Facts(fsys, inv)
	require.NoError(b, err)
	eng, err := a.Engine(context.Background(), "host")
	require.NoError(b, err)
	snap := &bus.Snapshot{}
	for name := range static.Units {
		snap.Units = append(snap.Units, bus.Unit{Name: name, Loaded: true, LoadState: "loaded", ActiveState: "active", SubState: "running"})
	}
	f := &live.Facts{Systemd: &live.Systemd{Units: snap.Units}}
	b.ReportAllocs()
	c0 := cpuTime()
	for b.Loop() {
		if _, err := eng.Evaluate(context.Background(), live.NewDocument(static, f)); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpuTime()-c0)
}

// BenchmarkSteadyEvaluate is what a steady exporter audit adds to the
// collectors today: the overlay and Host.Evaluate, which evaluates the
// static rule families once per static document and overlay and the live
// family over its small input every audit.
func BenchmarkSteadyEvaluate(b *testing.B) {
	static := dlamiFacts(b)
	h := newHost(b)
	f := zombieFacts(allActive(static), 70000, "run-x.service")
	ctx := context.Background()
	if _, err := h.Evaluate(ctx, live.NewDocument(static, f)); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	c0 := cpuTime()
	for b.Loop() {
		if _, err := h.Evaluate(ctx, live.NewDocument(static, f)); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpuTime()-c0)
}

// cpuTime is the CPU time (user and system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU per operation and what it is as a share of
// one core when the operation runs every 15 s (a scrape interval).
func reportCPU(b *testing.B, used time.Duration) {
	per := float64(used.Nanoseconds()) / float64(b.N)
	b.ReportMetric(per, "cpu-ns/op")
	b.ReportMetric(100*per/float64(15*time.Second), "%core@15s")
}

// BenchmarkPoliciesStatic is the same evaluation over the static facts
// alone, for comparison.
func BenchmarkPoliciesStatic(b *testing.B) {
	src, err := fixtures.Source("dlami")
	require.NoError(b, err)
	fsys := rootfs.New(src)
	a, err := audit.New(audit.Config{})
	require.NoError(b, err)
	inv, err := audit.Model(fsys, audit.ModelOptions{})
	require.NoError(b, err)
	static, err := a.Facts(fsys, inv)
	require.NoError(b, err)
	eng, err := a.Engine(context.Background(), "host")
	require.NoError(b, err)
	for b.Loop() {
		if _, err := eng.Evaluate(context.Background(), static); err != nil {
			b.Fatal(err)
		}
	}
}
