package bus_test

import (
	"testing"
	"time"

	"github.com/amilint/amilint/internal/systemd/bus"
	"github.com/godbus/dbus/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAddress(t *testing.T) {
	for in, want := range map[string]string{
		"":                                      "",
		"unix:path=/run/dbus/system_bus_socket": "unix:path=/run/dbus/system_bus_socket",
		"/proc/42/root/run/dbus/system_bus_socket": "unix:path=/proc/42/root/run/dbus/system_bus_socket",
		"./bus":                     "unix:path=./bus",
		"tcp:host=127.0.0.1,port=1": "tcp:host=127.0.0.1,port=1",
	} {
		assert.Equal(t, want, bus.Address(in), in)
	}
}

func TestContainerPerRestart(t *testing.T) {
	tests := []struct {
		argv [][]string
		want bool
	}{
		{[][]string{{"/usr/libexec/amazon-ecs-init", "start"}}, true},
		{[][]string{{"/usr/libexec/amazon-ecs-init", "pre-start"}}, false},
		{[][]string{{"/usr/bin/docker", "run", "--rm", "--name", "agent", "amazon/amazon-ecs-agent:latest"}}, true},
		{[][]string{{"/usr/bin/docker", "start", "-a", "agent"}}, false},
		{[][]string{{"/bin/sh", "-c", "exec docker run --rm busybox"}}, true},
		{[][]string{{"/usr/bin/env", "podman", "run", "x"}}, true},
		{[][]string{{"/usr/bin/docker", "compose", "up"}}, true},
		{[][]string{{"/usr/sbin/sshd", "-D"}}, false},
		{nil, false},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, bus.ContainerPerRestart(tt.argv), "%q", tt.argv)
	}
}

// TestApplyServiceProperties feeds properties in the exact Go types godbus
// decodes them to: ExecStart a(sasbttttuii) arrives as [][]any.
func TestApplyServiceProperties(t *testing.T) {
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	props := map[string]any{
		"Result":                 "exit-code",
		"Restart":                "on-failure",
		"NRestarts":              uint32(7),
		"ExecMainStartTimestamp": uint64(start.UnixMicro()),
		"ExecStart": [][]any{{
			"/usr/libexec/amazon-ecs-init", []string{"/usr/libexec/amazon-ecs-init", "start"}, false,
			uint64(0), uint64(0), uint64(0), uint64(0), uint32(0), int32(0), int32(0),
		}},
		"MainPID": dbus.MakeVariant(uint32(1)), // ignored
	}
	var u bus.Unit
	bus.ApplyServiceProperties(&u, props)
	assert.Equal(t, "exit-code", u.Result)
	assert.Equal(t, "on-failure", u.Restart)
	assert.Equal(t, uint32(7), u.NRestarts)
	assert.Equal(t, start, u.ExecMainStart)
	assert.Equal(t, [][]string{{"/usr/libexec/amazon-ecs-init", "start"}}, u.ExecStart)
	assert.True(t, u.ContainerPerRestart)

	var bad bus.Unit
	bus.ApplyServiceProperties(&bad, map[string]any{"NRestarts": "x", "ExecStart": 3, "ExecMainStartTimestamp": uint64(0)})
	assert.Equal(t, bus.Unit{}, bad)
}

func TestDetect(t *testing.T) {
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	svc := func(name, sub, result string, n uint32) bus.Unit {
		return bus.Unit{Name: name, Loaded: true, LoadState: "loaded", ActiveState: "active", SubState: sub, Result: result, NRestarts: n}
	}
	prev := &bus.Snapshot{Time: t0, Units: []bus.Unit{
		svc("a.service", "running", "success", 0),
		svc("ecs.service", "running", "success", 1),
		svc("ssh.service", "running", "success", 0),
	}}
	cur := &bus.Snapshot{Time: t0.Add(10 * time.Second), Units: []bus.Unit{
		svc("a.service", "auto-restart", "exit-code", 1),
		svc("b.service", "failed", "start-limit-hit", 2),
		svc("c.service", "running", "success", 5),
		svc("ecs.service", "running", "success", 2),
		svc("ssh.service", "running", "success", 0),
		// Restarted until its start limit, then given up on: systemd 252
		// keeps Result=exit-code.
		{Name: "w.service", Loaded: true, ActiveState: "failed", SubState: "failed", Result: "exit-code", NRestarts: 9},
		{Name: "x.socket", Loaded: true, SubState: "auto-restart"},
		{Name: "y.service", FileState: "enabled", NRestarts: 9},
		// Stopped after a crash loop: the count stays, the loop is over.
		{Name: "z.service", Loaded: true, ActiveState: "inactive", SubState: "dead", Result: "exit-code", NRestarts: 9},
	}}
	got := bus.Detect(prev, cur, 0)
	assert.Equal(t, []string{"a.service", "b.service", "c.service", "ecs.service", "w.service"}, got)
	w, _ := cur.Unit("w.service")
	assert.Equal(t, []string{"systemd restarted it 9 times (threshold 3) and then gave up"}, w.CrashLoop.Reasons)
	ecs, ok := cur.Unit("ecs.service")
	require.True(t, ok)
	require.NotNil(t, ecs.CrashLoop)
	assert.Equal(t, uint32(1), ecs.CrashLoop.Growth)
	assert.Equal(t, []string{"it restarted 1 times in 10s"}, ecs.CrashLoop.Reasons)
	a, _ := cur.Unit("a.service")
	assert.Contains(t, a.CrashLoop.Reasons[0], "auto-restart")
	ssh, _ := cur.Unit("ssh.service")
	assert.Nil(t, ssh.CrashLoop)

	// Without a previous snapshot, growth is not a reason.
	assert.Equal(t, []string{"a.service", "b.service", "c.service", "w.service"}, bus.Detect(nil, cur, 0))
	assert.Equal(t, []string{"a.service", "b.service"}, bus.Detect(nil, cur, 10))
}
