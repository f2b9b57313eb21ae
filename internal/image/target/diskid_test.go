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
	"github.com/amilint/amilint/internal/image/disk/md"
	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/integrity"
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

// noRootOn puts the volume vol alone on a GPT disk (its partition 2):
// the disk has no root amilint reads, and the error says why of vol.
func noRootOn(t *testing.T, vol, why string) {
	t.Helper()
	_, err := Open(context.Background(), disktest.GPTRoot(t, vol), Options{})
	require.ErrorIs(t, err, ErrNoRoot)
	assert.Contains(t, err.Error(), "partition 2: "+why)
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

		noRootOn(t, luks, "crypto_LUKS (encrypted, read only with its key)")
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

		noRootOn(t, ntfs, "ntfs (not supported)")
	})
	// md arrays of metadata 1.2 over partitions 1 and 2. A RAID1 mirror
	// of the root is read through its freshest member (the most events;
	// the stale one holds another filesystem here) and named by its
	// filesystem, as udev names the array's device; its members get no
	// name of their own. A RAID5 array cannot be read without assembling
	// it: its filesystems are unknown.
	mdDisk := func(t *testing.T, level int32, data0, data1, part3 string) string {
		img := disktest.Blank(t, 96<<20)
		disktest.Run(t, "sgdisk", "-n", "1:2048:+28M", "-t", "1:fd00", "-n", "2:0:+28M", "-t", "2:fd00", "-n", "3:0:0", img)
		m := disktest.MDMember{ArrayUUID: [16]byte{0x3b, 0x6c, 0x2c, 0x37, 0xd2, 0xa1, 0xf1, 0xc3, 0x9e, 0x11, 0x0a, 0x4f, 0x5d, 0x2e, 0x77, 0x01},
			Name: "build:root", Level: level, RaidDisks: 2, Roles: []uint16{0, 1}, Events: 10}
		disktest.Place(t, disktest.MDMemberFile(t, m, data0, 28<<20), img, 2048*512)
		m.DevNumber, m.Events, m.DeviceUUID[0] = 1, 11, 1
		disktest.Place(t, disktest.MDMemberFile(t, m, data1, 28<<20), img, (2048+57344)*512)
		if part3 != "" {
			disktest.Place(t, part3, img, (2048+2*57344)*512)
		}
		return img
	}
	const mdWhere = "md build:root (RAID1) in partition 1 and partition 2"
	t.Run("md RAID1 root", func(t *testing.T) {
		img := mdDisk(t, 1, fsImg, labelled, "")
		for _, part := range []int{0, 2} {
			im, err := Open(context.Background(), img, Options{Partition: part})
			require.NoError(t, err)
			assert.Contains(t, im.Detail, mdWhere)
			d := im.FS.Memo().Disk()
			require.Len(t, d.Volumes, 4)
			assert.Equal(t, rootfs.Volume{Where: "partition 1", PartUUID: d.Volumes[0].PartUUID}, d.Volumes[0], "a member: no name of its own")
			assert.Equal(t, rootfs.Volume{Where: "partition 2", PartUUID: d.Volumes[1].PartUUID}, d.Volumes[1])
			assert.Equal(t, rootfs.Volume{Where: mdWhere, Type: "ext4", UUID: diskUUID, Label: `my\x20root`}, d.Volumes[3], "the freshest member's filesystem")
			assert.Empty(t, d.Other)
			im.Close()
		}
	})
	t.Run("md RAID1 whose freshest member is faulty", func(t *testing.T) {
		img := mdDisk(t, 1, labelled, fsImg, "")
		// Partition 2's superblock: its own role faulty.
		b, err := os.ReadFile(img)
		require.NoError(t, err)
		sb := b[(2048+57344)*512+4096:]
		sb[256+2], sb[256+3] = 0xFE, 0xFF
		c := md.Checksum(sb[:260])
		sb[216], sb[217], sb[218], sb[219] = byte(c), byte(c>>8), byte(c>>16), byte(c>>24)
		require.NoError(t, os.WriteFile(img, b, 0o644))
		d := diskOf(t, img, Options{})
		assert.Equal(t, diskUUID, d.Volumes[3].UUID, "read from the active member")
	})
	t.Run("md RAID5", func(t *testing.T) {
		img := mdDisk(t, 5, "", "", labelled)
		d := diskOf(t, img, Options{})
		assert.Equal(t, []string{"md build:root (RAID5) in partition 1 and partition 2: a RAID5 array stripes its data over its members: read only once assembled"}, d.Other)
		assert.Equal(t, diskUUID, d.Volumes[2].UUID, "the root beside it")

		_, err := Open(context.Background(), mdDisk(t, 5, "", "", ""), Options{})
		require.ErrorIs(t, err, ErrNoRoot)
		assert.Contains(t, err.Error(), "md build:root (RAID5) in partition 1 and partition 2: a RAID5 array stripes its data")
	})
	t.Run("md RAID1 under reshape to RAID5", func(t *testing.T) {
		img := disktest.Blank(t, 96<<20)
		disktest.Run(t, "sgdisk", "-n", "1:2048:+28M", "-n", "2:0:0", img)
		m := disktest.MDMember{Name: "build:grow", Level: 1, RaidDisks: 2, Roles: []uint16{0, 1}, Events: 3, ReshapeTo: 5}
		disktest.Place(t, disktest.MDMemberFile(t, m, fsImg, 28<<20), img, 2048*512)
		disktest.Place(t, labelled, img, (2048+57344)*512)
		d := diskOf(t, img, Options{})
		assert.Equal(t, []string{"md build:grow (RAID1) in partition 1: a reshape to RAID5 is in progress: its data is read only once assembled"}, d.Other)
	})
	t.Run("md superblock failing its checksum", func(t *testing.T) {
		img := mdDisk(t, 1, fsImg, labelled, "")
		b, err := os.ReadFile(img)
		require.NoError(t, err)
		b[2048*512+4096+200]++ // partition 1's events
		require.NoError(t, os.WriteFile(img, b, 0o644))
		_, err = Open(context.Background(), img, Options{})
		require.ErrorIs(t, err, integrity.ErrChecksum)
		assert.Contains(t, err.Error(), "partition 1: md: version 1.2 superblock at 4096 fails its checksum")
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
