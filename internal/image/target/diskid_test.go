//go:build !amilint_guest

package target

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/rootfs"
)

const diskUUID = "0a1b2c3d-4e5f-4a6b-8c7d-0e1f2a3b4c5d"

func diskOf(t *testing.T, img string, opt Options) *rootfs.Disk {
	t.Helper()
	im, err := Open(context.Background(), img, opt)
	require.NoError(t, err)
	defer im.Close()
	d := im.FS.Memo().Disk()
	require.NotNil(t, d)
	return d
}

// TestDiskIdentities: every volume of a disk image is listed with the
// names udev gives it, whichever volume holds the root and whichever
// --partition chose; what amilint cannot name makes the disk's filesystems
// unknown.
func TestDiskIdentities(t *testing.T) {
	tree := disktest.Tree(t)
	fsImg := disktest.Ext4(t, tree, "24M")
	labelled := t.TempDir() + "/fs.ext4"
	disktest.Run(t, "mke2fs", "-q", "-F", "-t", "ext4", "-U", diskUUID, "-L", "my root", "-d", tree, labelled, "20M")

	t.Run("mbr with logical partitions", func(t *testing.T) {
		img := disktest.MBRLogical(t, labelled)
		for _, part := range []int{0, 5} {
			d := diskOf(t, img, Options{Partition: part})
			require.Len(t, d.Volumes, 3)
			root := d.Volumes[1]
			assert.Equal(t, "partition 5", root.Where)
			assert.Equal(t, "ext4", root.Type)
			assert.Equal(t, diskUUID, root.UUID)
			assert.Equal(t, `my\x20root`, root.Label)
			assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{8}-05$`), root.PartUUID)
			assert.Empty(t, root.PartLabel)
			// Partitions 1 and 6 were never written: blank, no filesystem.
			assert.Equal(t, "", d.Volumes[0].Type)
			assert.Empty(t, d.Other)
		}
	})
	t.Run("lvm", func(t *testing.T) {
		img := disktest.LVMDisk(t, labelled)
		d := diskOf(t, img, Options{})
		require.Len(t, d.Volumes, 3)
		assert.Equal(t, rootfs.Volume{Where: "partition 1", PartUUID: d.Volumes[0].PartUUID}, d.Volumes[0], "the PV: no filesystem of its own")
		assert.Regexp(t, `^LV amilint[0-9]+/root in partition 1$`, d.Volumes[1].Where)
		assert.Equal(t, diskUUID, d.Volumes[1].UUID)
		assert.Regexp(t, `^LV amilint[0-9]+/swap in partition 1$`, d.Volumes[2].Where)
		assert.Empty(t, d.Other)
	})
	// A LUKS container beside the root (partition 3): named by its UUID
	// and label, as udev names it, so the disk's filesystems are all
	// known; a disk whose only filesystem is encrypted has no root to read.
	t.Run("LUKS", func(t *testing.T) {
		img := disktest.GPTRoot(t, fsImg)
		luks := disktest.LUKS(t, "luks2", "my data")
		uuid := strings.TrimSpace(disktest.Run(t, "cryptsetup", "luksUUID", luks))
		disktest.Place(t, luks, img, (2048+16384+81920)*512)
		d := diskOf(t, img, Options{})
		require.Len(t, d.Volumes, 3)
		assert.Equal(t, rootfs.Volume{Where: "partition 3", Type: "crypto_LUKS", UUID: uuid, Label: `my\x20data`, PartUUID: d.Volumes[2].PartUUID}, d.Volumes[2])
		assert.Empty(t, d.Other)

		only := disktest.GPTRoot(t, luks)
		_, err := Open(context.Background(), only, Options{})
		require.ErrorIs(t, err, ErrNoRoot)
		assert.Contains(t, err.Error(), "partition 2: crypto_LUKS (encrypted, read only with its key)")
	})
	// An NTFS volume beside the root (partition 3, a Windows data disk):
	// named by its serial number and label, as udev names it; a disk whose
	// only filesystem is NTFS has no root amilint reads.
	t.Run("NTFS", func(t *testing.T) {
		testenv.Tool(t, "mkntfs", "ntfs-3g")
		img := disktest.GPTRoot(t, fsImg)
		ntfs := t.TempDir() + "/fs.ntfs"
		disktest.Run(t, "truncate", "-s", "40M", ntfs)
		disktest.Run(t, "mkntfs", "-q", "-F", "-Q", "-L", "Data Disk", ntfs)
		serial := strings.TrimSpace(disktest.Run(t, "blkid", "-p", "-s", "UUID", "-o", "value", ntfs))
		require.Regexp(t, `^[0-9A-F]{16}$`, serial)
		disktest.Place(t, ntfs, img, (2048+16384+81920)*512)
		d := diskOf(t, img, Options{})
		require.Len(t, d.Volumes, 3)
		assert.Equal(t, rootfs.Volume{Where: "partition 3", Type: "ntfs", UUID: serial, Label: `Data\x20Disk`, PartUUID: d.Volumes[2].PartUUID}, d.Volumes[2])
		assert.Empty(t, d.Other)

		only := disktest.GPTRoot(t, ntfs)
		_, err := Open(context.Background(), only, Options{})
		require.ErrorIs(t, err, ErrNoRoot)
		assert.Contains(t, err.Error(), "partition 2: ntfs (not supported)")
	})
	t.Run("unknown contents", func(t *testing.T) {
		img := disktest.GPTRoot(t, fsImg)
		junk := t.TempDir() + "/junk"
		require.NoError(t, os.WriteFile(junk, []byte("not a filesystem"), 0o644))
		disktest.Place(t, junk, img, 2048*512+4096)
		d := diskOf(t, img, Options{})
		assert.Equal(t, []string{"partition 1: no filesystem amilint recognises"}, d.Other)
	})
}
