package live_test

import (
	"context"
	"testing"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/live"
	"github.com/amilint/amilint/internal/rootfs"
	"github.com/amilint/amilint/internal/sdbus"
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
	inv, err := audit.Model(fsys)
	require.NoError(b, err)
	static, err := a.Facts(fsys, inv)
	require.NoError(b, err)
	eng, err := a.Engine(context.Background(), "host")
	require.NoError(b, err)
	snap := &sdbus.Snapshot{}
	for name := range static.Units {
		snap.Units = append(snap.Units, sdbus.Unit{Name: name, Loaded: true, LoadState: "loaded", ActiveState: "active", SubState: "running"})
	}
	f := &live.Facts{Systemd: &live.Systemd{Units: snap.Units}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := eng.Evaluate(context.Background(), live.NewDocument(static, f)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPoliciesStatic is the same evaluation over the static facts
// alone, for comparison.
func BenchmarkPoliciesStatic(b *testing.B) {
	src, err := fixtures.Source("dlami")
	require.NoError(b, err)
	fsys := rootfs.New(src)
	a, err := audit.New(audit.Config{})
	require.NoError(b, err)
	inv, err := audit.Model(fsys)
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
