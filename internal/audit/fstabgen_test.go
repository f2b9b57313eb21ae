package audit_test

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/condition"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// TestFstabFollowsTheAssumedCommandLine: systemd-fstab-generator's units
// start at boot with the chain from the link it writes, and
// --assume kernel-command-line=fstab=no, which wins over the image's
// boot loader, turns it off.
func TestFstabFollowsTheAssumedCommandLine(t *testing.T) {
	tree := fstest.MapFS{
		"lib/systemd/system-generators/systemd-fstab-generator": {Data: []byte("\x7fELF"), Mode: 0o755},
		"etc/fstab":                          {Data: []byte("LABEL=data /data ext4 defaults 0 0\n")},
		"etc/kernel/cmdline":                 {Data: []byte("quiet\n")},
		"lib/systemd/system/default.target":  {Data: []byte("[Unit]\nRequires=local-fs.target\n")},
		"lib/systemd/system/local-fs.target": {Data: []byte("[Unit]\nDescription=l\n")},
		"lib/systemd/system/rescue.target":   {Data: []byte("[Unit]\nDescription=r\n")},
	}
	starts := func(assume condition.Assumptions) (bool, []unit.Edge) {
		inv, err := audit.Model(rootfs.New(tree), audit.ModelOptions{Assume: assume})
		require.NoError(t, err)
		for _, u := range inv.Units {
			if u.Name == "data.mount" {
				return u.StartsAtBoot, u.Chain
			}
		}
		return false, nil
	}
	on, chain := starts(condition.Assumptions{})
	assert.True(t, on)
	require.NotEmpty(t, chain)
	assert.Equal(t, unit.Edge{From: "local-fs.target", To: "data.mount", Kind: ".requires",
		Source: "/run/systemd/generator/local-fs.target.requires/data.mount"}, chain[len(chain)-1])
	a := condition.Assumptions{}
	require.NoError(t, a.Set("kernel-command-line=fstab=no"))
	on, _ = starts(a)
	assert.False(t, on)
}

// TestGettyFollowsTheAssumedVirtualization: systemd-getty-generator starts
// a serial getty on Xen's hvc0 only when --assume virtualization=xen says
// the machine is a Xen guest, and on the boot loader's serial console.
func TestGettyFollowsTheAssumedVirtualization(t *testing.T) {
	tree := fstest.MapFS{
		"lib/systemd/system-generators/systemd-getty-generator": {Data: []byte("\x7fELF"), Mode: 0o755},
		"etc/kernel/cmdline":                       {Data: []byte("console=tty0 console=ttyS0,115200\n")},
		"lib/systemd/system/default.target":        {Data: []byte("[Unit]\nWants=getty.target\n")},
		"lib/systemd/system/getty.target":          {Data: []byte("[Unit]\nDescription=g\n")},
		"lib/systemd/system/serial-getty@.service": {Data: []byte("[Service]\nExecStart=/sbin/agetty %I\n")},
		"lib/systemd/system/rescue.target":         {Data: []byte("[Unit]\nDescription=r\n")},
	}
	starts := func(assume condition.Assumptions) map[string]bool {
		inv, err := audit.Model(rootfs.New(tree), audit.ModelOptions{Assume: assume})
		require.NoError(t, err)
		on := map[string]bool{}
		for _, u := range inv.Units {
			on[u.Name] = u.StartsAtBoot
		}
		return on
	}
	on := starts(condition.Assumptions{})
	assert.True(t, on["serial-getty@ttyS0.service"])
	assert.False(t, on["serial-getty@hvc0.service"])
	a := condition.Assumptions{}
	require.NoError(t, a.Set("virtualization=xen"))
	on = starts(a)
	assert.True(t, on["serial-getty@ttyS0.service"])
	assert.True(t, on["serial-getty@hvc0.service"])
}
