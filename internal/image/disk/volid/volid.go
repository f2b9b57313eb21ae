// Package volid reads the identity of the filesystem on a volume (a
// partition, a logical volume, a whole disk): its type, UUID and label, as
// udev's blkid builtin reports them and names the /dev/disk/by-uuid and
// /dev/disk/by-label links after them. It reads the superblocks only, in
// one bounded read (and, for FAT, a few more: its root directory, along
// the FAT's chain for FAT32, 1 MiB at most; for NTFS, one more of the
// MFT's first records), and
// treats every byte as hostile: a superblock it cannot make sense of is no
// filesystem it recognises, never a panic.
//
// It follows util-linux's libblkid probes (superblocks/ext.c, xfs.c,
// swap.c, btrfs.c, vfat.c, ntfs.c, luks.c, squashfs.c) for the fields udev uses,
// not for every check they make: a volume volid names is one blkid names
// the same way.
package volid

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// window is how much of a volume's start Read reads: up to the end of a
// btrfs superblock (64 KiB in, 4 KiB long), which covers every other
// superblock and the swap signature for pages up to 64 KiB.
const window = 0x10000 + 0x1000

// maxFATDir bounds the FAT root directory read for the volume label: a
// FAT12/16 root directory, or a FAT32 root directory's clusters together.
const maxFATDir = 1 << 20

// maxFATClusters is blkid's bound on the clusters of a FAT32 root
// directory it follows (its maxloop of 100, decremented before the
// first).
const maxFATClusters = 99

// ID is a filesystem's identity.
type ID struct {
	// Type is blkid's name for the filesystem ("ext4", "xfs", "vfat",
	// "swap", "btrfs", "ntfs", "squashfs", "squashfs3", or "crypto_LUKS" for a
	// LUKS container, whose filesystem is encrypted); "" when volid
	// recognises none.
	Type string
	// UUID is the filesystem's UUID as udev names its by-uuid link
	// (lower-case 8-4-4-4-12 hex; FAT's volume id as "XXXX-XXXX"; NTFS's
	// volume serial number as 16 upper-case hex digits; LUKS's as its
	// header spells it); "" when it has none (squashfs never has
	// one, nor a label).
	UUID string
	// Label is the filesystem's label as blkid reads it (up to its first
	// NUL, trailing white space cut); "" when it has none. LabelLink is
	// how udev names its by-label link.
	Label string
	// LabelUnread is set when the label lies where volid does not read (a
	// FAT root directory past its bound): the filesystem may have one.
	LabelUnread bool
	// Blank reports a volume whose first bytes are all zero: nothing was
	// ever written to it (Type is then "").
	Blank bool
}

// Read reads the identity of the filesystem on the volume r of size
// bytes. A volume holding no filesystem volid recognises yields an ID
// whose Type is ""; an error is a failed read, not a strange volume.
func Read(r io.ReaderAt, size int64) (ID, error) {
	n := min(max(size, 0), window)
	b := make([]byte, n)
	if err := readFull(r, b, 0); err != nil {
		return ID{}, fmt.Errorf("read superblocks: %w", err)
	}
	sq := squashfs(b)
	nt, isNT := ntfsParams(b)
	switch {
	case isLUKS(b, 0, luksMagic):
		return luks(b), nil
	case sq.Type != "":
		return sq, nil
	case isExt(b):
		return ext(b), nil
	case isXFS(b):
		return xfs(b), nil
	case isBtrfs(b):
		return btrfs(b), nil
	case swapPage(b) > 0:
		return swap(b), nil
	case isNT:
		return ntfs(r, size, b, nt)
	case isFAT(b):
		return fat(r, size, b)
	}
	if allZero(b) {
		return ID{Blank: true}, nil
	}
	return luksSecondary(b), nil
}

var le = binary.LittleEndian

// uuid formats 16 bytes as blkid_unparse_uuid does; "" for all zeros
// (blkid_uuid_is_empty: no UUID).
func uuid(b []byte) string {
	if allZero(b) {
		return ""
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// label is blkid_probe_set_label: the bytes up to the first NUL, trailing
// white space cut (blkid_rtrim_whitespace).
func label(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	return strings.TrimRight(string(b), " \t\n\r\v\f")
}

// LUKS: struct luks_phdr (version 1) or luks2_phdr (version 2) at 0, or
// a LUKS2 secondary header at one of luksSecondaries when the primary is
// gone (superblocks/luks.c). Both versions keep the UUID as text at 168;
// LUKS2 adds a label at 24 and the header's own offset at 256, which must
// be where the header was found.
const (
	luksMagic        = "LUKS\xba\xbe"
	luksMagic2       = "SKUL\xba\xbe" // a LUKS2 secondary header
	luksHeader       = 512
	luksUUIDAt       = 168
	luksUUIDLen      = 40
	luks2LabelAt     = 24
	luks2LabelLen    = 48
	luks2HdrOffsetAt = 256
)

// luksSecondaries are where cryptsetup puts a LUKS2 secondary header, one
// per metadata area size it allows (the primary's area comes first).
var luksSecondaries = []int64{0x4000, 0x8000, 0x10000, 0x20000, 0x40000, 0x80000, 0x100000, 0x200000, 0x400000}

// isLUKS reports a LUKS header with magic at offset at of b (b starts at
// the header): a LUKS2 header must name at as its own offset.
func isLUKS(b []byte, at int64, magic string) bool {
	if len(b) < luksHeader || string(b[:len(magic)]) != magic {
		return false
	}
	return binary.BigEndian.Uint16(b[6:]) != 2 || binary.BigEndian.Uint64(b[luks2HdrOffsetAt:]) == uint64(at)
}

// luks is luks_attributes: a UUID for versions 1 and 2, a label for 2,
// neither for another version (still a LUKS container to blkid).
func luks(b []byte) ID {
	id := ID{Type: "crypto_LUKS"}
	version := binary.BigEndian.Uint16(b[6:])
	if version == 1 || version == 2 {
		id.UUID = label(b[luksUUIDAt : luksUUIDAt+luksUUIDLen])
	}
	if version == 2 {
		id.Label = label(b[luks2LabelAt : luks2LabelAt+luks2LabelLen])
	}
	return id
}

// luksSecondary looks for a LUKS2 secondary header on a volume with no
// other identity (its primary header wiped or damaged), as blkid does, at
// the offsets b holds: those of metadata areas up to 64 KiB, cryptsetup's
// default (16 KiB) among them. A larger area's secondary header lies
// past what Read reads, and costs a read on every volume volid does not
// name (an LVM physical volume, for one), so such a volume stays unknown.
func luksSecondary(b []byte) ID {
	for _, at := range luksSecondaries {
		if at+luksHeader > int64(len(b)) {
			break
		}
		if h := b[at : at+luksHeader]; isLUKS(h, at, luksMagic2) {
			return luks(h)
		}
	}
	return ID{}
}

// squashfs: struct sqsh_super_block at 0 (superblocks/squashfs.c): the
// little-endian magic with a major version of 4 or more is "squashfs",
// with an older one "squashfs3", as is the big-endian magic of a major
// version up to 3. It has no UUID and no label.
func squashfs(b []byte) ID {
	if len(b) < 32 {
		return ID{}
	}
	switch string(b[:4]) {
	case "hsqs":
		if le.Uint16(b[28:]) >= 4 {
			return ID{Type: "squashfs"}
		}
		return ID{Type: "squashfs3"}
	case "sqsh":
		if binary.BigEndian.Uint16(b[28:]) <= 3 {
			return ID{Type: "squashfs3"}
		}
	}
	return ID{}
}

// ext2/3/4: struct ext2_super_block at 1024 (superblocks/ext.c).
const (
	extSB         = 1024
	extHasJournal = 0x4 // s_feature_compat
	extJournalDev = 0x8 // s_feature_incompat
	// The features ext3 supports (EXT3_FEATURE_RO_COMPAT_SUPP: sparse
	// super, large file, btree dir; EXT3_FEATURE_INCOMPAT_SUPP: filetype,
	// recover, meta_bg): any other makes blkid call it ext4.
	ext3RoCompat = 0x7
	ext3Incompat = 0x16
)

func isExt(b []byte) bool {
	return len(b) >= extSB+0x100 && le.Uint16(b[extSB+0x38:]) == 0xEF53
}

// ext follows probe_ext2/3/4: a journal device is "jbd", a journal makes
// ext3, features ext3 lacks make ext4.
func ext(b []byte) ID {
	sb := b[extSB:]
	compat, incompat, roCompat := le.Uint32(sb[0x5C:]), le.Uint32(sb[0x60:]), le.Uint32(sb[0x64:])
	typ := "ext2"
	switch {
	case incompat&extJournalDev != 0:
		typ = "jbd"
	case incompat&^ext3Incompat != 0 || roCompat&^ext3RoCompat != 0:
		typ = "ext4"
	case compat&extHasJournal != 0:
		typ = "ext3"
	}
	return ID{Type: typ, UUID: uuid(sb[0x68:0x78]), Label: label(sb[0x78:0x88])}
}

// xfs: struct xfs_super_block at 0 (superblocks/xfs.c): sb_uuid (not
// sb_meta_uuid) and sb_fname.
func isXFS(b []byte) bool { return len(b) >= 0x78 && string(b[:4]) == "XFSB" }

func xfs(b []byte) ID {
	return ID{Type: "xfs", UUID: uuid(b[0x20:0x30]), Label: label(b[0x6C:0x78])}
}

// btrfs: struct btrfs_super_block at 64 KiB (superblocks/btrfs.c): fsid
// and label.
const btrfsSB = 0x10000

func isBtrfs(b []byte) bool {
	return len(b) >= btrfsSB+0x12B+256 && string(b[btrfsSB+0x40:btrfsSB+0x48]) == "_BHRfS_M"
}

func btrfs(b []byte) ID {
	sb := b[btrfsSB:]
	return ID{Type: "btrfs", UUID: uuid(sb[0x20:0x30]), Label: label(sb[0x12B : 0x12B+256])}
}

// swap: the signature ends the first page, of 4 to 64 KiB
// (superblocks/swap.c); version 1's header (swap_header_v1_2, after the
// 1 KiB boot block) holds the UUID and label.
func swapPage(b []byte) int {
	for page := 4096; page <= 65536 && page <= len(b); page *= 2 {
		if s := string(b[page-10 : page]); s == "SWAPSPACE2" || s == "SWAP-SPACE" || s == "S1SUSPEND" {
			return page
		}
	}
	return 0
}

func swap(b []byte) ID {
	page := swapPage(b)
	id := ID{Type: "swap"}
	if string(b[page-10:page]) == "SWAP-SPACE" {
		return id // version 0: no UUID, no label
	}
	if le.Uint32(b[1024:]) != 1 && binary.BigEndian.Uint32(b[1024:]) != 1 {
		return ID{} // swap_get_info: only version 1 is a swap area blkid names
	}
	id.UUID, id.Label = uuid(b[1024+12:1024+28]), label(b[1024+28:1024+44])
	return id
}

// FAT: the boot sector (superblocks/vfat.c). FAT32 keeps its volume id
// and boot-sector label at 67 and 71, FAT12/16 at 39 and 43.
func isFAT(b []byte) bool {
	if len(b) < 512 || b[510] != 0x55 || b[511] != 0xAA {
		return false
	}
	return string(b[82:90]) == "FAT32   " || string(b[54:62]) == "FAT16   " || string(b[54:62]) == "FAT12   "
}

// fat names the volume id as blkid does ("%02X%02X-%02X%02X" of its bytes
// from the last) and takes the label from the root directory's volume
// label entry, as blkid does since util-linux 2.23 (the boot sector's
// copy is LABEL_FATBOOT, which udev does not link); "NO NAME" is none.
func fat(r io.ReaderAt, size int64, b []byte) (ID, error) {
	fat32 := string(b[82:90]) == "FAT32   "
	idAt := 39
	if fat32 {
		idAt = 67
	}
	id := ID{Type: "vfat"}
	v := b[idAt : idAt+4]
	id.UUID = fmt.Sprintf("%02X%02X-%02X%02X", v[3], v[2], v[1], v[0])
	sector := int64(le.Uint16(b[11:]))
	perCluster := int64(b[13])
	reserved := int64(le.Uint16(b[14:]))
	fats := int64(b[16])
	rootEntries := int64(le.Uint16(b[17:]))
	fatSize := int64(le.Uint16(b[22:]))
	if fat32 {
		fatSize = int64(le.Uint32(b[36:]))
	}
	if sector < 512 || sector > 4096 || sector&(sector-1) != 0 || perCluster == 0 || fats == 0 {
		id.LabelUnread = true
		return id, nil
	}
	if fat32 {
		return fat32Label(r, size, b, id, sector, perCluster, reserved, fats*fatSize)
	}
	dirAt := (reserved + fats*fatSize) * sector
	dirLen := rootEntries * 32
	complete := dirLen <= maxFATDir
	dirLen = min(dirLen, maxFATDir)
	if dirAt <= 0 || dirLen <= 0 || dirAt > size-dirLen {
		id.LabelUnread = true
		return id, nil
	}
	dir := make([]byte, dirLen)
	if err := readFull(r, dir, dirAt); err != nil {
		return ID{}, fmt.Errorf("read FAT root directory: %w", err)
	}
	lbl, found, ended := fatLabel(dir)
	switch {
	case found:
		id.Label = lbl
	case !ended && !complete:
		id.LabelUnread = true // the directory goes on past what was read
	}
	return id, nil
}

// fat32Label reads a FAT32 root directory's label as blkid does: cluster
// after cluster along the FAT's chain from the root cluster, at most
// maxFATClusters of them, while the next cluster is one the FAT has an
// entry for; a cluster past the volume's end holds no label, a FAT entry
// past it ends the chain. The offsets wrap at 32 bits as blkid's do. An
// end-of-directory entry ends the search of its cluster, not of the
// chain, so a label in the next cluster is still found, as blkid finds
// it. Past maxFATDir of clusters read, the label is unread.
func fat32Label(r io.ReaderAt, size int64, b []byte, id ID, sector, perCluster, reserved, fatSectors int64) (ID, error) {
	clusterLen := uint32(perCluster) * uint32(sector)
	dataStart := uint32(reserved) + uint32(fatSectors)
	fatEntries := le.Uint32(b[36:]) * uint32(sector) / 4
	next := le.Uint32(b[44:])
	var read int64
	for i := 0; next != 0 && next < fatEntries && i < maxFATClusters; i++ {
		at := int64(dataStart+(next-2)*uint32(perCluster)) * sector
		if read += int64(clusterLen); read > maxFATDir {
			id.LabelUnread = true
			return id, nil
		}
		if at+int64(clusterLen) <= size {
			dir := make([]byte, clusterLen)
			if err := readFull(r, dir, at); err != nil {
				return ID{}, fmt.Errorf("read FAT root directory: %w", err)
			}
			if lbl, found, _ := fatLabel(dir); found {
				id.Label = lbl
				return id, nil
			}
		}
		entryAt := reserved*sector + int64(next)*4
		if entryAt+int64(clusterLen) > size {
			break
		}
		var e [4]byte
		if err := readFull(r, e[:], entryAt); err != nil {
			return ID{}, fmt.Errorf("read FAT: %w", err)
		}
		next = le.Uint32(e[:]) & 0x0FFFFFFF
	}
	return id, nil
}

// readFull reads len(p) bytes at off: a short read is an error.
func readFull(r io.ReaderAt, p []byte, off int64) error {
	if n, err := r.ReadAt(p, off); n < len(p) {
		if err == nil || errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// fatLabel finds the volume label entry of a directory (search_fat_label:
// attribute volume id, not a long name, not deleted); ended reports the
// end-of-directory entry was met first.
func fatLabel(dir []byte) (lbl string, found, ended bool) {
	for i := 0; i+32 <= len(dir); i += 32 {
		e := dir[i : i+32]
		if e[0] == 0 {
			return "", false, true
		}
		if e[0] == 0xE5 {
			continue
		}
		const attrLongName, attrVolume, attrDir = 0x0F, 0x08, 0x10
		if e[11]&attrLongName == attrLongName || e[11]&(attrVolume|attrDir) != attrVolume ||
			le.Uint16(e[20:]) != 0 || le.Uint16(e[26:]) != 0 {
			continue // a long name, a file, or an entry with clusters
		}
		n := make([]byte, 11)
		copy(n, e[:11])
		if n[0] == 0x05 {
			n[0] = 0xE5
		}
		if string(n) == "NO NAME    " {
			return "", true, false
		}
		return label(n), true, false
	}
	return "", false, false
}

// Encode is how udev names a by-uuid or by-label link after a value
// (blkid_encode_string, as encode_devnode_name): whole valid UTF-8
// characters of two bytes or more and ASCII letters, digits and "#+-.:=@_"
// are kept, every other byte, a backslash included, becomes \xNN.
func Encode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] >= utf8.RuneSelf {
			if r, n := utf8.DecodeRuneInString(s[i:]); n > 1 && unicharValid(r) {
				b.WriteString(s[i : i+n])
				i += n
				continue
			}
		}
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("#+-.:=@_", c) >= 0 {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "\\x%02x", c)
		}
		i++
	}
	return b.String()
}

// unicharValid is unichar_is_valid: not a surrogate, not a non-character.
func unicharValid(r rune) bool {
	return r < 0x110000 && (r < 0xD800 || r > 0xDFFF) && (r < 0xFDD0 || r > 0xFDEF) && r&0xFFFE != 0xFFFE
}

// NTFS: the boot sector's parameter block (struct ntfs_super_block) and
// the $Volume file's record in the MFT (superblocks/ntfs.c). The UUID is
// the volume serial number, the label the $VOLUME_NAME attribute.
const (
	ntfsMaxCluster  = 2 << 20 // NTFS_MAX_CLUSTER_SIZE
	ntfsVolumeRec   = 3       // MFT_RECORD_VOLUME
	ntfsVolumeName  = 0x60    // MFT_RECORD_ATTR_VOLUME_NAME
	ntfsAttrEnd     = 0xFFFFFFFF
	ntfsAttrHeader  = 22 // sizeof(struct file_attribute)
	ntfsMaxMFTRead  = 1 << 20
	ntfsRecordMagic = "FILE"
)

// ntfsGeometry is what the boot sector says of where the MFT is.
type ntfsGeometry struct {
	mft        int64 // the MFT's offset in the volume
	recordSize int64 // one MFT record's size
}

// ntfsParams checks the boot sector as blkid does and says where the MFT
// is; ok is false for a volume blkid does not take for NTFS by its boot
// sector alone.
func ntfsParams(b []byte) (g ntfsGeometry, ok bool) {
	if len(b) < 0x54 || string(b[3:11]) != "NTFS    " {
		return g, false
	}
	sector := uint64(le.Uint16(b[0x0B:]))
	if sector < 256 || sector > 4096 {
		return g, false
	}
	var perCluster uint64
	switch spc := b[0x0D]; spc {
	case 1, 2, 4, 8, 16, 32, 64, 128:
		perCluster = uint64(spc)
	default:
		if spc < 240 || spc > 249 {
			return g, false
		}
		perCluster = 1 << (256 - uint(spc))
	}
	if sector*perCluster > ntfsMaxCluster {
		return g, false
	}
	// reserved_sectors, fats, root_entries, sectors, sectors_per_fat
	// and large_sectors are zero on NTFS.
	if le.Uint16(b[0x0E:]) != 0 || b[0x10] != 0 || le.Uint16(b[0x11:]) != 0 || le.Uint16(b[0x13:]) != 0 ||
		le.Uint16(b[0x16:]) != 0 || le.Uint32(b[0x20:]) != 0 {
		return g, false
	}
	cpmr := int8(b[0x40])
	if u := uint8(cpmr); u < 0xE1 || u > 0xF7 {
		switch cpmr {
		case 1, 2, 4, 8, 16, 32, 64:
		default:
			return g, false
		}
	}
	var record uint64
	if cpmr > 0 {
		record = uint64(cpmr) * perCluster * sector
	} else {
		record = 1 << uint(-int(cpmr))
	}
	clusters := le.Uint64(b[0x28:]) / perCluster
	mftCluster, mirror := le.Uint64(b[0x30:]), le.Uint64(b[0x38:])
	if mftCluster > clusters || mirror > clusters || record < 4 {
		return g, false
	}
	// The MFT's offset, computed in 64 bits as blkid does; one past what
	// a volume can hold is no NTFS volid reads.
	off := mftCluster * sector * perCluster
	if off/(sector*perCluster) != mftCluster || off > 1<<62 {
		return g, false
	}
	return ntfsGeometry{mft: int64(off), recordSize: int64(record)}, true
}

// ntfs reads the MFT's first records, where g (read from the boot sector
// b) puts them: the first ($MFT) and the fourth
// ($Volume) must be file records, as blkid requires, and $Volume's
// $VOLUME_NAME attribute is the label, taken as blkid takes it (the
// record as stored, without its update sequence applied). Records blkid
// would read past the volume's end, or larger together than volid reads
// (real ones are 1 or 4 KiB each), make the volume no NTFS volid names.
func ntfs(r io.ReaderAt, size int64, b []byte, g ntfsGeometry) (ID, error) {
	span := (ntfsVolumeRec + 1) * g.recordSize
	if g.recordSize > ntfsMaxMFTRead/(ntfsVolumeRec+1) || g.mft > size || span > size-g.mft {
		return ID{}, nil
	}
	recs := make([]byte, span)
	if err := readFull(r, recs, g.mft); err != nil {
		return ID{}, fmt.Errorf("read the NTFS MFT: %w", err)
	}
	vol := recs[ntfsVolumeRec*g.recordSize:]
	if string(recs[:4]) != ntfsRecordMagic || string(vol[:4]) != ntfsRecordMagic {
		return ID{}, nil
	}
	id := ID{Type: "ntfs"}
	if serial := le.Uint64(b[0x48:]); serial != 0 {
		id.UUID = fmt.Sprintf("%016X", serial)
	}
	id.Label = ntfsLabel(vol)
	return id, nil
}

// ntfsLabel walks the attributes of the $Volume record rec as blkid does,
// to the first $VOLUME_NAME attribute.
func ntfsLabel(rec []byte) string {
	size := uint64(len(rec))
	if size < 0x20 {
		return ""
	}
	allocated := uint64(le.Uint32(rec[0x1C:]))
	for at := uint64(le.Uint16(rec[0x14:])); at+ntfsAttrHeader <= size && at <= allocated; {
		attr := rec[at:]
		typ, n := le.Uint32(attr), le.Uint32(attr[4:])
		if n == 0 || typ == ntfsAttrEnd {
			return ""
		}
		if typ == ntfsVolumeName {
			valLen, valOff := uint64(le.Uint32(attr[0x10:])), uint64(le.Uint16(attr[0x14:]))
			if at+valOff+valLen > size {
				return ""
			}
			return utf16Label(attr[valOff : valOff+valLen])
		}
		at += uint64(n)
	}
	return ""
}

// utf16Label is blkid_probe_set_utf8label of UTF-16LE: ul_encode_to_utf8
// (a surrogate pair joined, a lone surrogate encoded as it stands, up to
// the first NUL), trailing white space cut as label cuts it.
func utf16Label(b []byte) string {
	var out []byte
	for i := 0; i+2 <= len(b); i += 2 {
		c := uint32(le.Uint16(b[i:]))
		if c >= 0xD800 && c <= 0xDBFF && i+4 <= len(b) {
			if c2 := uint32(le.Uint16(b[i+2:])); c2 >= 0xDC00 && c2 <= 0xDFFF {
				c = 0x10000 + (c-0xD800)<<10 + (c2 - 0xDC00)
				i += 2
			}
		}
		if c == 0 {
			break
		}
		switch {
		case c < 0x80:
			out = append(out, byte(c))
		case c < 0x800:
			out = append(out, byte(0xC0|c>>6), byte(0x80|c&0x3F))
		case c < 0x10000:
			out = append(out, byte(0xE0|c>>12), byte(0x80|(c>>6)&0x3F), byte(0x80|c&0x3F))
		default:
			out = append(out, byte(0xF0|c>>18), byte(0x80|(c>>12)&0x3F), byte(0x80|(c>>6)&0x3F), byte(0x80|c&0x3F))
		}
	}
	return label(out)
}
