// Package xfs owns a read-only reader of XFS v5 (CRC-enabled) filesystems
// held in an io.ReaderAt: a disk image, a partition, a logical volume. It
// never mounts anything, needs no privileges, never writes, and reads only
// the blocks a lookup needs (the superblock, the inodes and directory
// blocks on the path, the bmap btree blocks that map them).
//
// [FS] is a rootfs.Source: it never follows symbolic links itself; the
// rootfs view above it resolves them with chroot semantics.
//
// # What it reads
//
// Inodes (v3) in local, extent and bmap-btree formats; short-form, block,
// leaf and node directories; local and remote symlinks; holes and
// unwritten extents as zeros; bigtime and nrext64 inodes.
//
// # Checksums
//
// Every v5 structure it reads is verified once, when it is first read,
// with the CRC32C the kernel's verifiers check, along with the block
// number, owner and filesystem UUID the structure records: the superblock
// and each AG's headers (AGF, AGI, AGFL: at Open, all AGs), the inodes,
// bmap btree blocks, directory data blocks and remote symlink blocks. A
// mismatch is an [integrity.Mismatch], which wraps ErrCorrupt, unless the
// [integrity.Checker] given to OpenWith is lenient: then it is recorded
// and the structure is read as stored. It reads no free space or inode
// btrees, no directory leaf, node or free-index blocks (data blocks are
// read in order instead) and no attribute blocks, so it does not verify
// them: xfs_repair does.
//
// # The log
//
// It does not replay a dirty log: an image of a running system (an AMI
// made with --no-reboot, a snapshot of a live root volume) shows the tree
// as last written back, and changes still only in the log are not seen.
// It does find out whether the log is dirty, as the kernel does at mount
// (the log head from the cycle numbers stamped on its blocks, then whether
// the last record is an unmount record): [FS.Log] tells, and
// [FS.Warnings] says it in a line for the user. A log on an external
// device cannot be checked and is reported so ([ErrExternalLog]). A log
// whose head or last record cannot be found is refused (ErrCorrupt), as
// the kernel refuses to mount it; a lenient Checker records it and the
// tree is read on. The records' own CRCs are not checked: a dirty log is
// reported, never replayed, so nothing in its records is believed.
//
// # Hostile input
//
// Images are untrusted. Every offset and length read from the image is
// checked against the device size and the filesystem geometry before use;
// bmap btrees are descended with strictly decreasing levels (so they cannot
// cycle); every inode read is checked to carry its own number; nothing is
// allocated from a size the image claims without bounding it first; every
// inconsistency is an error wrapping [ErrCorrupt]. Features this reader
// does not implement are refused with [ErrUnsupported].
package xfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/amilint/amilint/internal/image/fs/inodefs"
	"github.com/amilint/amilint/internal/image/integrity"
)

// ErrCorrupt reports an image whose XFS structures are inconsistent or
// point outside the device.
var ErrCorrupt = errors.New("corrupt xfs filesystem")

// ErrUnsupported reports an XFS version or feature this reader does not
// implement.
var ErrUnsupported = errors.New("unsupported xfs feature")

var be = binary.BigEndian

// Incompatible features of v5 superblocks (sb_features_incompat).
const (
	incompatFtype       = 0x1
	incompatSpinodes    = 0x2
	incompatMetaUUID    = 0x4
	incompatBigtime     = 0x8
	incompatNeedsRepair = 0x10
	incompatNrext64     = 0x20
	incompatExchrange   = 0x40 // file range exchange: nothing on disk this reader reads
	incompatParent      = 0x80 // parent pointers: attributes, not directories
	incompatMetadir     = 0x100
	incompatKnown       = incompatFtype | incompatSpinodes | incompatMetaUUID |
		incompatBigtime | incompatNeedsRepair | incompatNrext64 |
		incompatExchrange | incompatParent
)

// incompatNamed names the incompatible features as xfs_db's version
// command and mkfs.xfs spell them.
var incompatNamed = map[uint32]string{
	incompatFtype:       "ftype",
	incompatSpinodes:    "sparse",
	incompatMetaUUID:    "metauuid",
	incompatBigtime:     "bigtime",
	incompatNeedsRepair: "needsrepair",
	incompatNrext64:     "nrext64",
	incompatExchrange:   "exchange",
	incompatParent:      "parent",
	incompatMetadir:     "metadir",
}

// FS is a read-only XFS v5 filesystem. It implements rootfs.Source
// (fs.ReadDirFS and fs.ReadLinkFS) and is safe for concurrent use when its
// io.ReaderAt is. Its Open, ReadDir, ReadFile, Lstat and ReadLink are
// those of [inodefs.FS], which never follows links.
type FS struct {
	*inodes

	r    io.ReaderAt
	size int64

	blockSize  int64
	blockLog   uint
	dblocks    uint64
	agBlocks   uint64
	agCount    uint64
	agBlkLog   uint
	inodeSize  int64
	inoPBLog   uint
	rootIno    uint64
	dirBlkSize int64 // directory block size: blockSize << sb_dirblklog
	dirBlkLog  uint
	incompat   uint32
	sectSize   int64
	uuid       [16]byte // sb_meta_uuid: what v5 structures record

	// check decides what a checksum mismatch does; nil: it is an error.
	check *integrity.Checker

	log    LogState // the internal log's state, see Log
	logErr error
}

// Probe reports whether r starts with an XFS superblock magic.
func Probe(r io.ReaderAt) bool {
	var b [4]byte
	if _, err := r.ReadAt(b[:], 0); err != nil {
		return false
	}
	return string(b[:]) == "XFSB"
}

// Open reads the primary superblock of the filesystem in r, which holds
// size bytes, and returns the filesystem. It fails with an error wrapping
// ErrCorrupt if the superblock is not an XFS one, fails its CRC or is
// inconsistent with size, and with ErrUnsupported for XFS v4 and unknown
// incompatible features. Every checksum mismatch is an error.
func Open(r io.ReaderAt, size int64) (*FS, error) { return OpenWith(r, size, nil) }

// OpenWith is Open with check deciding what a checksum mismatch does (nil:
// it is an error).
func OpenWith(r io.ReaderAt, size int64, check *integrity.Checker) (*FS, error) {
	if size < 512 {
		return nil, fmt.Errorf("open xfs: device of %d bytes too small: %w", size, ErrCorrupt)
	}
	sb := make([]byte, 512)
	if _, err := r.ReadAt(sb, 0); err != nil {
		return nil, fmt.Errorf("open xfs: read superblock: %w", err)
	}
	if string(sb[:4]) != "XFSB" {
		return nil, fmt.Errorf("open xfs: bad superblock magic %q: %w", sb[:4], ErrCorrupt)
	}
	if v := be.Uint16(sb[0x64:]) & 0xF; v != 5 {
		return nil, fmt.Errorf("open xfs: version %d filesystem (only v5 is read): %w", v, ErrUnsupported)
	}
	f := &FS{r: r, size: size, check: check}
	f.inodes = inodefs.New[*inode](disk{f})
	if check.Lenient() {
		f.inodes.TrackPaths()
		// Reading on past mismatches, what then cannot be read at all is
		// recorded too; systemd would skip it as the audit does.
		f.inodes.OnDamage(func(path string, err error) {
			check.Record(fmt.Sprintf("%s: %s cannot be read, skipped (%v)", "xfs", path, err))
		})
	}
	// The superblock's CRC covers its whole sector, first: whatever else
	// is wrong with a superblock that fails it, that is the news.
	f.sectSize = int64(be.Uint16(sb[0x66:]))
	if f.sectSize < 512 || f.sectSize > 32768 || f.sectSize&(f.sectSize-1) != 0 || f.sectSize > size {
		return nil, fmt.Errorf("open xfs: sector size %d: %w", f.sectSize, ErrCorrupt)
	}
	if f.sectSize > 512 {
		sb = make([]byte, f.sectSize)
		if err := f.readAt(sb, 0); err != nil {
			return nil, fmt.Errorf("open xfs: read superblock: %w", err)
		}
	}
	if !crcOK(sb, sbCRCOff) {
		if err := f.mismatch("superblock", 0); err != nil {
			return nil, fmt.Errorf("open xfs: %w", err)
		}
	}
	f.blockSize = int64(be.Uint32(sb[0x4:]))
	f.dblocks = be.Uint64(sb[0x8:])
	f.rootIno = be.Uint64(sb[0x38:])
	f.agBlocks = uint64(be.Uint32(sb[0x54:]))
	f.agCount = uint64(be.Uint32(sb[0x58:]))
	f.inodeSize = int64(be.Uint16(sb[0x68:]))
	inoPerBlock := int64(be.Uint16(sb[0x6A:]))
	f.blockLog = uint(sb[0x78])
	inodeLog := uint(sb[0x7A])
	f.inoPBLog = uint(sb[0x7B])
	f.agBlkLog = uint(sb[0x7C])
	f.dirBlkLog = uint(sb[0xC0])
	f.incompat = be.Uint32(sb[0xD8:])
	if unknown := f.incompat &^ incompatKnown; unknown != 0 {
		return nil, fmt.Errorf("open xfs: incompatible features %#x (%s): %w", unknown, inodefs.FeatureNames(unknown, incompatNamed), ErrUnsupported)
	}
	if f.incompat&incompatNeedsRepair != 0 {
		// xfs_repair sets it while it works: the kernel refuses to mount.
		return nil, fmt.Errorf("open xfs: the filesystem needs repair (its needsrepair feature is set: an xfs_repair did not finish), the kernel refuses to mount it: %w", ErrCorrupt)
	}
	copy(f.uuid[:], sb[0x20:0x30])
	if f.incompat&incompatMetaUUID != 0 {
		copy(f.uuid[:], sb[0xF8:0x108])
	}
	switch {
	case f.blockLog < 9 || f.blockLog > 16 || f.blockSize != 1<<f.blockLog:
		return nil, fmt.Errorf("open xfs: block size %d (log %d): %w", f.blockSize, f.blockLog, ErrCorrupt)
	case inodeLog < 8 || inodeLog > 11 || f.inodeSize != 1<<inodeLog || f.inodeSize > f.blockSize:
		return nil, fmt.Errorf("open xfs: inode size %d: %w", f.inodeSize, ErrCorrupt)
	case f.inoPBLog != f.blockLog-inodeLog || inoPerBlock != 1<<f.inoPBLog:
		return nil, fmt.Errorf("open xfs: %d inodes per block: %w", inoPerBlock, ErrCorrupt)
	case f.agBlkLog == 0 || f.agBlkLog > 31 || f.agBlocks == 0 || f.agBlocks > 1<<f.agBlkLog || f.agBlocks <= 1<<(f.agBlkLog-1):
		return nil, fmt.Errorf("open xfs: %d blocks per AG (log %d): %w", f.agBlocks, f.agBlkLog, ErrCorrupt)
	case f.agCount == 0 || f.dblocks == 0 || f.dblocks > f.agCount*f.agBlocks || f.dblocks <= (f.agCount-1)*f.agBlocks:
		return nil, fmt.Errorf("open xfs: %d blocks in %d AGs of %d: %w", f.dblocks, f.agCount, f.agBlocks, ErrCorrupt)
	case f.dblocks > uint64(size)>>f.blockLog:
		return nil, fmt.Errorf("open xfs: filesystem of %d blocks of %d bytes exceeds the device's %d bytes (truncated image?): %w",
			f.dblocks, f.blockSize, size, ErrCorrupt)
	case f.blockLog+f.dirBlkLog > 16:
		return nil, fmt.Errorf("open xfs: directory block log %d: %w", f.dirBlkLog, ErrCorrupt)
	}
	f.dirBlkSize = f.blockSize << f.dirBlkLog
	if f.sectSize > f.blockSize {
		return nil, fmt.Errorf("open xfs: sector size %d over the block size %d: %w", f.sectSize, f.blockSize, ErrCorrupt)
	}
	if err := f.checkAGHeaders(); err != nil {
		return nil, fmt.Errorf("open xfs: %w", err)
	}
	// A log on another device cannot be checked: Warnings says so, and the
	// tree is read. A log whose head or last record cannot be found is
	// damage the kernel refuses to mount (xlog_find_tail fails): an error,
	// or with a lenient Checker a recorded line and the tree read on.
	f.log, f.logErr = f.checkLog(sb)
	if errors.Is(f.logErr, ErrCorrupt) {
		if !check.Lenient() {
			return nil, fmt.Errorf("open xfs: %w (the kernel would refuse to mount it)", f.logErr)
		}
		check.Record(fmt.Sprintf("xfs: %v (the kernel would refuse to mount it)", f.logErr))
	}
	root, err := f.inode(f.rootIno)
	if err != nil {
		return nil, fmt.Errorf("open xfs: root directory: %w", err)
	}
	if !root.isDir() {
		return nil, fmt.Errorf("open xfs: root inode is not a directory: %w", ErrCorrupt)
	}
	return f, nil
}

// CRC offsets (XFS_*_CRC_OFF) of the v5 structures read.
const (
	sbCRCOff      = 0xE0
	agfCRCOff     = 216
	agiCRCOff     = 312
	agflCRCOff    = 32
	inodeCRCOff   = 100
	dirCRCOff     = 4
	bmbtCRCOff    = 64
	symlinkCRCOff = 12
)

// crcOK checks a v5 structure's CRC as xfs_verify_cksum does: the CRC32C
// of b with the four bytes at off taken as zeros, stored little-endian at
// off.
func crcOK(b []byte, off int) bool {
	c := integrity.CRC32CUpdate(0, b[:off])
	c = integrity.CRC32CUpdate(c, []byte{0, 0, 0, 0})
	c = integrity.CRC32CUpdate(c, b[off+4:])
	return c == binary.LittleEndian.Uint32(b[off:])
}

// mismatch reports that structure (of inode ino, 0 for none) fails its
// checksum: an error to return, or nil when the Checker records it and
// reading goes on.
func (f *FS) mismatch(structure string, ino uint64) error {
	m := &integrity.Mismatch{Format: "xfs", Structure: structure, Ino: ino, Corrupt: ErrCorrupt}
	if f.check.Lenient() && ino != 0 && f.inodes != nil {
		m.Path = f.inodes.PathOf(ino)
	}
	return f.check.Fail(m)
}

// checkAGHeaders verifies the AGF, AGI and AGFL of every AG, which the
// kernel reads at mount: each sector's CRC, magic, AG number and UUID.
func (f *FS) checkAGHeaders() error {
	hdr := make([]byte, 3*f.sectSize)
	for ag := range f.agCount {
		at := int64(ag*f.agBlocks)<<f.blockLog + f.sectSize
		if err := f.readAt(hdr, at); err != nil {
			return fmt.Errorf("AG %d headers: %w", ag, err)
		}
		for i, h := range []struct {
			name, magic   string
			crc, uuid, no int
		}{
			{"AGF", "XAGF", agfCRCOff, 64, 8},
			{"AGI", "XAGI", agiCRCOff, 296, 8},
			{"AGFL", "XAFL", agflCRCOff, 8, 4},
		} {
			s := hdr[int64(i)*f.sectSize : int64(i+1)*f.sectSize]
			if !crcOK(s, h.crc) {
				if err := f.mismatch(fmt.Sprintf("%s of AG %d (sector %d)", h.name, ag, (at+int64(i)*f.sectSize)/512), 0); err != nil {
					return err
				}
			}
			if string(s[:4]) != h.magic || uint64(be.Uint32(s[h.no:])) != ag || [16]byte(s[h.uuid:h.uuid+16]) != f.uuid {
				return fmt.Errorf("%s of AG %d: bad magic %q, AG number %d or UUID: %w", h.name, ag, s[:4], be.Uint32(s[h.no:]), ErrCorrupt)
			}
		}
	}
	return nil
}

// checkBlockHeader verifies a v5 metadata block read at byte at of the
// device (the header's CRC at crcOff over all of b, then the block number,
// at blknoOff, in basic blocks, and the UUID at uuidOff), naming it what,
// a block of inode ino.
func (f *FS) checkBlockHeader(b []byte, at int64, crcOff, blknoOff, uuidOff int, what string, ino uint64) error {
	if !crcOK(b, crcOff) {
		if err := f.mismatch(what, ino); err != nil {
			return err
		}
	}
	if got := be.Uint64(b[blknoOff:]); got != uint64(at/512) {
		return fmt.Errorf("%s records its place as basic block %d, read at %d: %w", what, got, at/512, ErrCorrupt)
	}
	if [16]byte(b[uuidOff:uuidOff+16]) != f.uuid {
		return fmt.Errorf("%s records another filesystem's UUID %x: %w", what, b[uuidOff:uuidOff+16], ErrCorrupt)
	}
	return nil
}

// readAt reads len(p) bytes at off, failing with ErrCorrupt when the range
// is not inside the device.
func (f *FS) readAt(p []byte, off int64) error {
	return inodefs.ReadFull(f.r, f.size, p, off, ErrCorrupt)
}

// daddr converts a filesystem block number (AG number and AG block packed
// by sb_agblklog) to a linear block number on the device.
func (f *FS) daddr(fsb uint64) (uint64, error) {
	ag := fsb >> f.agBlkLog
	agb := fsb & (1<<f.agBlkLog - 1)
	if ag >= f.agCount || agb >= f.agBlocks {
		return 0, fmt.Errorf("block %d/%d outside the filesystem: %w", ag, agb, ErrCorrupt)
	}
	d := ag*f.agBlocks + agb
	if d >= f.dblocks {
		return 0, fmt.Errorf("block %d past the %d-block filesystem: %w", d, f.dblocks, ErrCorrupt)
	}
	return d, nil
}

// readFSBlock reads the filesystem block fsb into a new buffer.
func (f *FS) readFSBlock(fsb uint64) ([]byte, error) {
	d, err := f.daddr(fsb)
	if err != nil {
		return nil, err
	}
	b := make([]byte, f.blockSize)
	if err := f.readAt(b, int64(d)<<f.blockLog); err != nil {
		return nil, err
	}
	return b, nil
}
