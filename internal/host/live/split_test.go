package live_test

import (
	"context"
	"os"
	"testing"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/host/cgroup"
	"github.com/amilint/amilint/internal/host/cpu"
	"github.com/amilint/amilint/internal/host/live"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/bus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newHost is a Host whose collectors are never run here: the tests hand
// its Evaluate documents built from fixed facts.
func newHost(t testing.TB) *live.Host {
	t.Helper()
	h, err := live.NewHost(context.Background(), live.Options{Collect: []string{live.CollectCgroup}, ZombieThreshold: 100}, audit.Config{}, "host")
	require.NoError(t, err)
	t.Cleanup(h.Close)
	return h
}

// zombieFacts are live facts past the zombie threshold with a suspect,
// two cores (one saturated serving eth0) and the systemd snapshot.
func zombieFacts(snap *bus.Snapshot, zombies int, suspect string) *live.Facts {
	return &live.Facts{
		Cgroups: &live.Cgroups{
			Memory:  &cgroup.Memory{Version: 1, Hierarchy: "/sys/fs/cgroup/memory", Tracked: zombies + 40, Present: 40, Zombies: zombies},
			Suspect: suspect, Why: "it restarted 7 times",
		},
		CPU:     &cpu.Report{Busy: 0.02, Cores: []cpu.Core{{CPU: 0, System: 0.01}, {CPU: 1, System: 1, NICs: []string{"eth0"}}, {CPU: 2, System: 0.97}}},
		Systemd: &live.Systemd{Units: snap.Units, CrashLooping: bus.Detect(nil, snap, 3)},
	}
}

// dlamiFacts are the static facts of the DLAMI-like fixture root.
func dlamiFacts(t testing.TB) *facts.Document {
	t.Helper()
	src, err := fixtures.Source("dlami")
	require.NoError(t, err)
	fsys := rootfs.New(src)
	a, err := audit.New(audit.Config{})
	require.NoError(t, err)
	inv, err := audit.Model(fsys, audit.ModelOptions{})
	require.NoError(t, err)
	static, err := a.Facts(fsys, inv)
	require.NoError(t, err)
	return static
}

// allActive is a snapshot with every unit of static loaded and running,
// plus a runtime-only service.
func allActive(static *facts.Document) *bus.Snapshot {
	snap := &bus.Snapshot{}
	for name := range static.Units {
		snap.Units = append(snap.Units, bus.Unit{Name: name, Loaded: true, LoadState: "loaded", ActiveState: "active", SubState: "running"})
	}
	snap.Units = append(snap.Units, bus.Unit{Name: "run-x.service", Loaded: true, LoadState: "loaded", ActiveState: "active", SubState: "running",
		Restart: "always", NRestarts: 5, ContainerPerRestart: true, ExecStart: [][]string{{"/usr/bin/docker", "run", "x"}}})
	return snap
}

// TestSplitEqualsFull proves that the split evaluation (static families
// cached per static document and overlay, the live family over its small
// input) gives exactly the findings of one evaluation of every policy over
// the whole document, including when the overlay changes between audits
// over the same cached static facts.
func TestSplitEqualsFull(t *testing.T) {
	h := newHost(t)
	ctx := context.Background()
	small := staticFacts(t, hostRoot(t, true))
	smallFixed := staticFacts(t, hostRoot(t, false))
	dlami := dlamiFacts(t)
	docs := []struct {
		name string
		doc  *live.Document
	}{
		{"crash loop, zombies, saturated cores", live.NewDocument(small, zombieFacts(snapshot("enabled", "activating", "auto-restart", 4242), 500, "ecs.service"))},
		{"same static, ecs running, manual stopped", live.NewDocument(small, zombieFacts(&bus.Snapshot{Units: []bus.Unit{
			{Name: "ecs.service", FileState: "enabled", Loaded: true, LoadState: "loaded", ActiveState: "active", SubState: "running", ContainerPerRestart: true},
			{Name: "manual.service", FileState: "static", Loaded: true, LoadState: "loaded", ActiveState: "inactive", SubState: "dead", NRestarts: 9},
			{Name: "ssh.service", FileState: "enabled", Loaded: true, LoadState: "loaded", ActiveState: "active", SubState: "running", NRestarts: 3},
			{Name: "once.service", Loaded: true, LoadState: "loaded", ActiveState: "active", SubState: "running", NRestarts: 1},
			{Name: "limit.service", Loaded: true, LoadState: "loaded", ActiveState: "failed", SubState: "failed", Result: "start-limit-hit"},
		}}, 5, ""))},
		{"same static, crash loop again", live.NewDocument(small, zombieFacts(snapshot("enabled", "activating", "auto-restart", 4242), 500, "ecs.service"))},
		{"no systemd collector", live.NewDocument(small, &live.Facts{})},
		{"after fix", live.NewDocument(smallFixed, zombieFacts(snapshot("disabled", "inactive", "dead", 4242), 500, ""))},
		{"dlami, every unit active", live.NewDocument(dlami, zombieFacts(allActive(dlami), 70000, "avahi-daemon.service"))},
		{"dlami, static only", live.NewDocument(dlami, nil)},
	}
	rules := map[string]bool{}
	for _, c := range docs {
		want, err := h.EvaluateFull(ctx, c.doc)
		require.NoError(t, err, c.name)
		got, err := h.Evaluate(ctx, c.doc)
		require.NoError(t, err, c.name)
		require.Equal(t, want, got, c.name)
		for _, f := range want {
			rules[f.RuleID] = true
		}
	}
	// The documents exercise every live rule and static ones.
	for _, id := range []string{live.RuleMemcgZombies, live.RuleUnitCrashLoop, live.RuleContainerPerStart, live.RuleIRQCoreSaturated,
		live.RuleCoreSaturated, "ecs-agent-unconfigured", "crash-loop-restart"} {
		assert.True(t, rules[id], "no document gave %s: %v", id, rules)
	}
}

// TestSplitUserPolicies shows that with user policies (which may read
// any part of the document) Evaluate is the full evaluation.
func TestSplitUserPolicies(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(dir+"/mine.rego", []byte(`package amilint.rules.mine

findings contains {"rule_id": "mine", "message": sprintf("%s is %s", [name, u.active_state])} if {
	some name, u in input.units
	u.active_state == "activating"
}
`), 0o644))
	h, err := live.NewHost(context.Background(), live.Options{Collect: []string{live.CollectCgroup}}, audit.Config{PolicyDirs: []string{dir}}, "host")
	require.NoError(t, err)
	defer h.Close()
	doc := live.NewDocument(staticFacts(t, hostRoot(t, true)), zombieFacts(snapshot("enabled", "activating", "auto-restart", 4242), 5, ""))
	fs, err := h.Evaluate(context.Background(), doc)
	require.NoError(t, err)
	assert.Contains(t, ids(fs), "mine ")
	want, err := h.EvaluateFull(context.Background(), doc)
	require.NoError(t, err)
	assert.Equal(t, want, fs)
}
