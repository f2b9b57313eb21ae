package vdisk

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/image/integrity"
)

// VHDX structures, from Microsoft's [MS-VHDX] specification.
const (
	vhdxHeader1      = 64 << 10
	vhdxHeader2      = 128 << 10
	vhdxRegion1      = 192 << 10
	vhdxRegion2      = 256 << 10
	vhdxRegionSize   = 64 << 10
	vhdxHeaderSize   = 4 << 10
	vhdxMaxRegions   = 2047
	vhdxMaxMetaItems = 2047

	vhdxNotPresent = 0
	vhdxUndefined  = 1
	vhdxZero       = 2
	vhdxUnmapped   = 3
	vhdxFull       = 6
	vhdxPartial    = 7
)

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)

	vhdxBATGUID       = guid("2DC27766-F623-4200-9D64-115E9BFD4A08")
	vhdxMetadataGUID  = guid("8B7CA206-4790-4B9A-B8FE-575F050F886E")
	vhdxFileParamGUID = guid("CAA16737-FA36-4D43-B3B6-33F0AA44E76B")
	vhdxDiskSizeGUID  = guid("2FA54224-CD1B-4876-B211-5DBED83BF4B8")
	vhdxLogicalGUID   = guid("8141BF1D-A96F-4709-BA47-F233A8FAAB5F")
	vhdxParentGUID    = guid("A8D35F2D-B30B-454D-ABF7-D3D84834AB0C")
	vhdxLocatorGUID   = guid("B04AEFB7-D19E-4A81-B789-25B8E9445913")
	vhdxPage83GUID    = guid("BECA12AB-B2E6-4523-93EF-C309E000C746")
	vhdxPhysicalGUID  = guid("CDA348C7-445D-4471-9CC9-E9885251C556")
)

// vhdxMaxLocatorEntries bounds the parent locator's key-value entries.
const vhdxMaxLocatorEntries = 256

// parseGUID reads a textual GUID, with or without braces, into its
// on-disk bytes; ok is false when s is not one.
func parseGUID(s string) (b [16]byte, ok bool) {
	s = strings.TrimSuffix(strings.TrimPrefix(s, "{"), "}")
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return b, false
	}
	for i, c := range s {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			continue
		}
		if !strings.ContainsRune("0123456789abcdefABCDEF", c) {
			return b, false
		}
	}
	return guid(s), true
}

// guid returns the on-disk (mixed-endian) bytes of a textual GUID.
func guid(s string) [16]byte {
	var b [16]byte
	hex := func(c byte) byte {
		switch {
		case c >= '0' && c <= '9':
			return c - '0'
		case c >= 'a' && c <= 'f':
			return c - 'a' + 10
		default:
			return c - 'A' + 10
		}
	}
	var raw []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '-' {
			continue
		}
		raw = append(raw, hex(s[i])<<4|hex(s[i+1]))
		i++
	}
	copy(b[:], raw)
	// Data1, Data2 and Data3 are little-endian on disk.
	b[0], b[1], b[2], b[3] = raw[3], raw[2], raw[1], raw[0]
	b[4], b[5] = raw[5], raw[4]
	b[6], b[7] = raw[7], raw[6]
	return b
}

// vhdxDisk is the guest disk of a VHDX file.
type vhdxDisk struct {
	r          io.ReaderAt
	fileSize   int64
	size       int64
	blockSize  int64
	chunkRatio int64
	sector     int64
	bat        []uint64
	dataWrite  [16]byte
	// parent is set for a differencing disk: blocks not present, and the
	// sectors of partially present blocks whose bitmap bit is clear, are
	// read from it.
	parent  Disk
	bitmaps *lru[[]byte]
	// warns says which copy of a header or region table was read when
	// the other fails.
	warns []string
}

func (d *vhdxDisk) warnings() []string { return d.warns }

// identity lets a differencing child check that it was given its parent.
func (d *vhdxDisk) identity() (string, [16]byte) { return "vhdx data write guid", d.dataWrite }

func vhdxCRC(b []byte) uint32 {
	c := make([]byte, len(b))
	copy(c, b)
	c[4], c[5], c[6], c[7] = 0, 0, 0, 0
	return crc32.Checksum(c, castagnoli)
}

// OpenVHDX opens a VHDX file. A differencing disk needs parent, its
// parent's guest disk; without it Open fails with ErrBacking naming the
// parent as its parent locator records it. The entries of a log not yet
// applied (a file not closed cleanly) are applied in memory first, each
// only when it passes its CRC32C, as qemu applies them; Warnings says so.
//
// The two headers and the two region tables carry CRC32Cs: of the headers
// the valid one with the higher sequence number is read, of the region
// tables the first valid one, as qemu does; reading another copy than the
// current because one fails is said in Warnings. When no copy passes, the
// mismatch is an integrity.Mismatch wrapping ErrCorrupt. Payload blocks
// must lie clear of the headers, the log, the BAT, the metadata and one
// another (qemu-img check makes the first checks).
func OpenVHDX(r io.ReaderAt, fileSize int64, parent Disk) (Disk, error) {
	return openVHDX(r, fileSize, parent, nil)
}

// vhdxMismatch is the error of a VHDX structure that fails its CRC32C.
func vhdxMismatch(structure string) *integrity.Mismatch {
	return &integrity.Mismatch{Format: "vhdx", Structure: structure, Corrupt: ErrCorrupt}
}

// vhdxCopy is one copy of a redundant VHDX structure as read.
type vhdxCopy struct {
	name string // "header 1 at 64 KiB"
	b    []byte // nil when it could not be read or has no signature
	ok   bool   // its CRC32C matches
}

// vhdxCopies reads the copies of a structure of size bytes at offs, each
// valid when it starts with sig and its CRC32C matches. An I/O error is
// returned; a copy cut by the end of the file is only invalid.
func vhdxCopies(r io.ReaderAt, fileSize int64, what, sig string, size int64, offs []int64) ([]vhdxCopy, error) {
	var cs []vhdxCopy
	for i, off := range offs {
		c := vhdxCopy{name: fmt.Sprintf("%s %d at %d KiB", what, i+1, off>>10)}
		b := make([]byte, size)
		if err := readFull(r, fileSize, b, off, "vhdx "+what); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				return nil, err // an I/O error is not "no valid copy"
			}
		} else if string(b[:4]) == sig {
			c.b, c.ok = b, binary.LittleEndian.Uint32(b[4:]) == vhdxCRC(b)
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// pick returns the copy of cs to read (best among the valid ones), a
// warning when a copy that has the signature fails its checksum, or, when
// none is valid, the copy with a signature that check lets through, or
// the error.
func vhdxPick(cs []vhdxCopy, best func(a, b []byte) bool, check *integrity.Checker, what string) ([]byte, string, error) {
	var pick *vhdxCopy
	for i := range cs {
		if cs[i].ok && (pick == nil || best(cs[i].b, pick.b)) {
			pick = &cs[i]
		}
	}
	if pick != nil {
		var warn string
		for _, c := range cs {
			if c.b != nil && !c.ok {
				warn = fmt.Sprintf("vhdx: %s fails its checksum: %s was read", c.name, pick.name)
			}
		}
		return pick.b, warn, nil
	}
	for _, c := range cs {
		if c.b != nil {
			if err := check.Fail(vhdxMismatch(c.name)); err != nil {
				return nil, "", err
			}
			return c.b, "", nil
		}
	}
	return nil, "", corruptf("vhdx: no valid %s", what)
}

func openVHDX(r io.ReaderAt, fileSize int64, parent Disk, check *integrity.Checker) (Disk, error) {
	le := binary.LittleEndian
	var sig [8]byte
	if err := readFull(r, fileSize, sig[:], 0, "vhdx file identifier"); err != nil {
		return nil, err
	}
	if string(sig[:]) != "vhdxfile" {
		return nil, corruptf("vhdx: bad file identifier")
	}
	var warns []string
	// The current header is the valid one with the higher sequence number.
	hs, err := vhdxCopies(r, fileSize, "header", "head", vhdxHeaderSize, []int64{vhdxHeader1, vhdxHeader2})
	if err != nil {
		return nil, err
	}
	hdr, warn, err := vhdxPick(hs, func(a, b []byte) bool { return le.Uint64(a[8:]) > le.Uint64(b[8:]) }, check, "header")
	if err != nil {
		return nil, err
	}
	if warn != "" {
		warns = append(warns, warn)
	}
	// The log's entries, if the file was not closed cleanly, are applied
	// (in memory) before anything else is read, as the format requires.
	r, fileSize, applied, err := vhdxLog(r, fileSize, hdr)
	if err != nil {
		return nil, err
	}
	if applied > 0 {
		warns = append(warns, fmt.Sprintf("vhdx: the file was not closed cleanly: %d entries of its log, "+
			"each passing its checksum, were applied in memory, as Hyper-V and qemu apply them", applied))
	}
	rs, err := vhdxCopies(r, fileSize, "region table", "regi", vhdxRegionSize, []int64{vhdxRegion1, vhdxRegion2})
	if err != nil {
		return nil, err
	}
	reg, warn, err := vhdxPick(rs, func(a, b []byte) bool { return false }, check, "region table")
	if err != nil {
		return nil, err
	}
	if warn != "" {
		warns = append(warns, warn)
	}
	n := le.Uint32(reg[8:])
	if n > vhdxMaxRegions {
		return nil, corruptf("vhdx: %d regions", n)
	}
	// The regions payload blocks must not overlap: the headers, the log,
	// every region of the table.
	regions := []vhdxRegion{{0, 1 << 20, "the headers"}}
	if logLen := int64(le.Uint32(hdr[68:])); logLen > 0 {
		regions = append(regions, vhdxRegion{int64(le.Uint64(hdr[72:])), logLen, "the log"})
	}
	var batOff, batLen, metaOff, metaLen int64
	for i := range int(n) {
		e := reg[16+32*i : 48+32*i]
		off, length := int64(le.Uint64(e[16:])), int64(le.Uint32(e[24:]))
		if off < 0 || off > fileSize || length > fileSize-off {
			return nil, corruptf("vhdx: region %d (%d bytes at %d) outside the %d-byte file", i, length, off, fileSize)
		}
		regions = append(regions, vhdxRegion{off, length, fmt.Sprintf("region %d", i)})
		switch [16]byte(e[:16]) {
		case vhdxBATGUID:
			batOff, batLen = off, length
		case vhdxMetadataGUID:
			metaOff, metaLen = off, length
		default:
			if le.Uint32(e[28:])&1 != 0 {
				return nil, fmt.Errorf("vhdx required region %x: %w", e[:16], ErrUnsupported)
			}
		}
	}
	if batLen == 0 || metaLen < 64<<10 {
		return nil, corruptf("vhdx: BAT or metadata region missing")
	}
	if metaLen > 1<<20 {
		return nil, corruptf("vhdx: metadata region of %d bytes", metaLen)
	}
	// The metadata table is the region's first 64 KiB; only the items
	// read are read, as qemu does.
	meta := make([]byte, 64<<10)
	if err := readFull(r, fileSize, meta, metaOff, "vhdx metadata table"); err != nil {
		return nil, err
	}
	if string(meta[:8]) != "metadata" {
		return nil, corruptf("vhdx: bad metadata table signature")
	}
	type span struct{ off, length int64 }
	spans := map[[16]byte]span{}
	cnt := int(le.Uint16(meta[10:]))
	if cnt > vhdxMaxMetaItems {
		return nil, corruptf("vhdx: %d metadata items", cnt)
	}
	for i := range cnt {
		e := meta[32+32*i : 64+32*i]
		off, length := int64(le.Uint32(e[16:])), int64(le.Uint32(e[20:]))
		if off+length > metaLen || (length > 0 && off < 64<<10) {
			return nil, corruptf("vhdx: metadata item %d out of bounds", i)
		}
		g := [16]byte(e[:16])
		// An item marked required that the reader does not know changes
		// how the disk is read: refused, as the specification and qemu
		// refuse it, never guessed at.
		switch g {
		case vhdxFileParamGUID, vhdxDiskSizeGUID, vhdxLogicalGUID, vhdxParentGUID, vhdxPage83GUID, vhdxPhysicalGUID:
		default:
			if le.Uint32(e[24:])&4 != 0 {
				return nil, fmt.Errorf("vhdx required metadata item %x: %w", e[:16], ErrUnsupported)
			}
		}
		spans[g] = span{off, length}
	}
	item := func(g [16]byte) ([]byte, error) {
		s, ok := spans[g]
		if !ok {
			return nil, nil
		}
		b := make([]byte, s.length)
		if err := readFull(r, fileSize, b, metaOff+s.off, "vhdx metadata item"); err != nil {
			return nil, err
		}
		return b, nil
	}
	var fp, ds, ls []byte
	for _, x := range []struct {
		b *[]byte
		g [16]byte
	}{{&fp, vhdxFileParamGUID}, {&ds, vhdxDiskSizeGUID}, {&ls, vhdxLogicalGUID}} {
		if *x.b, err = item(x.g); err != nil {
			return nil, err
		}
	}
	if len(fp) < 8 || len(ds) < 8 || len(ls) < 4 {
		return nil, corruptf("vhdx: required metadata missing")
	}
	d := &vhdxDisk{r: r, fileSize: fileSize, dataWrite: [16]byte(hdr[32:48]), warns: warns}
	d.blockSize = int64(le.Uint32(fp))
	hasParent := le.Uint32(fp[4:])&2 != 0
	if d.blockSize < 1<<20 || d.blockSize > 256<<20 || d.blockSize&(d.blockSize-1) != 0 {
		return nil, corruptf("vhdx: block size %d", d.blockSize)
	}
	d.size = int64(le.Uint64(ds))
	if d.size < 0 || d.size > 64<<40 {
		return nil, corruptf("vhdx: disk size %d", d.size)
	}
	sector := int64(le.Uint32(ls))
	if sector != 512 && sector != 4096 {
		return nil, corruptf("vhdx: logical sector size %d", sector)
	}
	d.sector = sector
	d.chunkRatio = (1 << 23) * sector / d.blockSize
	blocks := (d.size + d.blockSize - 1) / d.blockSize
	entries := blocks + (blocks-1)/d.chunkRatio
	if blocks == 0 {
		entries = 0
	}
	if hasParent {
		loc, err := item(vhdxParentGUID)
		if err != nil {
			return nil, err
		}
		keys, err := vhdxLocator(loc)
		if err != nil {
			return nil, err
		}
		name := vhdxParentName(keys)
		if parent == nil {
			return nil, fmt.Errorf("vhdx differencing disk whose parent is %s: %w (give it explicitly)", name, ErrBacking)
		}
		linkage, ok := parseGUID(keys["parent_linkage"])
		if !ok {
			return nil, corruptf("vhdx: parent_linkage %q is not a GUID", keys["parent_linkage"])
		}
		if err := checkParent(parent, d.size, "vhdx data write guid", linkage); err != nil {
			return nil, fmt.Errorf("vhdx differencing disk whose parent is %s: %w", name, err)
		}
		d.parent, d.bitmaps = parent, newLRU[[]byte](vhdBitmapCache)
		// Every chunk has its sector bitmap entry, the last one too.
		entries = (blocks + d.chunkRatio - 1) / d.chunkRatio * (d.chunkRatio + 1)
	}
	if entries*8 > batLen || entries*8 > qcowMaxTableLen {
		return nil, corruptf("vhdx: BAT region of %d bytes for %d entries", batLen, entries)
	}
	if entries*8 > fileSize {
		return nil, corruptf("vhdx: BAT of %d entries larger than the image", entries)
	}
	raw := make([]byte, entries*8)
	if err := readFull(r, fileSize, raw, batOff, "vhdx BAT"); err != nil {
		return nil, err
	}
	d.bat = make([]uint64, entries)
	for i := range d.bat {
		d.bat[i] = le.Uint64(raw[i*8:])
	}
	if err := d.checkBAT(regions); err != nil {
		return nil, err
	}
	return d, nil
}

// vhdxRegion is a byte range of a VHDX file that payload blocks must not
// overlap.
type vhdxRegion struct {
	off, length int64
	name        string
}

// checkBAT checks, in one pass over the table already read, that every
// present payload block and sector bitmap block lies inside the file past
// the headers, so that a truncated file fails at open rather than at the
// read of a block the scan may never ask for, and clear of the regions
// and of one another, so that no block reads another's data.
func (d *vhdxDisk) checkBAT(regions []vhdxRegion) error {
	type block struct {
		off, length int64
		entry       int
	}
	var blocks []block
	for i, e := range d.bat {
		what, length := "payload block", d.blockSize
		if int64(i+1)%(d.chunkRatio+1) == 0 {
			what, length = "sector bitmap", 1<<20
			if e&7 != vhdxFull { // SB_BLOCK_PRESENT
				continue
			}
		} else if s := e & 7; s != vhdxFull && s != vhdxPartial {
			continue
		}
		off := int64(e>>20) << 20
		if off < 1<<20 {
			return corruptf("vhdx: %s of BAT entry %d at offset %d overlaps the headers", what, i, off)
		}
		if off > d.fileSize-length {
			return corruptf("vhdx: %s of BAT entry %d at offset %d (+%d) lies past the end of the image (%d bytes): truncated image",
				what, i, off, length, d.fileSize)
		}
		for _, g := range regions {
			if off < g.off+g.length && g.off < off+length {
				return corruptf("vhdx: %s of BAT entry %d at offset %d (+%d) overlaps %s", what, i, off, length, g.name)
			}
		}
		blocks = append(blocks, block{off, length, i})
	}
	slices.SortFunc(blocks, func(a, b block) int { return cmp.Compare(a.off, b.off) })
	for k := 1; k < len(blocks); k++ {
		if p := blocks[k-1]; blocks[k].off < p.off+p.length {
			return corruptf("vhdx: BAT entries %d and %d name overlapping blocks at offset %d", p.entry, blocks[k].entry, blocks[k].off)
		}
	}
	return nil
}

func (d *vhdxDisk) Size() int64 { return d.size }

func (d *vhdxDisk) ReadAt(p []byte, off int64) (int, error) {
	return readBlocks(d, d.blockSize, d.size, p, off)
}

func (d *vhdxDisk) readBlock(p []byte, blk, within int64) error {
	e := d.bat[blk+blk/d.chunkRatio]
	switch e & 7 {
	case vhdxNotPresent, vhdxUndefined:
		if d.parent != nil {
			return readParent(d.parent, p, blk*d.blockSize+within)
		}
		clear(p)
		return nil
	case vhdxZero, vhdxUnmapped:
		clear(p)
		return nil
	case vhdxFull:
		off := int64(e>>20) << 20
		if off < 1<<20 {
			return corruptf("vhdx: block %d at offset %d overlaps the headers", blk, off)
		}
		return readFull(d.r, d.fileSize, p, off+within, "vhdx block")
	case vhdxPartial:
		if d.parent == nil {
			return corruptf("vhdx: block %d is partially present in a disk without a parent", blk)
		}
		off := int64(e>>20) << 20
		if off < 1<<20 {
			return corruptf("vhdx: block %d at offset %d overlaps the headers", blk, off)
		}
		bm, err := d.bitmap(blk)
		if err != nil {
			return err
		}
		// A set bit (least significant first) is a sector of this disk,
		// a clear one the parent's.
		return readRuns(p, within, d.sector, func(s int64) bool { return bm[s/8]&(1<<(s%8)) != 0 },
			func(q []byte, at int64) error { return readFull(d.r, d.fileSize, q, off+at, "vhdx block") },
			func(q []byte, at int64) error { return readParent(d.parent, q, blk*d.blockSize+at) })
	default:
		return corruptf("vhdx: block %d has state %d", blk, e&7)
	}
}

// bitmap returns the part of its chunk's sector bitmap block that covers
// payload block blk.
func (d *vhdxDisk) bitmap(blk int64) ([]byte, error) {
	if bm, ok := d.bitmaps.get(blk); ok {
		return bm, nil
	}
	chunk := blk / d.chunkRatio
	e := d.bat[chunk*(d.chunkRatio+1)+d.chunkRatio]
	if e&7 != vhdxFull { // SB_BLOCK_PRESENT
		return nil, corruptf("vhdx: block %d is partially present but its sector bitmap (state %d) is not", blk, e&7)
	}
	off := int64(e>>20) << 20
	if off < 1<<20 {
		return nil, corruptf("vhdx: sector bitmap of chunk %d at offset %d overlaps the headers", chunk, off)
	}
	n := d.blockSize / d.sector / 8
	bm := make([]byte, n)
	if err := readFull(d.r, d.fileSize, bm, off+blk%d.chunkRatio*n, "vhdx sector bitmap"); err != nil {
		return nil, err
	}
	d.bitmaps.put(blk, bm)
	return bm, nil
}

// vhdxLocator reads the parent locator metadata item into its keys and
// values.
func vhdxLocator(item []byte) (map[string]string, error) {
	le := binary.LittleEndian
	if len(item) < 20 {
		return nil, corruptf("vhdx: differencing disk without a parent locator")
	}
	if [16]byte(item[:16]) != vhdxLocatorGUID {
		return nil, fmt.Errorf("vhdx parent locator type %x: %w", item[:16], ErrUnsupported)
	}
	n := int(le.Uint16(item[18:]))
	if n > vhdxMaxLocatorEntries || 20+12*n > len(item) {
		return nil, corruptf("vhdx: parent locator of %d entries in %d bytes", n, len(item))
	}
	str := func(off uint32, length uint16) (string, bool) {
		end := int64(off) + int64(length)
		if end > int64(len(item)) || length%2 != 0 {
			return "", false
		}
		return utf16String(item[off:end], le), true
	}
	keys := map[string]string{}
	for i := range n {
		e := item[20+12*i:]
		k, ok1 := str(le.Uint32(e), le.Uint16(e[8:]))
		v, ok2 := str(le.Uint32(e[4:]), le.Uint16(e[10:]))
		if !ok1 || !ok2 {
			return nil, corruptf("vhdx: parent locator entry %d out of bounds", i)
		}
		keys[k] = v
	}
	return keys, nil
}

// vhdxParentName names a differencing disk's parent by the paths its
// locator records.
func vhdxParentName(keys map[string]string) string {
	var names []string
	for _, k := range []string{"relative_path", "absolute_win32_path", "volume_path"} {
		if v := keys[k]; v != "" {
			names = append(names, quote(v))
		}
	}
	if len(names) == 0 {
		return fmt.Sprintf("the disk whose data write GUID is %s", keys["parent_linkage"])
	}
	return strings.Join(names, " or ")
}
