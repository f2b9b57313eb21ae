package bustest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/systemd/bus"
	"github.com/amilint/amilint/internal/systemd/bus/bustest"
)

// TestFakeManager: package bus reads the fake manager as it reads
// systemd, and a restarted daemon serves again on the same socket.
func TestFakeManager(t *testing.T) {
	b := bustest.New(t, []bustest.Unit{
		{Name: "ecs.service", FileState: "enabled", ActiveState: "activating", SubState: "auto-restart", NRestarts: 7, Result: "exit-code", Restart: "always"},
		{Name: "ssh.service", FileState: "enabled", ActiveState: "active", SubState: "running", Result: "success", Restart: "on-failure"},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	snap := func() *bus.Snapshot {
		c, err := bus.Dial(ctx, b.Socket())
		require.NoError(t, err)
		defer c.Close()
		s, err := c.Snapshot(ctx)
		require.NoError(t, err)
		return s
	}
	s := snap()
	u, ok := s.Unit("ecs.service")
	require.True(t, ok)
	assert.Equal(t, uint32(7), u.NRestarts)
	assert.Equal(t, "always", u.Restart)
	assert.Equal(t, "enabled", u.FileState)
	assert.True(t, u.Loaded)
	assert.Equal(t, [][]string{{"/usr/bin/ecs"}}, u.ExecStart)

	b.Stop()
	_, err := bus.Dial(ctx, b.Socket())
	require.Error(t, err, "no daemon, no bus")
	b.Start()
	u, ok = snap().Unit("ssh.service")
	require.True(t, ok)
	assert.Equal(t, "active", u.ActiveState)
}
