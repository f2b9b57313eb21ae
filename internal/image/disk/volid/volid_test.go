package volid_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/disk/volid"
	"github.com/amilint/amilint/internal/image/disktest"
)

func read(t *testing.T, img string) volid.ID {
	t.Helper()
	f, err := os.Open(img)
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	id, err := volid.Read(f, fi.Size())
	require.NoError(t, err)
	return id
}

// fatImage writes a FAT16 or FAT32 boot sector and a root directory whose
// first entry is the volume label, as mkfs.fat -n lays them out.
func fatImage(t *testing.T, fat32 bool, serial uint32, bootLabel, dirLabel string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fat.img")
	require.NoError(t, os.WriteFile(p, fatBytes(4<<20, 16, fat32, serial, bootLabel, dirLabel), 0o644))
	return p
}

// fatBytes is fatImage's volume of size bytes, with FATs of fatSize
// sectors.
func fatBytes(size, fatSize int, fat32 bool, serial uint32, bootLabel, dirLabel string) []byte {
	b := make([]byte, size)
	le := binary.LittleEndian
	copy(b[0:], "\xEB\x3C\x90mkfs.fat")
	le.PutUint16(b[11:], 512)
	b[13] = 4 // sectors a cluster
	le.PutUint16(b[14:], 4)
	b[16] = 2
	b[21] = 0xF8
	le.PutUint16(b[24:], 32)
	le.PutUint16(b[26:], 64)
	if fat32 {
		le.PutUint32(b[32:], uint32(len(b)/512))
		le.PutUint32(b[36:], uint32(fatSize)) // sectors a FAT
		le.PutUint32(b[44:], 2)               // root cluster
		b[66] = 0x29
		le.PutUint32(b[67:], serial)
		copy(b[71:82], bootLabel+strings.Repeat(" ", 11-len(bootLabel)))
		copy(b[82:], "FAT32   ")
	} else {
		le.PutUint16(b[17:], uint16(min(512, (size-(4+2*fatSize)*512)/32))) // root entries
		le.PutUint16(b[19:], uint16(len(b)/512))
		le.PutUint16(b[22:], uint16(fatSize))
		b[38] = 0x29
		le.PutUint32(b[39:], serial)
		copy(b[43:54], bootLabel+strings.Repeat(" ", 11-len(bootLabel)))
		copy(b[54:], "FAT16   ")
	}
	dirAt := (4 + 2*fatSize) * 512
	b[510], b[511] = 0x55, 0xAA
	b[4*512], b[4*512+1], b[4*512+2] = 0xF8, 0xFF, 0xFF
	if dirLabel != "" {
		copy(b[dirAt:dirAt+11], dirLabel+strings.Repeat(" ", 11-len(dirLabel)))
		b[dirAt+11] = 0x08
	}
	return b
}

// TestMatchesBlkid reads filesystems the standard tools made and checks
// each identity against blkid's, and the link name against its LABEL_ENC.
func TestMatchesBlkid(t *testing.T) {
	tree := disktest.Tree(t)
	mk := func(name string, args ...string) func(t *testing.T) string {
		return func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "fs.img")
			disktest.Run(t, "truncate", "-s", "64M", p)
			disktest.Run(t, name, append(args, p)...)
			return p
		}
	}
	for _, tc := range []struct {
		name string
		make func(t *testing.T) string
	}{
		{"ext4 with a label", mk("mke2fs", "-q", "-F", "-t", "ext4", "-L", "cloudimg-rootfs", "-d", tree)},
		{"ext4 with spaces and a backslash", mk("mke2fs", "-q", "-F", "-t", "ext4", "-L", `my data\1`)},
		{"ext4 with UTF-8", mk("mke2fs", "-q", "-F", "-t", "ext4", "-L", "données")},
		{"ext4 without a label", mk("mke2fs", "-q", "-F", "-t", "ext4")},
		{"ext3", mk("mke2fs", "-q", "-F", "-t", "ext3", "-L", "old")},
		{"ext2", mk("mke2fs", "-q", "-F", "-t", "ext2")},
		{"swap", mk("mkswap", "-L", "swap space")},
		{"swap without a label", mk("mkswap")},
		{"xfs", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "fs.img")
			disktest.Run(t, "truncate", "-s", "300M", p)
			disktest.Run(t, "mkfs.xfs", "-q", "-f", "-L", "data", p)
			return p
		}},
		{"btrfs", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "fs.img")
			disktest.Run(t, "truncate", "-s", "128M", p)
			disktest.Run(t, "mkfs.btrfs", "-q", "-f", "-L", "fedora", p)
			return p
		}},
		{"btrfs with a space and files", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "fs.img")
			disktest.Run(t, "truncate", "-s", "128M", p)
			disktest.Run(t, "mkfs.btrfs", "-q", "-f", "-L", "my root", "--rootdir", tree, p)
			return p
		}},
		{"btrfs without a label", func(t *testing.T) string {
			p := filepath.Join(t.TempDir(), "fs.img")
			disktest.Run(t, "truncate", "-s", "128M", p)
			disktest.Run(t, "mkfs.btrfs", "-q", "-f", p)
			return p
		}},
		{"LUKS1", func(t *testing.T) string { return disktest.LUKS(t, "luks1", "") }},
		{"LUKS2 with a label", func(t *testing.T) string { return disktest.LUKS(t, "luks2", "my secret") }},
		{"LUKS2 without a label", func(t *testing.T) string { return disktest.LUKS(t, "luks2", "") }},
		{"LUKS2 read from its secondary header (the primary wiped)", func(t *testing.T) string {
			p := disktest.LUKS(t, "luks2", "backup")
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			require.NoError(t, err)
			defer f.Close()
			_, err = f.WriteAt(make([]byte, 4096), 0)
			require.NoError(t, err)
			return p
		}},
		{"squashfs", func(t *testing.T) string {
			testenv.Tool(t, "mksquashfs", "squashfs-tools")
			p := filepath.Join(t.TempDir(), "fs.squashfs")
			disktest.Run(t, "mksquashfs", tree, p, "-quiet", "-noappend", "-no-progress")
			return p
		}},
		{"squashfs 3, little-endian", synthetic(squashfsHead("hsqs", binary.LittleEndian, 3))},
		{"squashfs 3, big-endian", synthetic(squashfsHead("sqsh", binary.BigEndian, 3))},
		{"big-endian magic of squashfs 4: none", synthetic(squashfsHead("sqsh", binary.BigEndian, 4))},
		{"LUKS of an unknown version: no UUID", synthetic(luksHead(3, "abc  def", 0))},
		{"LUKS1 with a UUID of its own spelling", synthetic(luksHead(1, "Weird UUID  ", 0))},
		{"ntfs with a label", mkNTFS("-L", "Windows")},
		{"ntfs with a label beyond ASCII, a surrogate pair among it", mkNTFS("-L", "données 日本 \U0001F600")},
		{"ntfs with trailing spaces in its label", mkNTFS("-L", "data  ")},
		{"ntfs without a label", mkNTFS()},
		{"ntfs of 4 KiB sectors and 64 KiB clusters", mkNTFS("-s", "4096", "-c", "65536", "-L", "big")},
		{"ntfs with a lone surrogate in its label", patchNTFS(mkNTFS("-L", "QQQQ"), func(b []byte) {
			copy(b, bytes.ReplaceAll(b, utf16le("QQQQ"), []byte{0x00, 0xD8, 'A', 0, 'B', 0, 'C', 0}))
		})},
		{"ntfs with a serial number of zero: no UUID", patchNTFS(mkNTFS("-L", "noserial"), func(b []byte) { clear(b[0x48:0x50]) })},
		{"ntfs whose $Volume record is not a file record: none", patchNTFS(mkNTFS("-L", "QQQQ"), func(b []byte) {
			// The label's record, in the MFT and in its mirror.
			for _, i := range indexAll(b, utf16le("QQQQ")) {
				rec := i &^ 1023
				copy(b[rec:], "BAAD")
			}
		})},
		{"ntfs, synthetic, a record of two clusters", synthetic(ntfsHead(2, "two"))},
		{"ntfs, synthetic, a record of 1 KiB (2^10)", synthetic(ntfsHead(-10, "kib"))},
		{"ntfs, synthetic, its MFT past the volume's end: none", synthetic(func() []byte { b := ntfsHead(2, "far"); le.PutUint64(b[0x30:], 1000); return b }())},
		{"ntfs, synthetic, a FAT count: none", synthetic(func() []byte { b := ntfsHead(2, "fat"); b[0x10] = 2; return b }())},
		{"fat32", func(t *testing.T) string { return fatImage(t, true, 0x1A2B3C4D, "BOOTSECT", "EFI SYS") }},
		{"fat32 named only in its boot sector", func(t *testing.T) string { return fatImage(t, true, 0xDEADBEEF, "BOOTSECT", "") }},
		{"fat16", func(t *testing.T) string { return fatImage(t, false, 0x00C0FFEE, "NO NAME", "ESP") }},
		// FAT32 root directories of more than one cluster (2 KiB here),
		// their chain in the FAT.
		{"fat32 labelled in its root directory's second cluster", fat32Chain(fullCluster, map[uint32]uint32{2: 3, 3: fatEnd}, 3)},
		{"fat32 labelled past an end-of-directory entry, in the next cluster", fat32Chain(nil, map[uint32]uint32{2: 3, 3: fatEnd}, 3)},
		{"fat32 labelled in a cluster the chain does not reach", fat32Chain(fullCluster, map[uint32]uint32{2: fatEnd}, 3)},
		{"fat32 root directory chained to itself", fat32Chain(fullCluster, map[uint32]uint32{2: 2}, 0)},
		{"fat32 root directory chained past the volume's end", fat32Chain(fullCluster, map[uint32]uint32{2: 0x0FFFFF00}, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := tc.make(t)
			want := disktest.Blkid(t, img)
			// Every case names a filesystem to blkid but those that say
			// otherwise, so no case passes by both seeing nothing.
			assert.Equal(t, !strings.HasSuffix(tc.name, ": none"), want["ID_FS_TYPE"] != "", "blkid's type: %q", want["ID_FS_TYPE"])
			got := read(t, img)
			assert.Equal(t, want["ID_FS_TYPE"], got.Type)
			assert.Equal(t, want["ID_FS_UUID_ENC"], volid.Encode(got.UUID))
			assert.Equal(t, want["ID_FS_LABEL_ENC"], volid.Encode(got.Label))
			assert.False(t, got.LabelUnread)
		})
	}
}

// mkNTFS makes a 64 MiB NTFS volume with mkntfs (quick format, so it
// writes only its metadata).
func mkNTFS(args ...string) func(t *testing.T) string {
	return func(t *testing.T) string {
		testenv.Tool(t, "mkntfs", "ntfs-3g")
		p := filepath.Join(t.TempDir(), "fs.img")
		disktest.Run(t, "truncate", "-s", "64M", p)
		disktest.Run(t, "mkntfs", append(append([]string{"-q", "-F", "-Q"}, args...), p)...)
		return p
	}
}

// patchNTFS changes the first 16 MiB of a volume make made (where mkntfs
// puts the boot sector and the MFT of a 64 MiB volume) with patch.
func patchNTFS(mk func(t *testing.T) string, patch func(b []byte)) func(t *testing.T) string {
	return func(t *testing.T) string {
		p := mk(t)
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		require.NoError(t, err)
		defer f.Close()
		b := make([]byte, 16<<20)
		_, err = f.ReadAt(b, 0)
		require.NoError(t, err)
		patch(b)
		_, err = f.WriteAt(b, 0)
		require.NoError(t, err)
		return p
	}
}

func utf16le(s string) []byte {
	var b []byte
	for _, r := range s {
		b = append(b, byte(r), 0)
	}
	return b
}

func indexAll(b, sub []byte) []int {
	var at []int
	for i := 0; ; {
		j := bytes.Index(b[i:], sub)
		if j < 0 {
			return at
		}
		at = append(at, i+j)
		i += j + len(sub)
	}
}

// ntfsHead is a minimal NTFS volume of 512-byte sectors and clusters, its
// MFT at 16 KiB with records of clustersPerRecord (a power of two as an
// exponent when negative): $MFT and $Volume file records, $Volume with a
// $VOLUME_NAME attribute of label.
func ntfsHead(clustersPerRecord int8, label string) []byte {
	b := make([]byte, 64<<10)
	b[0], b[1], b[2] = 0xEB, 0x52, 0x90
	copy(b[3:], "NTFS    ")
	le.PutUint16(b[0x0B:], 512)
	b[0x0D] = 1
	b[0x15] = 0xF8
	le.PutUint64(b[0x28:], 256) // 128 KiB of sectors
	le.PutUint64(b[0x30:], 32)  // the MFT at 16 KiB
	le.PutUint64(b[0x38:], 64)
	b[0x40] = byte(clustersPerRecord)
	le.PutUint64(b[0x48:], 0x0123456789ABCDEF)
	b[510], b[511] = 0x55, 0xAA
	record := 512 * int(clustersPerRecord)
	if clustersPerRecord < 0 {
		record = 1 << -int(clustersPerRecord)
	}
	for i := range 4 {
		rec := b[16<<10+i*record:]
		copy(rec, "FILE")
		le.PutUint16(rec[0x14:], 0x38)
		le.PutUint32(rec[0x1C:], uint32(record))
		le.PutUint32(rec[0x38:], 0xFFFFFFFF)
	}
	vol := b[16<<10+3*record:]
	name := utf16le(label)
	attr := vol[0x38:]
	// A $STANDARD_INFORMATION-like attribute first, then $VOLUME_NAME.
	le.PutUint32(attr, 0x10)
	le.PutUint32(attr[4:], 0x30)
	attr = attr[0x30:]
	le.PutUint32(attr, 0x60)
	le.PutUint32(attr[4:], uint32(0x18+len(name)+7)&^7)
	le.PutUint32(attr[0x10:], uint32(len(name)))
	le.PutUint16(attr[0x14:], 0x18)
	copy(attr[0x18:], name)
	le.PutUint32(attr[(0x18+len(name)+7)&^7:], 0xFFFFFFFF)
	return b
}

// synthetic writes a 128 KiB volume that starts with head.
func synthetic(head []byte) func(t *testing.T) string {
	return func(t *testing.T) string {
		p := filepath.Join(t.TempDir(), "vol.img")
		b := make([]byte, 128<<10)
		copy(b, head)
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}
}

// squashfsHead is a squashfs superblock's magic and major version.
func squashfsHead(magic string, order binary.ByteOrder, major uint16) []byte {
	b := make([]byte, 64)
	copy(b, magic)
	order.PutUint16(b[28:], major)
	return b
}

// luksHead is a LUKS header of version with uuid and, for LUKS2, the
// header's own offset.
func luksHead(version uint16, uuid string, offset uint64) []byte {
	b := make([]byte, 1024)
	copy(b, "LUKS\xba\xbe")
	binary.BigEndian.PutUint16(b[6:], version)
	copy(b[168:208], uuid)
	binary.BigEndian.PutUint64(b[256:], offset)
	return b
}

// fatEnd ends a FAT32 cluster chain.
const fatEnd = 0x0FFFFFFF

// fullCluster fills a 2 KiB root directory cluster with file entries.
func fullCluster(c []byte) {
	for i := 0; i+32 <= len(c); i += 32 {
		e := c[i : i+32]
		copy(e, fmt.Sprintf("FILE%04d   ", i/32))
		e[11] = 0x20                           // archive: a file
		le.PutUint16(e[26:], uint16(100+i/32)) // its first cluster
	}
}

var le = binary.LittleEndian

// fat32Chain writes a FAT32 volume (fatBytes: 2 KiB clusters, the root
// directory at cluster 2) whose root directory's first cluster fill
// writes (nil: left empty, an end-of-directory entry), whose FAT holds
// chain, and whose volume label entry is at the start of cluster
// labelAt (0: none).
func fat32Chain(fill func([]byte), chain map[uint32]uint32, labelAt int) func(t *testing.T) string {
	return func(t *testing.T) string {
		const fatSize, cluster = 16, 2048
		b := fatBytes(4<<20, fatSize, true, 0x1A2B3C4D, "BOOTSECT", "")
		data := (4 + 2*fatSize) * 512
		if fill != nil {
			fill(b[data : data+cluster])
		}
		for c, next := range chain {
			le.PutUint32(b[4*512+4*int(c):], next)
		}
		if labelAt != 0 {
			at := data + (labelAt-2)*cluster
			copy(b[at:at+11], "FAR LABEL  ")
			b[at+11] = 0x08
		}
		p := filepath.Join(t.TempDir(), "fat.img")
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}
}

// TestLUKS2Offset: a LUKS2 header that does not name its own offset is
// none, as util-linux has it since 2.40 (Debian 12's blkid, 2.38, names it
// still): the disk's filesystems are then unknown, never a UUID made up.
func TestLUKS2Offset(t *testing.T) {
	b := make([]byte, 128<<10)
	copy(b, luksHead(2, "4febfcd4-ae79-46d6-82ff-11ad51587fe9", 4096))
	id, err := volid.Read(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	assert.Equal(t, volid.ID{}, id)
	copy(b, luksHead(2, "4febfcd4-ae79-46d6-82ff-11ad51587fe9", 0))
	id, err = volid.Read(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	assert.Equal(t, volid.ID{Type: "crypto_LUKS", UUID: "4febfcd4-ae79-46d6-82ff-11ad51587fe9"}, id)
}

func TestBlankAndUnknown(t *testing.T) {
	id, err := volid.Read(bytes.NewReader(make([]byte, 1<<20)), 1<<20)
	require.NoError(t, err)
	assert.Equal(t, volid.ID{Blank: true}, id)
	b := make([]byte, 1<<20)
	copy(b[4096:], "something else")
	id, err = volid.Read(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	assert.Equal(t, volid.ID{}, id)
	// A read that comes short is an error, not a strange volume.
	_, err = volid.Read(bytes.NewReader(b[:100]), 1<<20)
	require.Error(t, err)
}

func TestEncode(t *testing.T) {
	for in, want := range map[string]string{
		"cloudimg-rootfs": "cloudimg-rootfs",
		"my data":         `my\x20data`,
		`a\b`:             `a\x5cb`,
		"a/b":             `a\x2fb`,
		"données":         "données",
		"\xff":            `\xff`,
	} {
		assert.Equal(t, want, volid.Encode(in), in)
	}
}

// FuzzRead runs the superblock parsers on arbitrary volumes, seeded with
// the start of each filesystem the tests build: never a panic, and a
// UUID and label udev could name a link after.
func FuzzRead(f *testing.F) {
	for _, seed := range []string{"ext4", "xfs", "swap"} {
		b, err := os.ReadFile(filepath.Join("testdata", seed+".head"))
		require.NoError(f, err)
		f.Add(b)
	}
	// Small seeds (the root directory at 3 KiB): the fuzzer minimizes
	// what they lead to byte by byte.
	f.Add(fatBytes(4<<10, 1, true, 0x1A2B3C4D, "BOOTSECT", "EFI SYS"))
	f.Add(fatBytes(4<<10, 1, false, 0x00C0FFEE, "NO NAME", "ESP"))
	f.Add(luksHead(2, "4febfcd4-ae79-46d6-82ff-11ad51587fe9", 0))
	f.Add(squashfsHead("hsqs", binary.LittleEndian, 4))
	// NTFS: the boot sector and the MFT's first four records, at 16 KiB.
	f.Add(ntfsHead(2, "seed")[:20<<10])
	// A LUKS2 secondary header (the primary wiped) at 16 KiB.
	sec := make([]byte, 0x4000+512)
	copy(sec[0x4000:], luksHead(2, "4febfcd4-ae79-46d6-82ff-11ad51587fe9", 0x4000))
	copy(sec[0x4000:], "SKUL\xba\xbe")
	f.Add(sec)
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := volid.Read(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			return
		}
		if id.Type == "" && (id.UUID != "" || id.Label != "") {
			t.Fatalf("identity without a type: %+v", id)
		}
		if strings.ContainsRune(id.Label, 0) {
			t.Fatalf("label with a NUL: %q", id.Label)
		}
	})
}
