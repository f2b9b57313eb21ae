package disktest

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/disk/md"
)

// MDMember describes one member of an md array of metadata 1.2 (or 1.1),
// as mdadm --create writes it: its superblock at 4 KiB (or at 0), its data
// at 1 MiB.
type MDMember struct {
	ArrayUUID, DeviceUUID [16]byte
	Name                  string // "host:name"
	Level                 int32  // 1 for RAID1, 5 for RAID5, -1 linear
	RaidDisks             uint32
	DevNumber             uint32
	Roles                 []uint16 // dev_roles, indexed by device number
	Events                uint64
	// V11 puts the superblock at the member's start (metadata 1.1).
	V11 bool
	// ReshapeTo, when not zero, marks a reshape to that level in progress,
	// half done.
	ReshapeTo int32
}

// MDDataOffset is where MDMemberFile puts a member's data: 2,048 sectors,
// mdadm's default for a small member.
const MDDataOffset = 1 << 20

// MDMemberFile writes a member of m holding data (a filesystem image, or
// nothing) at MDDataOffset, size bytes in all, its superblock MDSuperblock.
func MDMemberFile(t testing.TB, m MDMember, data string, size int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "member.img")
	require.NoError(t, os.WriteFile(p, nil, 0o644))
	require.NoError(t, os.Truncate(p, size))
	if data != "" {
		Place(t, data, p, MDDataOffset)
	}
	sb, at := MDSuperblock(m, size, MDDataOffset)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(sb, at)
	require.NoError(t, err)
	return p
}

// MDSuperblock is the superblock of a member of m, size bytes long with
// its data from dataOffset to its end, and the offset it goes at; its
// checksum as the kernel computes it (md.Checksum, which
// TestMatchesMdadmAndBlkid holds to mdadm's own).
func MDSuperblock(m MDMember, size, dataOffset int64) (sb []byte, at int64) {
	le := binary.LittleEndian
	sb = make([]byte, 256+2*len(m.Roles))
	le.PutUint32(sb, 0xa92b4efc)
	le.PutUint32(sb[4:], 1)
	copy(sb[16:32], m.ArrayUUID[:])
	copy(sb[32:64], m.Name)
	le.PutUint64(sb[64:], 1700000000)
	le.PutUint32(sb[72:], uint32(m.Level))
	le.PutUint64(sb[80:], uint64(size-dataOffset)/512)
	le.PutUint32(sb[88:], 1024) // chunk, 512 KiB
	le.PutUint32(sb[92:], m.RaidDisks)
	le.PutUint64(sb[128:], uint64(dataOffset)/512)
	le.PutUint64(sb[136:], uint64(size-dataOffset)/512)
	at = 4096
	if m.V11 {
		at = 0
	}
	le.PutUint64(sb[144:], uint64(at)/512) // the superblock's own sector
	le.PutUint64(sb[152:], ^uint64(0))
	le.PutUint32(sb[160:], m.DevNumber)
	copy(sb[168:184], m.DeviceUUID[:])
	le.PutUint64(sb[192:], 1700000100)
	le.PutUint64(sb[200:], m.Events)
	le.PutUint64(sb[208:], ^uint64(0))
	if m.ReshapeTo != 0 {
		le.PutUint32(sb[8:], 4) // MD_FEATURE_RESHAPE_ACTIVE
		le.PutUint32(sb[100:], uint32(m.ReshapeTo))
		le.PutUint64(sb[104:], uint64(size-dataOffset)/1024) // reshape_position
		le.PutUint32(sb[112:], 1)                            // delta_disks
		le.PutUint32(sb[116:], 2)                            // new_layout (left-symmetric)
		le.PutUint32(sb[120:], 1024)                         // new_chunk
	}
	le.PutUint32(sb[220:], uint32(len(m.Roles)))
	for i, r := range m.Roles {
		le.PutUint16(sb[256+2*i:], r)
	}
	le.PutUint32(sb[216:], md.Checksum(sb))
	return sb, at
}
