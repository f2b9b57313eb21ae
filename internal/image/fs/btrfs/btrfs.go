// Package btrfs owns a read-only reader of single-device btrfs filesystems
// held in an io.ReaderAt: a disk image, a partition, a logical volume. It
// never mounts anything, needs no privileges, never writes, and reads only
// the tree blocks a lookup needs.
//
// [FS] is a rootfs.Source: it never follows symbolic links itself; the
// rootfs view above it resolves them with chroot semantics.
//
// # What it reads
//
// The primary superblock (at 64 KiB), the system chunk array and the chunk
// tree (logical to physical mapping of SINGLE and DUP chunks), the root
// tree, and the fs trees of subvolumes: inode items, directory index items
// and file extents (inline, regular, preallocated, holes explicit or
// implicit under NO_HOLES; zlib, LZO and zstd compressed). A directory
// entry naming a subvolume is crossed into it as the kernel shows it.
//
// # Which subvolume is the root
//
// The default subvolume (the root tree's "default" entry, 5 unless set with
// btrfs subvolume set-default) when it holds os-release (etc/os-release or
// usr/lib/os-release); otherwise the one subvolume that does (Fedora: the
// top level is the default and the OS is in subvolume "root"). Several such
// subvolumes and none the default: the one whose own etc/fstab mounts it
// at / (subvol= naming its path, or subvolid= its id; a snapshot keeps its
// origin's fstab, naming the origin), else an error naming them, since
// which one boots is decided by the kernel command line
// (rootflags=subvol=), not by the filesystem.
//
// # Checksums
//
// The superblock's and every tree block's checksum (crc32c, xxhash64,
// sha256 or blake2b, as the superblock says) are verified when first read,
// along with the block's recorded logical address, filesystem UUID and
// level. A mismatch is an [integrity.Mismatch], which wraps ErrCorrupt,
// unless the [integrity.Checker] given to OpenWith is lenient: then it is
// recorded and the block is read as stored. A block of a DUP chunk whose
// first copy fails these checks is read from its second, as the kernel
// does, and [FS.Repaired] says so. The data a read returns is checked
// against the checksum tree, sector by sector, as the kernel checks a data
// read (a compressed extent as stored); a nodatasum file, or a sector the
// tree holds no checksum for, is read as it is.
//
// # Hostile input
//
// Images are untrusted. Every offset and length read is checked against
// the device, the node and the item before use; trees are descended with
// strictly decreasing levels and each child's keys within its parent's
// range, so a search cannot cycle or revisit; decompressed sizes are
// bounded by btrfs's 128 KiB compressed extent; every inconsistency is an
// error wrapping [ErrCorrupt]. RAID profiles, several devices and
// incompatible features this reader does not implement are refused with
// [ErrUnsupported].
package btrfs

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"
	"golang.org/x/crypto/blake2b"

	"github.com/amilint/amilint/internal/image/fs/inodefs"
	"github.com/amilint/amilint/internal/image/integrity"
)

// ErrCorrupt reports an image whose btrfs structures are inconsistent or
// point outside the device.
var ErrCorrupt = errors.New("corrupt btrfs filesystem")

// ErrUnsupported reports a btrfs feature this reader does not implement.
var ErrUnsupported = errors.New("unsupported btrfs feature")

var le = binary.LittleEndian

// Superblock geometry.
const (
	superOff     = 65536
	superSize    = 4096
	magic        = "_BHRfS_M"
	headerSize   = 101 // struct btrfs_header
	keySize      = 17  // struct btrfs_disk_key
	itemSize     = 25  // struct btrfs_item: key, offset, size
	keyPtrSize   = 33  // struct btrfs_key_ptr: key, blockptr, generation
	maxLevel     = 8   // BTRFS_MAX_LEVEL
	sysArrayMax  = 2048
	chunkItemLen = 48 // struct btrfs_chunk without its stripes
	stripeLen    = 32 // struct btrfs_stripe
)

// Item types (BTRFS_*_KEY).
const (
	typeInodeItem  = 1
	typeDirItem    = 84
	typeDirIndex   = 96
	typeExtentData = 108
	typeRootItem   = 132
	typeRootRef    = 156
	typeChunkItem  = 228
)

// Object ids.
const (
	rootTreeObjectid   = 1
	chunkTreeObjectid  = 3
	fsTreeObjectid     = 5
	rootTreeDirObjid   = 6
	firstFreeObjectid  = 256
	lastFreeObjectid   = 1<<64 - 256 // BTRFS_LAST_FREE_OBJECTID, -256
	emptySubvolDirObjc = 2           // BTRFS_EMPTY_SUBVOL_DIR_OBJECTID
)

// Incompatible features (BTRFS_FEATURE_INCOMPAT_*).
const (
	incompatMixedBackref  = 1 << 0
	incompatDefaultSubvol = 1 << 1
	incompatMixedGroups   = 1 << 2
	incompatCompressLZO   = 1 << 3
	incompatCompressZstd  = 1 << 4
	incompatBigMetadata   = 1 << 5
	incompatExtendedIref  = 1 << 6
	incompatRAID56        = 1 << 7
	incompatSkinnyMeta    = 1 << 8
	incompatNoHoles       = 1 << 9
	incompatMetadataUUID  = 1 << 10
	incompatRAID1C34      = 1 << 11
	incompatZoned         = 1 << 12
	incompatExtentTreeV2  = 1 << 13
	incompatRaidStripe    = 1 << 14
	incompatSimpleQuota   = 1 << 16
	incompatKnown         = incompatMixedBackref | incompatDefaultSubvol | incompatMixedGroups |
		incompatCompressLZO | incompatCompressZstd | incompatBigMetadata | incompatExtendedIref |
		incompatSkinnyMeta | incompatNoHoles | incompatMetadataUUID | incompatRAID1C34 | incompatSimpleQuota
)

// incompatNamed names the incompatible features as btrfs inspect-internal
// dump-super spells them.
var incompatNamed = map[uint64]string{
	incompatMixedBackref:  "MIXED_BACKREF",
	incompatDefaultSubvol: "DEFAULT_SUBVOL",
	incompatMixedGroups:   "MIXED_GROUPS",
	incompatCompressLZO:   "COMPRESS_LZO",
	incompatCompressZstd:  "COMPRESS_ZSTD",
	incompatBigMetadata:   "BIG_METADATA",
	incompatExtendedIref:  "EXTENDED_IREF",
	incompatRAID56:        "RAID56",
	incompatSkinnyMeta:    "SKINNY_METADATA",
	incompatNoHoles:       "NO_HOLES",
	incompatMetadataUUID:  "METADATA_UUID",
	incompatRAID1C34:      "RAID1C34",
	incompatZoned:         "ZONED",
	incompatExtentTreeV2:  "EXTENT_TREE_V2",
	incompatRaidStripe:    "RAID_STRIPE_TREE",
	incompatSimpleQuota:   "SIMPLE_QUOTA",
}

// Chunk type and profile bits (BTRFS_BLOCK_GROUP_*).
const (
	bgDUP      = 1 << 5
	bgProfiles = 1<<3 | 1<<4 | 1<<5 | 1<<6 | 1<<7 | 1<<8 | 1<<9 | 1<<10
)

var profileNamed = map[uint64]string{
	1 << 3: "raid0", 1 << 4: "raid1", 1 << 6: "raid10", 1 << 7: "raid5",
	1 << 8: "raid6", 1 << 9: "raid1c3", 1 << 10: "raid1c4",
}

// Checksum types (BTRFS_CSUM_TYPE_*).
const (
	csumCRC32C   = 0
	csumXXHash   = 1
	csumSHA256   = 2
	csumBLAKE2b  = 3
	csumStoreMax = 32
)

var csumNamed = map[uint16]string{csumCRC32C: "crc32c", csumXXHash: "xxhash64", csumSHA256: "sha256", csumBLAKE2b: "blake2b"}

// key is a btrfs key: objectid, type, offset, in that order of comparison.
type key struct {
	obj uint64
	typ uint8
	off uint64
}

func readKey(b []byte) key {
	return key{obj: le.Uint64(b), typ: b[8], off: le.Uint64(b[9:])}
}

func (k key) cmp(o key) int {
	switch {
	case k.obj != o.obj:
		return cmp.Compare(k.obj, o.obj)
	case k.typ != o.typ:
		return cmp.Compare(uint64(k.typ), uint64(o.typ))
	}
	return cmp.Compare(k.off, o.off)
}

var maxKey = key{obj: 1<<64 - 1, typ: 255, off: 1<<64 - 1}

// chunk maps logical [logical, logical+length) to physical bytes, and
// for a DUP chunk to its second copy too (mirror; 0: none, as no chunk
// lies in the first MiB).
type chunk struct {
	logical, length, physical, mirror uint64
}

// FS is a read-only btrfs filesystem. It implements rootfs.Source
// (fs.ReadDirFS and fs.ReadLinkFS) and is safe for concurrent use when its
// io.ReaderAt is. Its Open, ReadDir, ReadFile, Lstat and ReadLink are those
// of [inodefs.FS], which never follows links.
type FS struct {
	*inodes

	r    io.ReaderAt
	size int64

	nodeSize   int64
	sectorSize int64
	csumType   uint16
	fsid       [16]byte // what tree block headers record (metadata_uuid when set)
	incompat   uint64
	devid      uint64
	logRoot    uint64

	chunks []chunk // sorted by logical

	rootTree  tree
	chunkTree tree
	csumTree  *tree // nil: none, data is not verified

	// check decides what a checksum mismatch does; nil: it is an error.
	check *integrity.Checker

	mu      sync.Mutex
	nodes   map[uint64][]byte // verified tree blocks by logical address
	subvols []*subvol         // by index, as inode numbers encode them
	byID    map[uint64]int    // subvolume id to index

	lastExtent extentKey // the compressed extent last decompressed
	lastData   []byte

	warnings []string // see Warnings

	rootSub *subvol // the subvolume shown as /
	subName string  // its path in the filesystem, for Subvolume
}

// tree is a B-tree's root block.
type tree struct {
	id    uint64 // the tree's objectid, for messages
	block uint64
	level uint8
}

// subvol is one subvolume: its fs tree and root directory.
type subvol struct {
	id     uint64
	idx    int
	tree   tree
	rootID uint64 // its root directory's inode objectid (256)
}

// Probe reports whether r holds a btrfs superblock magic at 64 KiB.
func Probe(r io.ReaderAt) bool {
	var b [8]byte
	if _, err := r.ReadAt(b[:], superOff+64); err != nil {
		return false
	}
	return string(b[:]) == magic
}

// Open reads the btrfs filesystem in r, which holds size bytes. Every
// checksum mismatch is an error.
func Open(r io.ReaderAt, size int64) (*FS, error) { return OpenWith(r, size, nil) }

// OpenWith is Open with check deciding what a checksum mismatch does (nil:
// it is an error).
func OpenWith(r io.ReaderAt, size int64, check *integrity.Checker) (*FS, error) {
	f := &FS{r: r, size: size, check: check, nodes: map[uint64][]byte{}, byID: map[uint64]int{}}
	f.inodes = inodefs.New[*inode](disk{f})
	if err := f.readSuper(); err != nil {
		return nil, fmt.Errorf("open btrfs: %w", err)
	}
	if err := f.readChunkTree(); err != nil {
		return nil, fmt.Errorf("open btrfs: chunk tree: %w", err)
	}
	if err := f.findCsumTree(); err != nil {
		return nil, fmt.Errorf("open btrfs: %w", err)
	}
	if err := f.chooseRoot(); err != nil {
		return nil, fmt.Errorf("open btrfs: %w", err)
	}
	if check.Lenient() {
		f.inodes.TrackPaths()
		f.inodes.OnDamage(func(path string, err error) {
			check.Record(fmt.Sprintf("%s: %s cannot be read, skipped (%v)", "btrfs", path, err))
		})
	}
	return f, nil
}

// readSuper reads and checks the primary superblock, and maps the system
// chunks its sys_chunk_array holds.
func (f *FS) readSuper() error {
	sb := make([]byte, superSize)
	if err := f.readAt(sb, superOff); err != nil {
		return fmt.Errorf("read superblock: %w", err)
	}
	if string(sb[0x40:0x48]) != magic {
		return fmt.Errorf("bad superblock magic %q: %w", sb[0x40:0x48], ErrCorrupt)
	}
	f.csumType = le.Uint16(sb[0xc4:])
	if _, ok := csumNamed[f.csumType]; !ok {
		return fmt.Errorf("checksum type %d: %w", f.csumType, ErrUnsupported)
	}
	if !f.csumOK(sb, superSize) {
		if err := f.mismatch("superblock at 65536", 0); err != nil {
			return err
		}
	}
	if got := le.Uint64(sb[0x30:]); got != superOff {
		return fmt.Errorf("superblock records its place as %d: %w", got, ErrCorrupt)
	}
	f.incompat = le.Uint64(sb[0xbc:])
	if unknown := f.incompat &^ incompatKnown; unknown != 0 {
		return fmt.Errorf("incompatible features %#x (%s): %w", unknown, inodefs.FeatureNames(unknown, incompatNamed), ErrUnsupported)
	}
	if n := le.Uint64(sb[0x88:]); n != 1 {
		return fmt.Errorf("a filesystem on %d devices (only single-device filesystems are read): %w", n, ErrUnsupported)
	}
	f.sectorSize = int64(le.Uint32(sb[0x90:]))
	f.nodeSize = int64(le.Uint32(sb[0x94:]))
	switch {
	case f.sectorSize < 4096 || f.sectorSize > 65536 || f.sectorSize&(f.sectorSize-1) != 0:
		return fmt.Errorf("sector size %d: %w", f.sectorSize, ErrCorrupt)
	case f.nodeSize < f.sectorSize || f.nodeSize > 65536 || f.nodeSize&(f.nodeSize-1) != 0:
		return fmt.Errorf("node size %d: %w", f.nodeSize, ErrCorrupt)
	}
	copy(f.fsid[:], sb[0x20:0x30])
	if f.incompat&incompatMetadataUUID != 0 {
		copy(f.fsid[:], sb[0x23b:0x24b])
	}
	f.devid = le.Uint64(sb[0xc9:])
	f.logRoot = le.Uint64(sb[0x60:])
	f.rootTree = tree{id: rootTreeObjectid, block: le.Uint64(sb[0x50:]), level: sb[0xc6]}
	arr := le.Uint32(sb[0xa0:])
	if arr > sysArrayMax {
		return fmt.Errorf("system chunk array of %d bytes: %w", arr, ErrCorrupt)
	}
	b := sb[0x32b : 0x32b+arr]
	var sys []chunk
	for len(b) > 0 {
		if len(b) < keySize {
			return fmt.Errorf("system chunk array: %d bytes left: %w", len(b), ErrCorrupt)
		}
		k := readKey(b)
		if k.typ != typeChunkItem {
			return fmt.Errorf("system chunk array: item type %d: %w", k.typ, ErrCorrupt)
		}
		c, n, err := f.parseChunk(k, b[keySize:])
		if err != nil {
			return fmt.Errorf("system chunk array: %w", err)
		}
		sys = append(sys, c)
		b = b[keySize+n:]
	}
	if err := f.setChunks(sys); err != nil {
		return fmt.Errorf("system chunk array: %w", err)
	}
	f.chunkTree = tree{id: chunkTreeObjectid, block: le.Uint64(sb[0x58:]), level: sb[0xc7]}
	return nil
}

// maxChunks bounds the chunks a filesystem maps (a 16 TiB filesystem of
// 1 GiB data chunks has some 16 thousand).
const maxChunks = 1 << 16

// parseChunk parses one chunk item in b, for logical address k.off, and
// returns it and its size.
func (f *FS) parseChunk(k key, b []byte) (chunk, int, error) {
	if len(b) < chunkItemLen {
		return chunk{}, 0, fmt.Errorf("chunk at %d: %d bytes: %w", k.off, len(b), ErrCorrupt)
	}
	length := le.Uint64(b)
	typ := le.Uint64(b[24:])
	stripes := int(le.Uint16(b[44:]))
	n := chunkItemLen + stripes*stripeLen
	if stripes == 0 || len(b) < n {
		return chunk{}, 0, fmt.Errorf("chunk at %d: %d stripes in %d bytes: %w", k.off, stripes, len(b), ErrCorrupt)
	}
	if p := typ & bgProfiles &^ bgDUP; p != 0 {
		var names []string
		for bit, name := range profileNamed {
			if p&bit != 0 {
				names = append(names, name)
			}
		}
		return chunk{}, 0, fmt.Errorf("chunk at %d has a %s profile (only single and dup are read): %w", k.off, strings.Join(names, ","), ErrUnsupported)
	}
	if want := 1 + int(typ&bgDUP>>5); stripes != want {
		return chunk{}, 0, fmt.Errorf("chunk at %d: %d stripes for its profile: %w", k.off, stripes, ErrCorrupt)
	}
	s := b[chunkItemLen:]
	devid, phys := le.Uint64(s), le.Uint64(s[8:])
	if devid != f.devid {
		return chunk{}, 0, fmt.Errorf("chunk at %d on device %d, not this one (%d): %w", k.off, devid, f.devid, ErrUnsupported)
	}
	if length == 0 || k.off+length < k.off || phys+length < phys || phys+length > uint64(f.size) {
		return chunk{}, 0, fmt.Errorf("chunk at %d of %d bytes at physical %d outside the %d-byte device: %w", k.off, length, phys, f.size, ErrCorrupt)
	}
	c := chunk{logical: k.off, length: length, physical: phys}
	if stripes == 2 {
		s2 := s[stripeLen:]
		devid2, phys2 := le.Uint64(s2), le.Uint64(s2[8:])
		if devid2 != f.devid || phys2 == 0 || phys2+length < phys2 || phys2+length > uint64(f.size) {
			return chunk{}, 0, fmt.Errorf("chunk at %d: second copy at physical %d on device %d: %w", k.off, phys2, devid2, ErrCorrupt)
		}
		c.mirror = phys2
	}
	return c, n, nil
}

// setChunks sorts cs into the chunk map, refusing overlaps (a chunk the
// chunk tree repeats from the system chunk array counts once).
func (f *FS) setChunks(cs []chunk) error {
	if len(cs) > maxChunks {
		return fmt.Errorf("over %d chunks: %w", maxChunks, ErrCorrupt)
	}
	slices.SortFunc(cs, func(a, b chunk) int { return cmp.Compare(a.logical, b.logical) })
	out := cs[:0]
	for _, c := range cs {
		if len(out) > 0 {
			o := out[len(out)-1]
			if o == c {
				continue
			}
			if c.logical < o.logical+o.length {
				return fmt.Errorf("chunk at %d overlaps the chunk at %d: %w", c.logical, o.logical, ErrCorrupt)
			}
		}
		out = append(out, c)
	}
	f.mu.Lock()
	f.chunks = out
	f.mu.Unlock()
	return nil
}

// readChunkTree maps every chunk the chunk tree lists, beside the system
// chunks it is read through.
func (f *FS) readChunkTree() error {
	var err error
	all := slices.Clone(f.chunks)
	serr := f.search(f.chunkTree, key{typ: 0}, maxKey, func(k key, b []byte) bool {
		if k.typ != typeChunkItem {
			return true
		}
		if len(all) > maxChunks {
			err = fmt.Errorf("over %d chunks: %w", maxChunks, ErrCorrupt)
			return false
		}
		var c chunk
		c, _, err = f.parseChunk(k, b)
		all = append(all, c)
		return err == nil
	})
	if err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	return f.setChunks(all)
}

// physical maps n bytes at logical address l to the device.
func (f *FS) physical(l uint64, n int64) (int64, error) {
	at, _, err := f.copies(l, n)
	return at, err
}

// copies maps n bytes at logical address l to the device: where they are,
// and where their second copy is in a DUP chunk (-1: none).
func (f *FS) copies(l uint64, n int64) (int64, int64, error) {
	c, ok := f.chunkAt(l)
	if !ok || uint64(n) > c.logical+c.length-l {
		return 0, -1, fmt.Errorf("logical address %d (%d bytes) in no chunk: %w", l, n, ErrCorrupt)
	}
	mirror := int64(-1)
	if c.mirror != 0 {
		mirror = int64(c.mirror + (l - c.logical))
	}
	return int64(c.physical + (l - c.logical)), mirror, nil
}

// readLogical reads len(p) bytes at logical address l.
func (f *FS) readLogical(p []byte, l uint64) error {
	// A range may span chunks that are adjacent in the logical space.
	for len(p) > 0 {
		c, ok := f.chunkAt(l)
		if !ok {
			return fmt.Errorf("logical address %d in no chunk: %w", l, ErrCorrupt)
		}
		n := min(int64(len(p)), int64(c.logical+c.length-l))
		if err := f.readAt(p[:n], int64(c.physical+(l-c.logical))); err != nil {
			return err
		}
		p, l = p[n:], l+uint64(n)
	}
	return nil
}

// chunkAt returns the chunk holding logical address l.
func (f *FS) chunkAt(l uint64) (chunk, bool) {
	f.mu.Lock()
	chunks := f.chunks
	f.mu.Unlock()
	i, _ := slices.BinarySearchFunc(chunks, l, func(c chunk, l uint64) int {
		if c.logical+c.length <= l {
			return -1
		}
		if c.logical > l {
			return 1
		}
		return 0
	})
	if i == len(chunks) || chunks[i].logical > l || l-chunks[i].logical >= chunks[i].length {
		return chunk{}, false
	}
	return chunks[i], true
}

// readAt reads len(p) bytes at physical offset off.
func (f *FS) readAt(p []byte, off int64) error {
	return inodefs.ReadFull(f.r, f.size, p, off, ErrCorrupt)
}

// csumOK checks the checksum at the start of block b (its first 32
// bytes), over b[32:n], of the filesystem's checksum type.
func (f *FS) csumOK(b []byte, n int) bool {
	sum := f.sum(b[csumStoreMax:n])
	return sum != nil && bytes.Equal(sum, b[:len(sum)])
}

// sum is data's checksum of the filesystem's type, as stored.
func (f *FS) sum(data []byte) []byte {
	switch f.csumType {
	case csumCRC32C:
		return le.AppendUint32(nil, integrity.CRC32C(data))
	case csumXXHash:
		return le.AppendUint64(nil, xxhash.Sum64(data))
	case csumSHA256:
		s := sha256.Sum256(data)
		return s[:]
	case csumBLAKE2b:
		s := blake2b.Sum256(data)
		return s[:]
	}
	return nil
}

// csumSize is the size of one stored checksum.
func (f *FS) csumSize() int {
	switch f.csumType {
	case csumCRC32C:
		return 4
	case csumXXHash:
		return 8
	}
	return 32
}

// mismatch handles a structure failing its checksum.
func (f *FS) mismatch(what string, ino uint64) error {
	return f.check.Fail(&integrity.Mismatch{Format: "btrfs", Structure: what, Corrupt: ErrCorrupt, Ino: ino})
}

// maxNodes bounds the verified tree blocks kept in memory.
const maxNodes = 1 << 12

// node reads the tree block at logical address l, of tree t, expected at
// level; its checksum, address, fsid and level are checked.
func (f *FS) node(t tree, l uint64, level uint8) ([]byte, error) {
	f.mu.Lock()
	b, ok := f.nodes[l]
	f.mu.Unlock()
	if !ok {
		at, mirror, err := f.copies(l, f.nodeSize)
		if err != nil {
			return nil, fmt.Errorf("tree block %d: %w", l, err)
		}
		b = make([]byte, f.nodeSize)
		if err := f.readAt(b, at); err != nil {
			return nil, fmt.Errorf("tree block %d: %w", l, err)
		}
		bad := f.blockFault(b, l)
		if bad != nil && mirror >= 0 {
			// The kernel reads a DUP block's other copy when one fails
			// its checks (btrfs_read_extent_buffer tries each mirror).
			b2 := make([]byte, f.nodeSize)
			if f.readAt(b2, mirror) == nil && f.blockFault(b2, l) == nil {
				f.warn(fmt.Sprintf("btrfs: tree block %d (%s): the first copy fails its checks (%v), read from the second", l, treeName(t.id), bad))
				b, bad = b2, nil
			}
		}
		if bad != nil {
			if errors.Is(bad, integrity.ErrChecksum) {
				if err := f.mismatch(fmt.Sprintf("tree block %d (%s)", l, treeName(t.id)), 0); err != nil {
					return nil, err
				}
				bad = f.headerFault(b, l)
			}
			if bad != nil {
				return nil, bad
			}
		}
		f.mu.Lock()
		if len(f.nodes) >= maxNodes {
			f.nodes = map[uint64][]byte{}
		}
		f.nodes[l] = b
		f.mu.Unlock()
	}
	if b[0x64] != level {
		return nil, fmt.Errorf("tree block %d at level %d, expected %d: %w", l, b[0x64], level, ErrCorrupt)
	}
	return b, nil
}

// blockFault checks tree block b read for logical address l: its
// checksum (an error wrapping integrity.ErrChecksum), then its recorded
// address and filesystem UUID (ErrCorrupt).
func (f *FS) blockFault(b []byte, l uint64) error {
	if !f.csumOK(b, len(b)) {
		return integrity.ErrChecksum
	}
	return f.headerFault(b, l)
}

// headerFault checks tree block b's recorded address and filesystem UUID.
func (f *FS) headerFault(b []byte, l uint64) error {
	switch {
	case le.Uint64(b[0x30:]) != l:
		return fmt.Errorf("tree block %d records its place as %d: %w", l, le.Uint64(b[0x30:]), ErrCorrupt)
	case [16]byte(b[0x20:0x30]) != f.fsid:
		return fmt.Errorf("tree block %d records another filesystem's fsid %x: %w", l, b[0x20:0x30], ErrCorrupt)
	}
	return nil
}

// maxWarnings bounds the warnings kept.
const maxWarnings = 20

// warn records a warning line, once.
func (f *FS) warn(line string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.warnings) < maxWarnings && !slices.Contains(f.warnings, line) {
		f.warnings = append(f.warnings, line)
	}
}

func treeName(id uint64) string {
	switch id {
	case rootTreeObjectid:
		return "root tree"
	case chunkTreeObjectid:
		return "chunk tree"
	}
	return fmt.Sprintf("fs tree %d", id)
}

// maxVisits bounds the tree blocks one search reads.
const maxVisits = 1 << 16

// search calls fn with every item of tree t whose key is in [lo, hi], in
// key order, until fn returns false. The item's data is a slice of the
// block, valid until fn returns.
func (f *FS) search(t tree, lo, hi key, fn func(k key, data []byte) bool) error {
	if t.level >= maxLevel {
		return fmt.Errorf("%s at level %d: %w", treeName(t.id), t.level, ErrCorrupt)
	}
	visits := 0
	_, err := f.walk(t, t.block, t.level, nil, nil, lo, hi, fn, &visits)
	return err
}

// walk searches the block at l, at level, whose keys must lie in
// [min, max) (nil: unbounded) and whose first key must be min when given.
// It returns false when fn stopped the search.
func (f *FS) walk(t tree, l uint64, level uint8, minK, maxK *key, lo, hi key, fn func(key, []byte) bool, visits *int) (bool, error) {
	if *visits++; *visits > maxVisits {
		return false, fmt.Errorf("%s: over %d blocks in one search: %w", treeName(t.id), maxVisits, ErrCorrupt)
	}
	b, err := f.node(t, l, level)
	if err != nil {
		return false, err
	}
	n := int(le.Uint32(b[0x60:]))
	body := b[headerSize:]
	entry := itemSize
	if level > 0 {
		entry = keyPtrSize
	}
	if n > len(body)/entry {
		return false, fmt.Errorf("tree block %d: %d items: %w", l, n, ErrCorrupt)
	}
	keyAt := func(i int) key { return readKey(body[i*entry:]) }
	// The keys must be strictly increasing and within the parent's range,
	// the first equal to the parent's pointer (btrfs_verify_level_key).
	for i := range n {
		k := keyAt(i)
		if i > 0 && keyAt(i-1).cmp(k) >= 0 ||
			i == 0 && minK != nil && k.cmp(*minK) != 0 ||
			maxK != nil && k.cmp(*maxK) >= 0 {
			return false, fmt.Errorf("tree block %d: key %d out of order: %w", l, i, ErrCorrupt)
		}
	}
	if level == 0 {
		for i := range n {
			k := keyAt(i)
			if k.cmp(lo) < 0 {
				continue
			}
			if k.cmp(hi) > 0 {
				return false, nil
			}
			off, size := int(le.Uint32(body[i*entry+keySize:])), int(le.Uint32(body[i*entry+keySize+4:]))
			if off < n*itemSize || size > len(body) || off > len(body)-size {
				return false, fmt.Errorf("tree block %d: item %d at %d of %d bytes: %w", l, i, off, size, ErrCorrupt)
			}
			if !fn(k, body[off:off+size:off+size]) {
				return false, nil
			}
		}
		return true, nil
	}
	for i := range n {
		k := keyAt(i)
		var next *key
		if i+1 < n {
			nk := keyAt(i + 1)
			next = &nk
		} else {
			next = maxK
		}
		if next != nil && next.cmp(lo) <= 0 {
			continue
		}
		if k.cmp(hi) > 0 {
			return false, nil
		}
		child := le.Uint64(body[i*entry+keySize:])
		more, err := f.walk(t, child, level-1, &k, next, lo, hi, fn, visits)
		if err != nil || !more {
			return false, err
		}
	}
	return true, nil
}

// lookup returns the item of tree t with key k exactly, or nil.
func (f *FS) lookup(t tree, k key) ([]byte, error) {
	var got []byte
	err := f.search(t, k, k, func(_ key, b []byte) bool {
		got = append([]byte(nil), b...)
		return false
	})
	return got, err
}
