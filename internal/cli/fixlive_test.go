package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFixLiveWithoutSystemd runs fix --live where no D-Bus change is
// needed or possible; the real changes are tested against a booted
// systemd in TestE2ELive (make e2e-live).
func TestFixLiveWithoutSystemd(t *testing.T) {
	root := hostRoot(t)
	args := []string{"fix", "--live", "--root", root, "--collect", "cgroup", "--sample", "10ms", "--zombie-threshold", "1000000"}

	// ecs.service is enabled and unconfigured: a disable is due, and
	// there is no bus to carry it out.
	code, out, stderr := runCLI(t, append(args, "--bus", filepath.Join(t.TempDir(), "no-bus"))...)
	assert.Equal(t, ExitError, code, out)
	assert.Contains(t, stderr, "no-bus")

	code, _, stderr = runCLI(t, append(args, "/some/dir")...)
	assert.Equal(t, ExitError, code)
	assert.Contains(t, stderr, "takes no TARGET")

	// In a cluster: nothing at or above high to disable.
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc/ecs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/ecs/ecs.config"), []byte("ECS_CLUSTER=prod\n"), 0o644))
	code, out, stderr = runCLI(t, append(args, "--dry-run")...)
	assert.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, out, "nothing to change: no disable or mask remediation at or above high")
	assert.Contains(t, out, "reminder: a reboot is what purges the zombie memory cgroups already leaked")
}
