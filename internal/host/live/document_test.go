package live_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"
	"testing/fstest"
	"time"

	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/host/cpu"
	"github.com/amilint/amilint/internal/host/live"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/bus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostRoot is a small host root: the vendor's ecs.service enabled (no
// /etc/ecs/ecs.config), ssh enabled, and manual.service installed but not
// enabled.
func hostRoot(t *testing.T, ecsEnabled bool) *rootfs.FS {
	t.Helper()
	ecs, err := os.ReadFile("../../../fixtures/trees/dlami/root/lib/systemd/system/ecs.service")
	require.NoError(t, err)
	m := fstest.MapFS{
		"etc/os-release":                                         {Data: []byte("ID=debian\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n")},
		"etc/machine-id":                                         {Data: []byte("0123456789abcdef0123456789abcdef\n")},
		"lib/systemd/system/default.target":                      {Data: []byte("[Unit]\nRequires=multi-user.target\n")},
		"lib/systemd/system/multi-user.target":                   {Data: []byte("[Unit]\nDescription=Multi-User\n")},
		"lib/systemd/system/ecs.service":                         {Data: ecs},
		"lib/systemd/system/ssh.service":                         {Data: []byte("[Service]\nExecStart=/usr/sbin/sshd -D\n[Install]\nWantedBy=multi-user.target\n")},
		"lib/systemd/system/manual.service":                      {Data: []byte("[Service]\nExecStart=/bin/sleep infinity\n")},
		"usr/sbin/sshd":                                          {Data: []byte{}, Mode: 0o755},
		"bin/sleep":                                              {Data: []byte{}, Mode: 0o755},
		"etc/systemd/system/multi-user.target.wants/ssh.service": {Data: []byte("/lib/systemd/system/ssh.service"), Mode: os.ModeSymlink},
	}
	if ecsEnabled {
		m["etc/systemd/system/multi-user.target.wants/ecs.service"] = &fstest.MapFile{Data: []byte("/lib/systemd/system/ecs.service"), Mode: os.ModeSymlink}
	}
	return rootfs.New(m)
}

func staticFacts(t *testing.T, fsys *rootfs.FS) *facts.Document {
	t.Helper()
	a, err := audit.New(audit.Config{})
	require.NoError(t, err)
	inv, err := audit.Model(fsys, audit.ModelOptions{})
	require.NoError(t, err)
	doc, err := a.Facts(fsys, inv)
	require.NoError(t, err)
	return doc
}

// snapshot is what a systemd running that root says: ecs.service
// crash-looping, manual.service started by hand, units without files.
func snapshot(ecsFile, ecsActive, ecsSub string, restarts uint32) *bus.Snapshot {
	return &bus.Snapshot{Time: time.Now(), Units: []bus.Unit{
		{Name: "ecs.service", FileState: ecsFile, Loaded: true, LoadState: "loaded", ActiveState: ecsActive, SubState: ecsSub,
			Result: "exit-code", Restart: "on-failure", NRestarts: restarts, ContainerPerRestart: true,
			ExecStart: [][]string{{"/usr/libexec/amazon-ecs-init", "start"}}},
		{Name: "init.scope", Loaded: true, LoadState: "loaded", ActiveState: "active", SubState: "running"},
		{Name: "manual.service", FileState: "static", Loaded: true, LoadState: "loaded", ActiveState: "active", SubState: "running", Restart: "no"},
		{Name: "ssh.service", FileState: "enabled", Loaded: true, LoadState: "loaded", ActiveState: "active", SubState: "running",
			Result: "success", Restart: "no", ExecMainStart: time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)},
		{Name: "transient-job.service", Loaded: true, LoadState: "loaded", ActiveState: "active", SubState: "running", Restart: "no"},
	}}
}

// liveFacts are the collectors' facts: this machine's real memory cgroup
// counts and the systemd snapshot.
func liveFacts(t *testing.T, snap *bus.Snapshot) *live.Facts {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := live.Collect(ctx, live.Options{Sample: 10 * time.Millisecond, Collect: []string{live.CollectCgroup}})
	require.NoError(t, err)
	require.NotNil(t, f.Cgroups)
	require.NotNil(t, f.Cgroups.Memory, "this machine has a memory controller")
	f.Systemd = &live.Systemd{Units: snap.Units, CrashLooping: bus.Detect(nil, snap, 3)}
	f.CPU = &cpu.Report{Busy: 0.02, Cores: []cpu.Core{{CPU: 0, System: 0.01}, {CPU: 1, System: 1, NICs: []string{"eth0"}}}}
	return f
}

func evaluate(t *testing.T, doc *live.Document, params map[string]any) []finding.Finding {
	t.Helper()
	a, err := audit.New(audit.Config{Params: map[string]any{"live": params}})
	require.NoError(t, err)
	eng, err := a.Engine(context.Background(), "host")
	require.NoError(t, err)
	fs, err := eng.Evaluate(context.Background(), doc)
	require.NoError(t, err)
	return fs
}

func ids(fs []finding.Finding) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.RuleID+" "+f.Unit)
	}
	return out
}

func TestDocumentOverlaysRuntime(t *testing.T) {
	static := staticFacts(t, hostRoot(t, true))
	f := liveFacts(t, snapshot("enabled", "activating", "auto-restart", 4242))
	doc := live.NewDocument(static, f)

	// The JSON policies see.
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	var in struct {
		Schema string `json:"schema"`
		Units  map[string]map[string]any
		Live   struct {
			Cgroups struct {
				Memory struct{ Zombies, Tracked, Present int }
			}
		}
	}
	require.NoError(t, json.Unmarshal(b, &in))
	assert.Equal(t, facts.Schema, in.Schema)
	assert.Equal(t, f.Cgroups.Memory.Zombies, in.Live.Cgroups.Memory.Zombies, "the real zombie figure at live.cgroups.memory.zombies")
	assert.Equal(t, f.Cgroups.Memory.Tracked-f.Cgroups.Memory.Present, in.Live.Cgroups.Memory.Zombies)

	ecs := in.Units["ecs.service"]
	assert.Equal(t, "enabled", ecs["state"], "static state")
	assert.Equal(t, true, ecs["starts_at_boot"])
	assert.Equal(t, "on-failure", ecs["restart"], "static facts kept")
	assert.Equal(t, "activating", ecs["active_state"])
	assert.Equal(t, "auto-restart", ecs["sub_state"])
	assert.Equal(t, "exit-code", ecs["result"])
	assert.Equal(t, 4242.0, ecs["n_restarts"])
	assert.Equal(t, true, ecs["crash_looping"])
	assert.Equal(t, true, ecs["container_per_restart"])

	manual := in.Units["manual.service"]
	assert.Equal(t, false, manual["starts_at_boot"], "the static model does not start it")
	assert.Equal(t, true, manual["active_now"])
	assert.Equal(t, true, manual["active_at_boot"], "active now counts on a live host")

	ssh := in.Units["ssh.service"]
	assert.Equal(t, "2026-11-22T12:00:00Z", ssh["exec_main_start"])

	job := in.Units["transient-job.service"]
	require.NotNil(t, job, "a unit only D-Bus knows is added")
	assert.Equal(t, "service", job["unit_type"])
	assert.Equal(t, true, job["active_at_boot"])
	assert.Equal(t, []any{}, job["chain"])
	scope := in.Units["init.scope"]
	require.NotNil(t, scope)
	assert.Equal(t, false, scope["active_at_boot"], "a scope active now is the kernel's and PID 1's doing, not the image's")

	assert.False(t, static.Units["manual.service"].ActiveAtBoot, "the static document is not changed")
	_, ok := static.Units["transient-job.service"]
	assert.False(t, ok)
}

// TestDocumentPolicies evaluates the shipped policies over the live
// document: the static unit rules apply under their own ids, the live
// rules decide with their params, and a fixed host is clean.
func TestDocumentPolicies(t *testing.T) {
	f := liveFacts(t, snapshot("enabled", "activating", "auto-restart", 4242))
	zombies := f.Cgroups.Memory.Zombies
	doc := live.NewDocument(staticFacts(t, hostRoot(t, true)), f)

	fs := evaluate(t, doc, map[string]any{"zombie_threshold": zombies + 1})
	got := ids(fs)
	for _, want := range []string{
		"ecs-agent-unconfigured ecs.service", // static rule, same id
		"crash-loop-restart ecs.service",     // static rule, same id
		"live-unit-crashloop ecs.service",
		"live-container-per-restart ecs.service",
		"live-irq-core-saturated ",
	} {
		assert.Contains(t, got, want)
	}
	assert.NotContains(t, got, "live-memcg-zombies ", "below the threshold")

	// The zombie figure decides against its threshold, from params.
	fs = evaluate(t, doc, map[string]any{"zombie_threshold": max(zombies, 1)})
	if zombies >= 1 {
		i := indexOf(fs, live.RuleMemcgZombies)
		require.GreaterOrEqual(t, i, 0, "%v", ids(fs))
		assert.Contains(t, fs[i].Remediation.Text, "A reboot is what purges the memory cgroups already leaked")
		assert.Contains(t, fs[i].Remediation.Text, "disabling the leaking unit is what stops the leak")
	}

	// After amilint fix --live: disabled and stopped, NRestarts kept.
	fixed := live.NewDocument(staticFacts(t, hostRoot(t, false)), liveFacts(t, snapshot("disabled", "inactive", "dead", 4242)))
	fs = evaluate(t, fixed, map[string]any{"zombie_threshold": zombies + 1})
	for _, f := range fs {
		assert.NotEqual(t, "ecs.service", f.Unit, "%s", f.RuleID)
	}
	// What is left is not the fix's: the saturated core, and the two
	// running services with no sandboxing (service-exposure).
	assert.Equal(t, []string{"live-irq-core-saturated ", "service-exposure manual.service", "service-exposure ssh.service"}, ids(fs))
	i := indexOf(fs, "service-exposure")
	require.GreaterOrEqual(t, i, 0)
	assert.Contains(t, fs[i].Message, "manual.service is running with an exposure of 9.6")
}

func indexOf(fs []finding.Finding, rule string) int {
	for i, f := range fs {
		if f.RuleID == rule {
			return i
		}
	}
	return -1
}
