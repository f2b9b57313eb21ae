package vdisk

import (
	"encoding/binary"
	"fmt"
	"io"
	"strings"
	"unicode/utf16"
)

// VHD disk types, from Microsoft's Virtual Hard Disk Image Format
// Specification.
const (
	vhdFixed        = 2
	vhdDynamic      = 3
	vhdDifferencing = 4
	vhdUnused       = 0xffffffff

	vhdLocators       = 8
	vhdMaxLocatorData = 64 << 10
	vhdBitmapCache    = 64
)

// vhdDisk is the guest disk of a dynamic or differencing VHD.
type vhdDisk struct {
	r          io.ReaderAt
	fileSize   int64
	size       int64
	blockSize  int64
	bitmapSize int64
	bat        []uint32
	id         [16]byte
	// parent is set for a differencing disk: sectors whose bit is clear
	// in their block's bitmap, and unallocated blocks, are read from it.
	parent  Disk
	bitmaps *lru[[]byte]
}

// vhdFixedDisk is the guest disk of a fixed VHD.
type vhdFixedDisk struct {
	*io.SectionReader
	id [16]byte
}

// identity lets a differencing child check that it was given its parent.
func (d *vhdDisk) identity() (string, [16]byte)      { return "vhd unique id", d.id }
func (d *vhdFixedDisk) identity() (string, [16]byte) { return "vhd unique id", d.id }

// identified is a disk that carries the identifier its children name.
type identified interface {
	identity() (what string, id [16]byte)
}

// vhdChecksum is the one's complement of the byte sum of b, skipping the
// four checksum bytes at skip.
func vhdChecksum(b []byte, skip int) uint32 {
	var s uint32
	for i, c := range b {
		if i >= skip && i < skip+4 {
			continue
		}
		s += uint32(c)
	}
	return ^s
}

// OpenVHD opens a fixed, dynamic or differencing VHD. A differencing disk
// needs parent, its parent's guest disk; without it Open fails with
// ErrBacking naming the parent as the disk's locators record it.
func OpenVHD(r io.ReaderAt, fileSize int64, parent Disk) (Disk, error) {
	be := binary.BigEndian
	var foot [512]byte
	if fileSize < 512 {
		return nil, corruptf("vhd: %d bytes is too short for a footer", fileSize)
	}
	if err := readFull(r, fileSize, foot[:], fileSize-512, "vhd footer"); err != nil {
		return nil, err
	}
	if string(foot[:8]) != "conectix" {
		// A dynamic disk keeps a copy of the footer at offset 0, but
		// every VHD ends with its footer: without it the file was cut,
		// and the copy would hide that.
		var cp [512]byte
		if readFull(r, fileSize, cp[:], 0, "vhd footer copy") == nil && string(cp[:8]) == "conectix" {
			return nil, corruptf("vhd: the footer at the end of the file is missing (the copy at offset 0 says a %s disk of %d bytes): truncated image",
				vhdTypeName(be.Uint32(cp[60:])), be.Uint64(cp[48:]))
		}
		return nil, corruptf("vhd: no footer")
	}
	if sum := be.Uint32(foot[64:]); sum != vhdChecksum(foot[:], 64) {
		return nil, corruptf("vhd: footer checksum %#x, want %#x", sum, vhdChecksum(foot[:], 64))
	}
	size := int64(be.Uint64(foot[48:]))
	if size < 0 || size > 1<<48 {
		return nil, corruptf("vhd: disk size %d", size)
	}
	id := [16]byte(foot[68:84])
	typ := be.Uint32(foot[60:])
	switch typ {
	case vhdFixed:
		if size > fileSize-512 {
			return nil, corruptf("vhd: fixed disk of %d bytes in a %d byte file", size, fileSize)
		}
		return &vhdFixedDisk{io.NewSectionReader(r, 0, size), id}, nil
	case vhdDynamic, vhdDifferencing:
	default:
		return nil, corruptf("vhd: disk type %d", typ)
	}
	var hdr [1024]byte
	hdrOff := int64(be.Uint64(foot[16:]))
	if err := readFull(r, fileSize, hdr[:], hdrOff, "vhd dynamic header"); err != nil {
		return nil, err
	}
	if string(hdr[:8]) != "cxsparse" {
		return nil, corruptf("vhd: dynamic header at %d has bad cookie", hdrOff)
	}
	if sum := be.Uint32(hdr[36:]); sum != vhdChecksum(hdr[:], 36) {
		return nil, corruptf("vhd: dynamic header checksum %#x, want %#x", sum, vhdChecksum(hdr[:], 36))
	}
	d := &vhdDisk{r: r, fileSize: fileSize, size: size, id: id}
	if typ == vhdDifferencing {
		name := vhdParentName(r, fileSize, hdr[:])
		if parent == nil {
			return nil, fmt.Errorf("vhd differencing disk whose parent is %s: %w (give it explicitly)", name, ErrBacking)
		}
		if err := checkParent(parent, size, "vhd unique id", [16]byte(hdr[40:56])); err != nil {
			return nil, fmt.Errorf("vhd differencing disk whose parent is %s: %w", name, err)
		}
		d.parent, d.bitmaps = parent, newLRU[[]byte](vhdBitmapCache)
	}
	batOff := int64(be.Uint64(hdr[16:]))
	entries := int64(be.Uint32(hdr[28:]))
	d.blockSize = int64(be.Uint32(hdr[32:]))
	if d.blockSize < 512 || d.blockSize&(d.blockSize-1) != 0 || d.blockSize > 256<<20 {
		return nil, corruptf("vhd: block size %d", d.blockSize)
	}
	need := (size + d.blockSize - 1) / d.blockSize
	if entries < need {
		return nil, corruptf("vhd: %d BAT entries, %d needed", entries, need)
	}
	if need*4 > qcowMaxTableLen {
		return nil, corruptf("vhd: BAT of %d entries too large", need)
	}
	if need*4 > fileSize {
		return nil, corruptf("vhd: BAT of %d entries larger than the image", need)
	}
	raw := make([]byte, need*4)
	if err := readFull(r, fileSize, raw, batOff, "vhd BAT"); err != nil {
		return nil, err
	}
	d.bat = make([]uint32, need)
	d.bitmapSize = (d.blockSize/512/8 + 511) / 512 * 512
	// Every allocated block, its sector bitmap first, lies between the
	// dynamic header and the footer: one pass over the table read above
	// finds a truncated file now rather than at the read of that block.
	dataEnd := fileSize - 512
	for i := range d.bat {
		e := be.Uint32(raw[i*4:])
		d.bat[i] = e
		if e == vhdUnused {
			continue
		}
		start := int64(e) * 512
		end := start + d.bitmapSize + d.blockSize
		if start < 512 || start < hdrOff+int64(len(hdr)) && end > hdrOff {
			return nil, corruptf("vhd: block %d at offset %d overlaps the footer copy or the dynamic header", i, start)
		}
		if end > dataEnd {
			return nil, corruptf("vhd: block %d at offset %d (+%d) lies past the end of the data (%d bytes before the footer): truncated image",
				i, start, d.bitmapSize+d.blockSize, dataEnd)
		}
	}
	return d, nil
}

// vhdTypeName names a VHD disk type.
func vhdTypeName(typ uint32) string {
	switch typ {
	case vhdFixed:
		return "fixed"
	case vhdDynamic:
		return "dynamic"
	case vhdDifferencing:
		return "differencing"
	}
	return fmt.Sprintf("type %d", typ)
}

// checkParent checks that parent can be the parent of a child disk of
// size bytes that names it by id (when the parent's format carries one).
func checkParent(parent Disk, size int64, what string, want [16]byte) error {
	if parent.Size() < size {
		return fmt.Errorf("the given parent holds %d bytes, the child %d: %w", parent.Size(), size, ErrBacking)
	}
	if p, ok := parent.(identified); ok {
		if w, got := p.identity(); w == what && got != want {
			return fmt.Errorf("the given parent is not this disk's parent (its %s is %x, the child names %x): %w", what, got, want, ErrBacking)
		}
	}
	return nil
}

// vhdParentName names a differencing disk's parent: its relative and
// absolute paths from the parent locators, else the header's parent name.
func vhdParentName(r io.ReaderAt, fileSize int64, hdr []byte) string {
	be := binary.BigEndian
	var names []string
	for i := range vhdLocators {
		e := hdr[576+24*i : 600+24*i]
		code := string(e[:4])
		length := int64(be.Uint32(e[8:]))
		off := int64(be.Uint64(e[16:]))
		if length <= 0 || length > vhdMaxLocatorData {
			continue
		}
		b := make([]byte, length)
		if readFull(r, fileSize, b, off, "vhd parent locator") != nil {
			continue
		}
		switch code {
		case "W2ru", "W2ku":
			names = append(names, quote(utf16String(b, binary.LittleEndian)))
		case "MacX":
			names = append(names, quote(strings.TrimRight(string(b), "\x00")))
		}
	}
	if len(names) == 0 {
		return quote(utf16String(hdr[64:576], be))
	}
	return strings.Join(names, " or ")
}

// utf16String decodes a NUL-padded UTF-16 string.
func utf16String(b []byte, order binary.ByteOrder) string {
	u := make([]uint16, 0, len(b)/2)
	for i := 0; i+1 < len(b); i += 2 {
		c := order.Uint16(b[i:])
		if c == 0 {
			break
		}
		u = append(u, c)
	}
	return string(utf16.Decode(u))
}

func (d *vhdDisk) Size() int64 { return d.size }

func (d *vhdDisk) ReadAt(p []byte, off int64) (int, error) {
	return readBlocks(d, d.blockSize, d.size, p, off)
}

func (d *vhdDisk) readBlock(p []byte, blk, within int64) error {
	e := d.bat[blk]
	if e == vhdUnused {
		if d.parent != nil {
			return readParent(d.parent, p, blk*d.blockSize+within)
		}
		clear(p)
		return nil
	}
	if e == 0 {
		return corruptf("vhd: block %d points at the footer copy", blk)
	}
	start := int64(e)*512 + d.bitmapSize
	if d.parent == nil {
		// The sector bitmap is not consulted for dynamic disks, as in QEMU.
		return readFull(d.r, d.fileSize, p, start+within, "vhd block")
	}
	bm, err := d.bitmap(blk, int64(e)*512)
	if err != nil {
		return err
	}
	// A set bit (most significant first) is a sector of this disk, a
	// clear one is the parent's; read runs of either in one go.
	return readRuns(p, within, 512, func(s int64) bool { return bm[s/8]&(0x80>>(s%8)) != 0 },
		func(q []byte, at int64) error { return readFull(d.r, d.fileSize, q, start+at, "vhd block") },
		func(q []byte, at int64) error { return readParent(d.parent, q, blk*d.blockSize+at) })
}

// bitmap returns the sector bitmap of block blk, stored at off.
func (d *vhdDisk) bitmap(blk, off int64) ([]byte, error) {
	if bm, ok := d.bitmaps.get(blk); ok {
		return bm, nil
	}
	bm := make([]byte, d.bitmapSize)
	if err := readFull(d.r, d.fileSize, bm, off, "vhd sector bitmap"); err != nil {
		return nil, err
	}
	d.bitmaps.put(blk, bm)
	return bm, nil
}

// readRuns fills p, which starts at byte within of a block of sectors of
// sector bytes, in runs of sectors that mine says are the disk's own (read
// with own) or the parent's (read with parent); at is the offset in the
// block.
func readRuns(p []byte, within, sector int64, mine func(s int64) bool, own, parent func(q []byte, at int64) error) error {
	n := int64(0)
	for n < int64(len(p)) {
		pos := within + n
		m := mine(pos / sector)
		end := (pos/sector + 1) * sector
		for end < within+int64(len(p)) && mine(end/sector) == m {
			end += sector
		}
		end = min(end, within+int64(len(p)))
		q := p[n : end-within]
		read := parent
		if m {
			read = own
		}
		if err := read(q, pos); err != nil {
			return err
		}
		n = end - within
	}
	return nil
}

// readParent reads p at off of a parent disk, which must hold it all.
func readParent(parent Disk, p []byte, off int64) error {
	n, err := parent.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		return corruptf("parent disk ends at %d, before byte %d", parent.Size(), off+int64(len(p)))
	}
	return fmt.Errorf("read parent disk at %d: %w", off, err)
}

// quote puts a name from an image in quotes, control characters replaced,
// so that it reads as the user would type it.
func quote(s string) string {
	return `"` + strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return '?'
		}
		return r
	}, s) + `"`
}
