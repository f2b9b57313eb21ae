package md_test

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/disk/md"
	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/integrity"
)

func read(t *testing.T, p string, check *integrity.Checker) (*md.Member, error) {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return md.Read(bytes.NewReader(b), int64(len(b)), check)
}

// examine is what `mdadm --examine` says of a member: its "Key : value"
// lines.
func examine(t *testing.T, p string) map[string]string {
	t.Helper()
	testenv.Tool(t, "mdadm", "mdadm")
	out, err := exec.Command("mdadm", "--examine", p).CombinedOutput()
	require.NoError(t, err, "%s", out)
	kv := map[string]string{}
	for _, l := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(l, " : "); ok {
			kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return kv
}

var uuidA = [16]byte{0x3b, 0x6c, 0x2c, 0x37, 0xd2, 0xa1, 0xf1, 0xc3, 0x9e, 0x11, 0x0a, 0x4f, 0x5d, 0x2e, 0x77, 0x01}

// TestMatchesMdadmAndBlkid reads member superblocks and checks each field
// against what mdadm --examine reads of them (its checksum among them:
// "correct") and what blkid -p names them by.
func TestMatchesMdadmAndBlkid(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    disktest.MDMember
		role string // mdadm's "Device Role"
	}{
		{"RAID1, the second of two", disktest.MDMember{ArrayUUID: uuidA, DeviceUUID: [16]byte{1}, Name: "build:root", Level: 1, RaidDisks: 2, DevNumber: 1, Roles: []uint16{0, 1}, Events: 42}, "Active device 1"},
		{"RAID1 of three roles (an odd count: the checksum's last word is half one)", disktest.MDMember{ArrayUUID: uuidA, DeviceUUID: [16]byte{2}, Name: "h:r", Level: 1, RaidDisks: 3, DevNumber: 2, Roles: []uint16{0, 1, 2}, Events: 7}, "Active device 2"},
		{"RAID1 spare", disktest.MDMember{ArrayUUID: uuidA, DeviceUUID: [16]byte{3}, Name: "h:r", Level: 1, RaidDisks: 2, DevNumber: 2, Roles: []uint16{0, 1, 0xFFFF}, Events: 7}, "spare"},
		{"RAID5", disktest.MDMember{ArrayUUID: uuidA, DeviceUUID: [16]byte{4}, Name: "store", Level: 5, RaidDisks: 3, DevNumber: 0, Roles: []uint16{0, 1, 2}, Events: 1 << 40}, "Active device 0"},
		{"RAID1 under reshape to RAID5", disktest.MDMember{ArrayUUID: uuidA, DeviceUUID: [16]byte{6}, Name: "h:grow", Level: 1, RaidDisks: 2, Roles: []uint16{0, 1}, Events: 5, ReshapeTo: 5}, "Active device 0"},
		{"metadata 1.1, at the start", disktest.MDMember{ArrayUUID: uuidA, DeviceUUID: [16]byte{5}, Name: "old:one", Level: 1, RaidDisks: 2, Roles: []uint16{0, 1}, Events: 3, V11: true}, "Active device 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := disktest.MDMemberFile(t, tc.m, "", 8<<20)
			m, err := read(t, p, nil)
			require.NoError(t, err)
			require.NotNil(t, m)
			ex, bl := examine(t, p), disktest.Blkid(t, p)
			assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{8} - correct$`), ex["Checksum"])
			assert.Equal(t, ex["Version"], m.Version)
			assert.Equal(t, ex["Array UUID"], strings.ReplaceAll(colons(m.ArrayUUID), "-", ""))
			assert.Equal(t, ex["Device UUID"], strings.ReplaceAll(colons(m.DeviceUUID), "-", ""))
			assert.Equal(t, ex["Name"], m.Name)
			assert.Equal(t, ex["Raid Level"], strings.ToLower(m.Level.String()))
			if tc.m.ReshapeTo != 0 {
				assert.Equal(t, ex["New Level"], strings.ToLower(m.NewLevel.String()))
				assert.False(t, m.Mirror())
			} else {
				assert.Equal(t, m.Level, m.NewLevel)
				assert.Equal(t, tc.m.Level == 1, m.Mirror())
			}
			assert.Equal(t, ex["Events"], strconv.FormatUint(m.Events, 10))
			assert.Equal(t, ex["Data Offset"], strconv.FormatInt(m.DataOffset/512, 10)+" sectors")
			assert.Equal(t, tc.role, ex["Device Role"])
			assert.Equal(t, tc.role != "spare", m.Active())
			assert.Equal(t, "linux_raid_member", bl["ID_FS_TYPE"])
			assert.Equal(t, bl["ID_FS_UUID"], m.ArrayUUID)
			assert.Equal(t, bl["ID_FS_UUID_SUB"], m.DeviceUUID)
			assert.Equal(t, bl["ID_FS_LABEL"], m.Name)
			assert.Equal(t, bl["ID_FS_VERSION"], m.Version)
			assert.True(t, md.Probe(bytes.NewReader(mustRead(t, p)), 8<<20))
		})
	}
}

// colons spells a UUID as mdadm does, in four groups of eight.
func colons(u string) string {
	h := strings.ReplaceAll(u, "-", "")
	return h[0:8] + ":" + h[8:16] + ":" + h[16:24] + ":" + h[24:32]
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return b
}

// TestChecksumMismatch: a superblock changed after its checksum was
// written fails it, as mdadm says ("expected"), unless the Checker is
// lenient, which records it and reads on.
func TestChecksumMismatch(t *testing.T) {
	p := disktest.MDMemberFile(t, disktest.MDMember{ArrayUUID: uuidA, Name: "h:r", Level: 1, RaidDisks: 2, Roles: []uint16{0, 1}, Events: 9}, "", 8<<20)
	b := mustRead(t, p)
	b[4096+200]++ // events
	require.NoError(t, os.WriteFile(p, b, 0o644))
	assert.Contains(t, examine(t, p)["Checksum"], "expected")
	_, err := md.Read(bytes.NewReader(b), int64(len(b)), nil)
	require.ErrorIs(t, err, integrity.ErrChecksum)
	assert.ErrorIs(t, err, md.ErrCorrupt)
	assert.Contains(t, err.Error(), "md: version 1.2 superblock at 4096 fails its checksum")

	log := integrity.Lenient(&integrity.Log{})
	m, err := md.Read(bytes.NewReader(b), int64(len(b)), log)
	require.NoError(t, err)
	assert.Equal(t, uint64(10), m.Events)
	assert.Len(t, log.Lines(), 1)
}

// TestCorrupt: superblocks that cannot hold together are ErrCorrupt, and
// a volume with none is nil.
func TestCorrupt(t *testing.T) {
	le := binary.LittleEndian
	base := disktest.MDMember{ArrayUUID: uuidA, Name: "h:r", Level: 1, RaidDisks: 2, Roles: []uint16{0, 1}}
	for _, tc := range []struct {
		name  string
		patch func(sb []byte)
		want  string
	}{
		{"data past the member's end", func(sb []byte) { le.PutUint64(sb[136:], 1<<20) }, "past the member's"},
		{"data over the superblock", func(sb []byte) { le.PutUint64(sb[128:], 8) }, "overlaps the superblock"},
		{"too many roles", func(sb []byte) { le.PutUint32(sb[220:], 5000) }, "device roles"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := mustRead(t, disktest.MDMemberFile(t, base, "", 8<<20))
			sb := b[4096 : 4096+256+2*len(base.Roles)]
			tc.patch(sb)
			// A valid checksum, so that only the patched field is wrong
			// (the role count is checked before the checksum).
			le.PutUint32(sb[216:], md.Checksum(sb))
			_, err := md.Read(bytes.NewReader(b), int64(len(b)), nil)
			require.ErrorIs(t, err, md.ErrCorrupt)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	none, err := md.Read(bytes.NewReader(make([]byte, 1<<20)), 1<<20, nil)
	require.NoError(t, err)
	assert.Nil(t, none)
	assert.False(t, md.Probe(bytes.NewReader(make([]byte, 100)), 100))
}

func FuzzRead(f *testing.F) {
	// A member of 8 KiB, its data at 4.5 KiB, so that the fuzzer's inputs
	// stay small.
	seed := make([]byte, 8192)
	sb, at := disktest.MDSuperblock(disktest.MDMember{ArrayUUID: uuidA, Name: "h:r", Level: 1, RaidDisks: 2, Roles: []uint16{0, 1}, Events: 1}, 8192, 4608)
	copy(seed[at:], sb)
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := md.Read(bytes.NewReader(b), int64(len(b)), nil)
		if err != nil || m == nil {
			return
		}
		if m.DataOffset < 0 || m.DataSize < 0 || m.DataOffset+m.DataSize > int64(len(b)) {
			t.Fatalf("data outside the member: %+v of %d bytes", m, len(b))
		}
	})
}
