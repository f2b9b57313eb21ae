package live_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/amilint/amilint/internal/host/cgroup/cgrouptest"
	"github.com/amilint/amilint/internal/host/live"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOptionsValidate(t *testing.T) {
	err := live.Options{Collect: []string{"cgroup", "gpu", "disk"}, Saturation: 2}.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"gpu"`)
	assert.Contains(t, err.Error(), `"disk"`)
	assert.Contains(t, err.Error(), "saturation")
	require.NoError(t, live.Options{}.Validate())
}

// TestCollectHost audits this machine for real. It has no systemd, so the
// systemd collector fails on a bus socket that does not exist and the
// others still report.
func TestCollectHost(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := live.Collect(ctx, live.Options{Sample: 100 * time.Millisecond, Bus: filepath.Join(t.TempDir(), "no-bus")})
	require.Error(t, err)
	require.NotNil(t, f)
	assert.Contains(t, f.Errors, live.CollectSystemd)
	assert.NotContains(t, f.Errors, live.CollectCgroup)
	require.NotNil(t, f.Cgroups)
	require.NotNil(t, f.Cgroups.Memory)
	require.NotNil(t, f.Cgroups.Growth)
	require.NotNil(t, f.CPU)
	assert.NotEmpty(t, f.CPU.Cores)
	assert.Nil(t, f.Systemd)
}

// TestAuditorGrowth audits twice with one Auditor, making real zombie
// memory cgroups in between: the second audit compares against the
// first's reading and sees them grow, without sampling again.
func TestAuditorGrowth(t *testing.T) {
	cgrouptest.Exclusive(t) // the count is the machine's
	a, err := live.NewAuditor(live.Options{Sample: 10 * time.Millisecond, Collect: []string{live.CollectCgroup, live.CollectCPU}})
	require.NoError(t, err)
	defer a.Close()
	ctx := context.Background()
	first, err := a.Audit(ctx)
	require.NoError(t, err)
	assert.Equal(t, 10*time.Millisecond, first.Sample)
	require.NotNil(t, first.Cgroups.Growth)
	assert.GreaterOrEqual(t, first.Cgroups.Growth.Interval, 10*time.Millisecond, "the first audit's readings are a sample apart")

	const n = 20
	cgrouptest.MakeWithProcesses(t, n, 64<<10)
	second, err := a.Audit(ctx)
	require.NoError(t, err)
	assert.Greater(t, second.Sample, 10*time.Millisecond, "the second audit spans the time since the first")
	require.NotNil(t, second.Cgroups.Growth)
	t.Logf("growth between audits: %+v", *second.Cgroups.Growth)
	assert.GreaterOrEqual(t, second.Cgroups.Growth.Zombies, n-n/10)
	assert.LessOrEqual(t, second.Cgroups.Growth.Zombies, n+n/2)
	assert.Equal(t, second.Cgroups.Memory.Zombies-first.Cgroups.Memory.Zombies, second.Cgroups.Growth.Zombies)
	assert.Greater(t, second.CPU.Interval, 10*time.Millisecond)
}
