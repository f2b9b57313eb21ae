package live_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/amilint/amilint/internal/cgroup"
	"github.com/amilint/amilint/internal/cgroup/cgrouptest"
	"github.com/amilint/amilint/internal/cpu"
	"github.com/amilint/amilint/internal/finding"
	"github.com/amilint/amilint/internal/live"
	"github.com/amilint/amilint/internal/sdbus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func incidentFacts() *live.Facts {
	snap := &sdbus.Snapshot{Time: time.Now(), Units: []sdbus.Unit{
		{Name: "ecs.service", FileState: "enabled", Loaded: true, LoadState: "loaded", ActiveState: "activating", SubState: "auto-restart",
			NRestarts: 4242, ContainerPerRestart: true, ExecStart: [][]string{{"/usr/libexec/amazon-ecs-init", "start"}}},
		{Name: "ssh.service", FileState: "enabled", Loaded: true, LoadState: "loaded", ActiveState: "active", SubState: "running"},
		{Name: "agent.service", FileState: "disabled", Loaded: true, LoadState: "loaded", ActiveState: "inactive", SubState: "dead",
			ContainerPerRestart: true, ExecStart: [][]string{{"/usr/bin/docker", "run", "x"}}},
	}}
	return &live.Facts{
		Cgroups: &live.Cgroups{Memory: &cgroup.Memory{Version: 1, Hierarchy: "/sys/fs/cgroup/memory", Tracked: 68680, Present: 240, Zombies: 68440},
			Suspect: "ecs.service", Why: "it crash-loops"},
		CPU: &cpu.Report{Busy: 0.02, Saturated: []cpu.Saturation{
			{CPU: 39, System: 1, NICs: []string{"eth0"}, MachineBusy: 0.02, Statement: "core 39 (serving eth0 IRQs) at 100% system while the machine is 2% busy"},
			{CPU: 7, System: 0.96, MachineBusy: 0.02, Statement: "core 7 at 96% system while the machine is 2% busy"},
		}},
		Systemd:    &live.Systemd{Units: snap.Units, CrashLooping: sdbus.Detect(nil, snap, 3), ContainerPerRestart: []string{"ecs.service"}},
		Thresholds: live.Thresholds{Zombies: 1000, Restarts: 3, Saturation: 0.95},
	}
}

func TestFindings(t *testing.T) {
	fs := live.Findings(incidentFacts())
	type key struct {
		rule, unit string
		sev        finding.Severity
	}
	var got []key
	for _, f := range fs {
		got = append(got, key{f.RuleID, f.Unit, f.Severity})
		assert.NotEmpty(t, f.Message)
	}
	assert.Equal(t, []key{
		{live.RuleMemcgZombies, "ecs.service", finding.High},
		{live.RuleUnitCrashLoop, "ecs.service", finding.High},
		{live.RuleContainerPerStart, "ecs.service", finding.High},
		{live.RuleIRQCoreSaturated, "", finding.High},
		{live.RuleCoreSaturated, "", finding.Medium},
	}, got)
	assert.Contains(t, fs[0].Message, "68440 zombie memory cgroups")
	assert.Contains(t, fs[0].Remediation.Text, "reboot")
	assert.Equal(t, []string{"systemctl disable --now ecs.service", "systemctl reboot"}, fs[0].Remediation.Commands)
	assert.Equal(t, "core 39 (serving eth0 IRQs) at 100% system while the machine is 2% busy", fs[3].Message)

	healthy := incidentFacts()
	healthy.Cgroups.Memory.Zombies = 999
	healthy.Systemd = nil
	healthy.CPU = nil
	assert.Empty(t, live.Findings(healthy), "below the zombie threshold")
}

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
	cgrouptest.Hierarchy(t)
	a, err := live.NewAuditor(live.Options{Sample: 10 * time.Millisecond, Collect: []string{live.CollectCgroup, live.CollectCPU}})
	require.NoError(t, err)
	defer a.Close()
	ctx := context.Background()
	first, err := a.Audit(ctx)
	require.NoError(t, err)
	assert.Equal(t, 10*time.Millisecond, first.Sample)

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
