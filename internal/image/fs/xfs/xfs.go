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
// unwritten extents as zeros; bigtime and nrext64 inodes. CRCs are not
// verified; the owner and level fields of the blocks it walks are.
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
// device cannot be checked and is reported so ([ErrExternalLog]).
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
	incompatKnown       = incompatFtype | incompatSpinodes | incompatMetaUUID |
		incompatBigtime | incompatNeedsRepair | incompatNrext64 |
		incompatExchrange | incompatParent
)

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
// ErrCorrupt if the superblock is not an XFS one or is inconsistent with
// size, and with ErrUnsupported for XFS v4 and unknown incompatible
// features.
func Open(r io.ReaderAt, size int64) (*FS, error) {
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
	f := &FS{r: r, size: size}
	f.inodes = inodefs.New[*inode](disk{f})
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
		return nil, fmt.Errorf("open xfs: incompatible features %#x: %w", unknown, ErrUnsupported)
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
	// A log that cannot be checked does not hide the tree: Warnings says so.
	f.log, f.logErr = f.checkLog(sb)
	root, err := f.inode(f.rootIno)
	if err != nil {
		return nil, fmt.Errorf("open xfs: root directory: %w", err)
	}
	if !root.isDir() {
		return nil, fmt.Errorf("open xfs: root inode is not a directory: %w", ErrCorrupt)
	}
	return f, nil
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
