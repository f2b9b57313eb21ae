package audit_test

import (
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// TestFactsShowTheOfflineUpdateBoot: an image with /system-update and
// systemd-system-update-generator boots into system-update.target, and
// the facts say so, the chains starting at the link the generator writes
// into the early generator directory.
func TestFactsShowTheOfflineUpdateBoot(t *testing.T) {
	const gen = "/lib/systemd/system-generators/systemd-system-update-generator"
	tree := fstest.MapFS{
		gen[1:]:                                   {Data: []byte("\x7fELF"), Mode: 0o755},
		"system-update":                           {},
		"lib/systemd/system/multi-user.target":    {Data: []byte("[Unit]\nDescription=m\n")},
		"lib/systemd/system/rescue.target":        {Data: []byte("[Unit]\nDescription=r\n")},
		"lib/systemd/system/system-update.target": {Data: []byte("[Unit]\nAllowIsolate=yes\nWants=upd.service\n")},
		"lib/systemd/system/upd.service":          {Data: []byte("[Service]\nExecStart=/bin/true\n")},
		"etc/systemd/system/default.target":       {Data: []byte("/lib/systemd/system/multi-user.target"), Mode: 0o777 | fs.ModeSymlink},
	}
	inv, err := audit.Model(rootfs.New(tree), audit.ModelOptions{})
	require.NoError(t, err)
	fb := inv.BootFacts()
	assert.Equal(t, "system-update.target", fb.DefaultTarget)
	assert.Equal(t, "system-update.target", fb.Target)
	const src = "/run/systemd/generator.early/default.target"
	for _, u := range inv.Units {
		if u.Name == "upd.service" {
			assert.Equal(t, []unit.Edge{
				{From: "default.target", To: "system-update.target", Kind: "alias", Source: src},
				{From: "system-update.target", To: "upd.service", Kind: "Wants", Source: "/lib/systemd/system/system-update.target"},
			}, u.Chain)
			assert.True(t, u.StartsAtBoot)
			return
		}
	}
	t.Fatal("upd.service is not in the join")
}
