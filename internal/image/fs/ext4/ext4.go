// Package ext4 owns a read-only reader of ext2, ext3 and ext4 filesystems
// held in an io.ReaderAt: a disk image, a partition, a logical volume. It
// never mounts anything, needs no privileges, never writes, and reads only
// the blocks a lookup needs (the superblock, one group descriptor per inode
// table it visits, the inodes and directory blocks on the path).
//
// [FS] is a rootfs.Source: it never follows symbolic links itself; the
// rootfs view above it resolves them with chroot semantics.
//
// # What it reads
//
// Extent trees (holes and unwritten extents read as zeros) and ext2/3
// block maps; linear and htree directories (read linearly: htree leaves
// are ordinary directory blocks); inline data files, directories and
// symlinks; fast and slow symlinks; 32- and 64-byte group descriptors,
// flex_bg and meta_bg. When the filesystem needs recovery (an image of a
// running system), the committed transactions of its internal jbd2 journal
// are replayed in memory over the blocks read.
//
// # Checksums
//
// With metadata_csum, every structure it reads is verified once, when it is
// first read, with the CRC32C the kernel computes (seeded with the
// filesystem's UUID or s_checksum_seed, then the inode number and
// generation): the superblock, every group descriptor (at Open, as the
// kernel does at mount), the inodes, extent tree blocks, directory leaf
// blocks and htree nodes, and, when the journal is replayed, the journal
// superblock, its descriptor, revoke and commit blocks and the logged
// blocks' tags. Without it, group descriptors carrying the older CRC16
// (uninit_bg) are verified. A mismatch is an [integrity.Mismatch], which
// wraps ErrCorrupt, unless the [integrity.Checker] given to OpenWith is
// lenient: then it is recorded and the structure is read as stored.
// Bitmaps, extended attribute blocks and file data are not read, or (data)
// carry no checksum.
//
// # Hostile input
//
// Images are untrusted. Every offset and length read from the image is
// checked against the device size before it is used, extent trees are
// walked with strictly decreasing depth (so they cannot cycle), indirect
// block maps have a fixed depth, nothing is allocated from a size the image
// claims without first bounding it by what the image can hold, and every
// inconsistency is an error wrapping [ErrCorrupt]. Layout-changing features
// this reader does not implement are refused with [ErrUnsupported].
package ext4

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/amilint/amilint/internal/image/fs/inodefs"
	"github.com/amilint/amilint/internal/image/integrity"
	"github.com/amilint/amilint/internal/image/readahead"
)

// ErrCorrupt reports an image whose ext4 structures are inconsistent or
// point outside the device.
var ErrCorrupt = errors.New("corrupt ext4 filesystem")

// ErrUnsupported reports an ext4 feature that changes the on-disk layout in
// a way this reader does not implement.
var ErrUnsupported = errors.New("unsupported ext4 feature")

const (
	superblockOffset = 1024
	magicOffset      = 56
	magic            = 0xEF53
	rootIno          = 2
)

// Incompatible feature flags (s_feature_incompat).
const (
	incompatCompression = 0x1
	incompatFiletype    = 0x2
	incompatRecover     = 0x4
	incompatJournalDev  = 0x8
	incompatMetaBG      = 0x10
	incompatExtents     = 0x40
	incompat64Bit       = 0x80
	incompatMMP         = 0x100
	incompatFlexBG      = 0x200
	incompatEAInode     = 0x400
	incompatDirData     = 0x1000
	incompatCsumSeed    = 0x2000
	incompatLargeDir    = 0x4000
	incompatInlineData  = 0x8000
	incompatEncrypt     = 0x10000
	incompatCasefold    = 0x20000
)

// incompatKnown holds the incompatible features the reader handles: those
// that do not change what it reads, and those it implements.
const incompatKnown = incompatFiletype | incompatRecover | incompatMetaBG |
	incompatExtents | incompat64Bit | incompatMMP | incompatFlexBG |
	incompatEAInode | incompatCsumSeed | incompatLargeDir |
	incompatInlineData | incompatEncrypt | incompatCasefold

// incompatNamed names every incompatible feature e2fsprogs knows, as
// mke2fs -O and dumpe2fs spell them.
var incompatNamed = map[uint32]string{
	incompatCompression: "compression",
	incompatFiletype:    "filetype",
	incompatRecover:     "needs_recovery",
	incompatJournalDev:  "journal_dev",
	incompatMetaBG:      "meta_bg",
	incompatExtents:     "extent",
	incompat64Bit:       "64bit",
	incompatMMP:         "mmp",
	incompatFlexBG:      "flex_bg",
	incompatEAInode:     "ea_inode",
	incompatDirData:     "dirdata",
	incompatCsumSeed:    "metadata_csum_seed",
	incompatLargeDir:    "large_dir",
	incompatInlineData:  "inline_data",
	incompatEncrypt:     "encrypt",
	incompatCasefold:    "casefold",
}

// Compatible and read-only compatible features the reader looks at.
const (
	compatDirIndex      = 0x20
	roCompatGdtCsum     = 0x10
	roCompatMetadataCsm = 0x400

	bgInodeUninit = 0x1 // bg_flags: the group's inode table is not initialised

	csumTypeCRC32C = 1
	creatorOSHurd  = 1
)

// FS is a read-only ext2/3/4 filesystem. It implements rootfs.Source
// (fs.ReadDirFS and fs.ReadLinkFS) and is safe for concurrent use when its
// io.ReaderAt is. Its Open, ReadDir, ReadFile, Lstat and ReadLink are
// those of [inodefs.FS], which never follows links.
type FS struct {
	*inodes

	r    io.ReaderAt
	size int64 // device size in bytes

	blockSize      int64
	blocksCount    uint64
	firstDataBlock uint64
	blocksPerGroup uint64
	inodesPerGroup uint64
	inodesCount    uint64
	groups         uint64
	inodeSize      int64
	descSize       int64
	incompat       uint32
	sparseSuper    bool
	firstMetaBG    uint64
	dirIndex       bool // compat dir_index: htree directories are indexed

	// check decides what a checksum mismatch does; nil: it is an error.
	check *integrity.Checker
	// csum is set with metadata_csum: inodes, extent blocks and directory
	// blocks carry a CRC32C seeded with seed.
	csum bool
	seed uint32
	// inodeCsum is csum, unless the filesystem was made by GNU Hurd,
	// whose inodes the kernel does not check.
	inodeCsum bool
	// tables holds each group's first inode table block, read from the
	// group descriptors (checked) at Open.
	tables []uint64

	// hints is set when the device takes read-ahead notices
	// (readahead.Accepts): a remote disk.
	hints bool

	// journal maps filesystem blocks to their committed copies in the
	// journal, when the filesystem needs recovery; nil otherwise.
	journal map[uint64]journalBlock
}

// Probe reports whether r holds an ext2/3/4 superblock magic at its place.
func Probe(r io.ReaderAt) bool {
	var b [2]byte
	if _, err := r.ReadAt(b[:], superblockOffset+magicOffset); err != nil {
		return false
	}
	return binary.LittleEndian.Uint16(b[:]) == magic
}

// Open reads the superblock of the filesystem in r, which holds size bytes,
// and returns the filesystem. It fails with an error wrapping ErrCorrupt if
// the superblock is not an ext2/3/4 one, fails its checksum or is
// inconsistent with size, and with ErrUnsupported for layout features it
// does not implement. Every checksum mismatch is an error.
func Open(r io.ReaderAt, size int64) (*FS, error) { return OpenWith(r, size, nil) }

// maxGroupDescBytes bounds the group descriptor table Open reads and checks
// whole: 512 Ki groups of 64 bytes, 64 TiB in 128 MiB groups.
const maxGroupDescBytes = 32 << 20

// OpenWith is Open with check deciding what a checksum mismatch does (nil:
// it is an error).
func OpenWith(r io.ReaderAt, size int64, check *integrity.Checker) (*FS, error) {
	if size < superblockOffset+1024 {
		return nil, fmt.Errorf("open ext4: device of %d bytes too small: %w", size, ErrCorrupt)
	}
	sb := make([]byte, 1024)
	if _, err := r.ReadAt(sb, superblockOffset); err != nil {
		return nil, fmt.Errorf("open ext4: read superblock: %w", err)
	}
	le := binary.LittleEndian
	if le.Uint16(sb[magicOffset:]) != magic {
		return nil, fmt.Errorf("open ext4: bad superblock magic %#x: %w", le.Uint16(sb[magicOffset:]), ErrCorrupt)
	}
	f := &FS{r: r, size: size, check: check, hints: readahead.Accepts(r)}
	f.inodes = inodefs.New[*inode](disk{f})
	if check.Lenient() {
		f.inodes.TrackPaths()
		// Reading on past mismatches, what then cannot be read at all is
		// recorded too; systemd would skip it as the audit does.
		f.inodes.OnDamage(func(path string, err error) {
			check.Record(fmt.Sprintf("%s: %s cannot be read, skipped (%v)", "ext4", path, err))
		})
	}
	rev := le.Uint32(sb[0x4C:])
	var roCompat uint32
	if rev >= 1 {
		roCompat = le.Uint32(sb[0x64:])
		f.incompat = le.Uint32(sb[0x60:])
		f.dirIndex = le.Uint32(sb[0x5C:])&compatDirIndex != 0
	}
	// The checksum first: whatever else is wrong with a superblock that
	// fails it, that is the news.
	if roCompat&roCompatMetadataCsm != 0 {
		if integrity.CRC32CRaw(^uint32(0), sb[:0x3FC]) != le.Uint32(sb[0x3FC:]) {
			if err := f.mismatch("superblock", 0); err != nil {
				return nil, fmt.Errorf("open ext4: %w", err)
			}
		}
		if t := sb[0x175]; t != csumTypeCRC32C {
			return nil, fmt.Errorf("open ext4: metadata checksum type %d (only crc32c is defined): %w", t, ErrUnsupported)
		}
		f.csum = true
		f.inodeCsum = le.Uint32(sb[0x48:]) != creatorOSHurd
		if f.incompat&incompatCsumSeed != 0 {
			f.seed = le.Uint32(sb[0x270:])
		} else {
			f.seed = integrity.CRC32CRaw(^uint32(0), sb[0x68:0x78])
		}
	}
	logBS := le.Uint32(sb[0x18:])
	if logBS > 6 { // 1 KiB .. 64 KiB
		return nil, fmt.Errorf("open ext4: block size 2^(10+%d): %w", logBS, ErrCorrupt)
	}
	f.blockSize = 1024 << logBS
	f.inodesCount = uint64(le.Uint32(sb[0x0:]))
	f.firstDataBlock = uint64(le.Uint32(sb[0x14:]))
	f.blocksPerGroup = uint64(le.Uint32(sb[0x20:]))
	f.inodesPerGroup = uint64(le.Uint32(sb[0x28:]))
	f.inodeSize = 128
	if rev >= 1 {
		f.inodeSize = int64(le.Uint16(sb[0x58:]))
		f.sparseSuper = roCompat&0x1 != 0
	}
	if unknown := f.incompat &^ incompatKnown; unknown != 0 {
		return nil, fmt.Errorf("open ext4: incompatible features %#x (%s): %w", unknown, inodefs.FeatureNames(unknown, incompatNamed), ErrUnsupported)
	}
	f.blocksCount = uint64(le.Uint32(sb[0x4:]))
	f.descSize = 32
	if f.incompat&incompat64Bit != 0 {
		f.blocksCount |= uint64(le.Uint32(sb[0x150:])) << 32
		f.descSize = int64(le.Uint16(sb[0xFE:]))
		if f.descSize < 64 || f.descSize > 1024 || f.descSize&(f.descSize-1) != 0 {
			return nil, fmt.Errorf("open ext4: group descriptor size %d: %w", f.descSize, ErrCorrupt)
		}
	}
	f.firstMetaBG = uint64(le.Uint32(sb[0x104:]))
	switch {
	case f.inodeSize < 128 || f.inodeSize > f.blockSize || f.inodeSize&(f.inodeSize-1) != 0:
		return nil, fmt.Errorf("open ext4: inode size %d: %w", f.inodeSize, ErrCorrupt)
	case f.blocksPerGroup == 0 || f.blocksPerGroup > uint64(f.blockSize)*8*16:
		// With bigalloc a group spans up to 16x the bitmap's bits.
		return nil, fmt.Errorf("open ext4: %d blocks per group: %w", f.blocksPerGroup, ErrCorrupt)
	case f.inodesPerGroup == 0 || f.inodesPerGroup > uint64(f.blockSize)*8:
		return nil, fmt.Errorf("open ext4: %d inodes per group: %w", f.inodesPerGroup, ErrCorrupt)
	case f.blocksCount <= f.firstDataBlock || f.firstDataBlock > 1:
		return nil, fmt.Errorf("open ext4: %d blocks, first data block %d: %w", f.blocksCount, f.firstDataBlock, ErrCorrupt)
	case f.blocksCount > uint64(size)/uint64(f.blockSize):
		return nil, fmt.Errorf("open ext4: filesystem of %d blocks of %d bytes exceeds the device's %d bytes (truncated image?): %w",
			f.blocksCount, f.blockSize, size, ErrCorrupt)
	}
	f.groups = (f.blocksCount - f.firstDataBlock + f.blocksPerGroup - 1) / f.blocksPerGroup
	if f.inodesCount == 0 || f.inodesCount > f.groups*f.inodesPerGroup {
		return nil, fmt.Errorf("open ext4: %d inodes in %d groups of %d: %w", f.inodesCount, f.groups, f.inodesPerGroup, ErrCorrupt)
	}
	if f.groups*uint64(f.descSize) > maxGroupDescBytes {
		return nil, fmt.Errorf("open ext4: %d groups: %w", f.groups, ErrUnsupported)
	}
	if err := f.readGroupDescs(sb, roCompat&roCompatGdtCsum != 0); err != nil {
		return nil, fmt.Errorf("open ext4: %w", err)
	}
	// A clean journal only has its superblock verified. Unless the
	// Checker is lenient (recording mismatches in the order they are
	// found), that is done beside reading the root directory, which every
	// use of the filesystem reads first: on a remote disk, one round trip
	// instead of two. Its error still comes first.
	journal := make(chan error, 1)
	beside := f.incompat&incompatRecover == 0 && !check.Lenient()
	if beside {
		go func() { journal <- f.replayJournal(sb) }()
	} else {
		journal <- f.replayJournal(sb)
	}
	// The root must be readable for the filesystem to be of any use; check
	// it now so a corrupt image fails at Open.
	root, err := f.inode(rootIno)
	if err == nil && root.isDir() && beside {
		f.inodes.ReadAhead(".")
	}
	if err := <-journal; err != nil {
		return nil, fmt.Errorf("open ext4: replay journal: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("open ext4: root directory: %w", err)
	}
	if !root.isDir() {
		return nil, fmt.Errorf("open ext4: root inode is not a directory: %w", ErrCorrupt)
	}
	return f, nil
}

// BlockSize returns the filesystem's block size in bytes.
func (f *FS) BlockSize() int64 { return f.blockSize }

// readAt reads len(p) bytes at off, failing with ErrCorrupt when the range
// is not inside the device, through the journal's overlay if any.
func (f *FS) readAt(p []byte, off int64) error {
	if f.journal != nil {
		return f.readOverlaid(p, off)
	}
	return f.readRaw(p, off)
}

// readRaw reads len(p) bytes at off from the device.
func (f *FS) readRaw(p []byte, off int64) error {
	return inodefs.ReadFull(f.r, f.size, p, off, ErrCorrupt)
}

// readBlock reads filesystem block blk into a new block-sized buffer.
func (f *FS) readBlock(blk uint64) ([]byte, error) {
	if blk >= f.blocksCount {
		return nil, fmt.Errorf("block %d past the %d-block filesystem: %w", blk, f.blocksCount, ErrCorrupt)
	}
	b := make([]byte, f.blockSize)
	if err := f.readAt(b, int64(blk)*f.blockSize); err != nil {
		return nil, err
	}
	return b, nil
}

// inodeTable returns the first block of group g's inode table.
func (f *FS) inodeTable(g uint64) (uint64, error) {
	if g >= uint64(len(f.tables)) {
		return 0, fmt.Errorf("group %d of %d: %w", g, f.groups, ErrCorrupt)
	}
	return f.tables[g], nil
}

// descBlock returns the block holding group g's descriptor.
func (f *FS) descBlock(g uint64) uint64 {
	perBlock := uint64(f.blockSize / f.descSize)
	mg := g / perBlock
	if f.incompat&incompatMetaBG != 0 && mg >= f.firstMetaBG {
		// META_BG: the descriptors of a meta group live in the first
		// block of its first group, after a backup superblock if any.
		first := mg * perBlock
		blk := f.firstDataBlock + first*f.blocksPerGroup
		if f.hasSuper(first) {
			blk++
		}
		return blk
	}
	return f.firstDataBlock + 1 + mg
}

// readGroupDescs reads every group descriptor, as the kernel does at
// mount: each must pass its checksum (CRC32C with metadata_csum, CRC16
// with gdtCsum, the uninit_bg feature) and place its inode table inside
// the filesystem. Their inode table locations are kept.
func (f *FS) readGroupDescs(sb []byte, gdtCsum bool) error {
	le := binary.LittleEndian
	perBlock := uint64(f.blockSize / f.descSize)
	f.tables = make([]uint64, f.groups)
	itbPerGroup := (f.inodesPerGroup*uint64(f.inodeSize) + uint64(f.blockSize) - 1) / uint64(f.blockSize)
	var blk []byte
	cur := ^uint64(0)
	var num [4]byte
	hint := int64(maxHintTables)
	for g := range f.groups {
		if db := f.descBlock(g); db != cur {
			var err error
			if blk, err = f.readBlock(db); err != nil {
				return fmt.Errorf("group descriptor block %d: %w", db, err)
			}
			cur = db
		}
		desc := blk[int64(g%perBlock)*f.descSize:][:f.descSize]
		le.PutUint32(num[:], uint32(g))
		switch {
		case f.csum:
			c := integrity.CRC32CRaw(f.seed, num[:])
			c = integrity.CRC32CRaw(c, desc[:0x1E])
			c = integrity.CRC32CRaw(c, []byte{0, 0})
			c = integrity.CRC32CRaw(c, desc[0x20:])
			if uint16(c) != le.Uint16(desc[0x1E:]) {
				if err := f.mismatch(fmt.Sprintf("group descriptor %d in block %d", g, cur), 0); err != nil {
					return err
				}
			}
		case gdtCsum:
			c := integrity.CRC16(0xFFFF, sb[0x68:0x78])
			c = integrity.CRC16(c, num[:])
			c = integrity.CRC16(c, desc[:0x1E])
			if f.incompat&incompat64Bit != 0 {
				c = integrity.CRC16(c, desc[0x20:])
			}
			if c != le.Uint16(desc[0x1E:]) {
				if err := f.mismatch(fmt.Sprintf("group descriptor %d in block %d", g, cur), 0); err != nil {
					return err
				}
			}
		}
		table := uint64(le.Uint32(desc[0x8:]))
		if f.descSize >= 64 {
			table |= uint64(le.Uint32(desc[0x28:])) << 32
		}
		if table == 0 || table >= f.blocksCount || itbPerGroup > f.blocksCount-table {
			return fmt.Errorf("group %d: inode table at block %d: %w", g, table, ErrCorrupt)
		}
		f.tables[g] = table
		if f.hints && hint > 0 {
			hint -= f.hintInodeTable(desc, table, f.csum || gdtCsum, hint)
		}
	}
	return nil
}

// maxHintTables bounds the inode table bytes Open tells the device of.
const maxHintTables = 16 << 20

// hintInodeTable tells the device (readahead.Hint) of the part in use of
// a group's inode table, at block table, up to budget bytes, and returns
// the bytes told of. Every lookup reads an inode before the directory
// block it leads to: with the tables come side by side at Open, a path on
// a remote disk costs one round trip per directory instead of two. In
// use: the inodes before the group's never-used ones (bg_itable_unused,
// kept with uninit_bg or metadata_csum), none when the table was never
// initialised (INODE_UNINIT), all otherwise.
func (f *FS) hintInodeTable(desc []byte, table uint64, uninit bool, budget int64) int64 {
	le := binary.LittleEndian
	used := f.inodesPerGroup
	if uninit {
		unused := uint64(le.Uint16(desc[0x1C:]))
		if f.descSize >= 64 {
			unused |= uint64(le.Uint16(desc[0x32:])) << 16
		}
		switch {
		case le.Uint16(desc[0x12:])&bgInodeUninit != 0:
			used = 0
		case unused <= used:
			used -= unused
		}
	}
	n := min(int64(used)*f.inodeSize, budget)
	if n > 0 {
		readahead.Hint(f.r, int64(table)*f.blockSize, n)
	}
	return n
}

// mismatch reports that structure (of inode ino, 0 for none) fails its
// checksum: an error to return, or nil when the Checker records it and
// reading goes on.
func (f *FS) mismatch(structure string, ino uint64) error {
	m := &integrity.Mismatch{Format: "ext4", Structure: structure, Ino: ino, Corrupt: ErrCorrupt}
	if f.check.Lenient() && ino != 0 && f.inodes != nil {
		m.Path = f.inodes.PathOf(ino)
	}
	return f.check.Fail(m)
}

// hasSuper reports whether group g holds a superblock backup: every group
// does without sparse_super; with it only groups 0, 1 and powers of 3, 5
// and 7 do.
func (f *FS) hasSuper(g uint64) bool {
	if g <= 1 || !f.sparseSuper {
		return true
	}
	for _, p := range []uint64{3, 5, 7} {
		n := p
		for n < g {
			n *= p
		}
		if n == g {
			return true
		}
	}
	return false
}
