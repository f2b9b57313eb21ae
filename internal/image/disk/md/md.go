// Package md reads the superblock of a Linux software RAID (md) member
// whose superblock is at its start: metadata versions 1.1 (at 0) and 1.2
// (at 4 KiB, mdadm's default), struct mdp_superblock_1 of the kernel's
// md_p.h. It reads no data: a RAID1 member holds a whole copy of the
// array's data from its data offset on, which the caller reads as a
// volume of its own; other levels stripe it over their members, which
// only assembling the array can read.
//
// Versions 0.90 and 1.0 keep their superblock at the member's end, and
// their data from its start: a RAID1 member of those versions reads as
// the filesystem it holds, and Probe does not look for them.
//
// Every byte is hostile: a superblock that is not one is none, a damaged
// one an error, never a panic.
package md

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/amilint/amilint/internal/image/integrity"
)

// ErrCorrupt reports a superblock that claims to be one and is not
// consistent.
var ErrCorrupt = errors.New("md superblock corrupt")

const (
	magic = 0xa92b4efc
	// sbSize is the fixed part of struct mdp_superblock_1; dev_roles (2
	// bytes per device, max_dev of them) follows it.
	sbSize = 256
	// maxDev bounds max_dev: the kernel refuses more than 1,920 roles (a
	// superblock of 4 KiB at most).
	maxDev = (4096 - sbSize) / 2
	// featureReshape is MD_FEATURE_RESHAPE_ACTIVE: new_level and the
	// reshape fields are valid.
	featureReshape = 4
)

// Level is an array's RAID level as the superblock spells it.
type Level int32

// The levels whose data a member does not hold whole: linear (-1) and
// RAID0 concatenate or stripe it, RAID4/5/6 stripe it with parity, RAID10
// stripes mirrors. RAID1 and multipath (-4) members hold all of it.
const (
	Linear    Level = -1
	Multipath Level = -4
	RAID1     Level = 1
)

func (l Level) String() string {
	switch l {
	case Linear:
		return "linear"
	case Multipath:
		return "multipath"
	case -5:
		return "faulty"
	}
	if l >= 0 {
		return fmt.Sprintf("RAID%d", int32(l))
	}
	return fmt.Sprintf("level %d", int32(l))
}

// Whole reports a level whose every member holds the array's data whole.
func (l Level) Whole() bool { return l == RAID1 || l == Multipath }

// Mirror reports an array whose every member holds its data whole, and
// stays so: its level is RAID1 or multipath and no reshape to another
// level is in progress (a reshape that only adds or removes mirrors
// moves no data).
func (m *Member) Mirror() bool { return m.Level.Whole() && m.NewLevel == m.Level }

// Member is one member's superblock.
type Member struct {
	// Version is "1.1" or "1.2".
	Version string
	// ArrayUUID is the array's UUID (set_uuid), as mdadm and blkid spell
	// it; DeviceUUID is this member's.
	ArrayUUID, DeviceUUID string
	// Name is the array's name (set_name): "HOST:NAME" as mdadm writes it.
	Name string
	// Level is the array's RAID level; RaidDisks its number of members.
	Level     Level
	RaidDisks uint32
	// NewLevel is the level a reshape in progress turns the array into
	// (the superblock's reshape feature set); Level when none is.
	NewLevel Level
	// DataOffset and DataSize locate the member's data, in bytes.
	DataOffset, DataSize int64
	// Events counts the superblock's updates: of a mirror's members, the
	// one with the most is the one the kernel trusts.
	Events uint64
	// Role is this member's role in the array (dev_roles[dev_number]):
	// 0xFFFF a spare, 0xFFFE faulty.
	Role uint16
}

// Spare and Faulty are the roles of a member that holds no data of the
// array.
const (
	Spare  = 0xFFFF
	Faulty = 0xFFFE
)

// Active reports a member that holds the array's data.
func (m *Member) Active() bool { return m.Role < Faulty }

var le = binary.LittleEndian

// Probe reports whether the volume r of size bytes holds an md
// superblock of version 1.1 or 1.2: its magic, major version 1 and its own
// offset, as blkid takes it.
func Probe(r io.ReaderAt, size int64) bool {
	sb, _, _ := find(r, size)
	return sb != nil
}

// find returns the fixed part of the volume's superblock, its offset and
// its version, looking where versions 1.1 and 1.2 keep it; nil when
// neither place holds one (a place it cannot read holds none).
func find(r io.ReaderAt, size int64) (sb []byte, off int64, version string) {
	for _, c := range []struct {
		off     int64
		version string
	}{{0, "1.1"}, {4096, "1.2"}} {
		if size < c.off+sbSize {
			break
		}
		b := make([]byte, sbSize)
		if n, _ := r.ReadAt(b, c.off); n == sbSize && le.Uint32(b) == magic && le.Uint32(b[4:]) == 1 && le.Uint64(b[144:]) == uint64(c.off)/512 {
			return b, c.off, c.version
		}
	}
	return nil, 0, ""
}

// Read reads the member superblock of the volume r of size bytes; nil
// and no error when Probe finds none. check decides what a checksum
// mismatch does. A superblock whose data lies outside the volume, or whose
// roles or checksum do not hold together, is ErrCorrupt.
func Read(r io.ReaderAt, size int64, check *integrity.Checker) (*Member, error) {
	sb, off, version := find(r, size)
	if sb == nil {
		return nil, nil
	}
	corrupt := func(format string, a ...any) error {
		return fmt.Errorf("%w: version %s superblock at %d: %s", ErrCorrupt, version, off, fmt.Sprintf(format, a...))
	}
	devs := le.Uint32(sb[220:])
	if devs > maxDev {
		return nil, corrupt("%d device roles (at most %d)", devs, maxDev)
	}
	// The device roles follow the fixed part.
	full := append(sb, make([]byte, 2*int(devs))...)
	if n, err := r.ReadAt(full[sbSize:], off+sbSize); n != len(full)-sbSize {
		if err == nil {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("md: read the superblock's device roles: %w", err)
	}
	if got, want := Checksum(full), le.Uint32(full[216:]); got != want {
		if err := check.Fail(&integrity.Mismatch{Format: "md", Structure: fmt.Sprintf("version %s superblock at %d", version, off), Corrupt: ErrCorrupt}); err != nil {
			return nil, err
		}
	}
	m := &Member{
		Version:    version,
		ArrayUUID:  uuid(full[16:32]),
		DeviceUUID: uuid(full[168:184]),
		Name:       name(full[32:64]),
		Level:      Level(int32(le.Uint32(full[72:]))),
		RaidDisks:  le.Uint32(full[92:]),
		Events:     le.Uint64(full[200:]),
		Role:       Spare,
	}
	m.NewLevel = m.Level
	if le.Uint32(full[8:])&featureReshape != 0 {
		m.NewLevel = Level(int32(le.Uint32(full[100:])))
	}
	dataOff, dataSize := le.Uint64(full[128:]), le.Uint64(full[136:])
	sectors := uint64(size) / 512
	if dataOff > sectors || dataSize > sectors-dataOff {
		return nil, corrupt("data at sector %d, %d sectors long, past the member's %d sectors", dataOff, dataSize, sectors)
	}
	if dataOff*512 < uint64(off)+uint64(len(full)) {
		return nil, corrupt("data at sector %d overlaps the superblock", dataOff)
	}
	m.DataOffset, m.DataSize = int64(dataOff)*512, int64(dataSize)*512
	if dev := le.Uint32(full[160:]); dev < devs {
		m.Role = le.Uint16(full[sbSize+2*int(dev):])
	}
	return m, nil
}

// Checksum is the kernel's calc_sb_1_csum over a superblock b (its fixed
// part and its device roles), its own sb_csum taken as zero.
func Checksum(b []byte) uint32 {
	var sum uint64
	i := 0
	for ; i+4 <= len(b); i += 4 {
		w := uint64(le.Uint32(b[i:]))
		if i == 216 {
			w = 0
		}
		sum += w
	}
	if len(b)-i == 2 {
		sum += uint64(le.Uint16(b[i:]))
	}
	return uint32(sum&0xffffffff + sum>>32)
}

// uuid spells 16 bytes as blkid's set_uuid does: 8-4-4-4-12 lower-case hex.
func uuid(b []byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// name is set_name up to its first NUL.
func name(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
