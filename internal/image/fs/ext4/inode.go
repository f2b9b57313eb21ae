package ext4

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/amilint/amilint/internal/image/fs/inodefs"
	"github.com/amilint/amilint/internal/image/integrity"
)

// Inode flags (i_flags).
const (
	flagEncrypt    = 0x800
	flagIndex      = 0x1000
	flagExtents    = 0x80000
	flagInlineData = 0x10000000
)

const (
	extentMagic    = 0xF30A
	maxExtentDepth = 5
	iBlockOffset   = 0x28
	iBlockLen      = 60
)

// inode is the part of an on-disk inode the reader uses.
type inode struct {
	ino   uint64
	mode  uint16
	size  int64
	mtime time.Time
	flags uint32
	block [iBlockLen]byte // i_block: extent root, block map, inline data or fast symlink
	raw   []byte          // the whole on-disk inode, for in-inode xattrs
	// seed seeds the checksums of the inode's extent and directory
	// blocks (metadata_csum): the filesystem's seed, the inode number,
	// the generation.
	seed uint32
}

func (n *inode) isDir() bool     { return n.mode&0xF000 == 0x4000 }
func (n *inode) isRegular() bool { return n.mode&0xF000 == 0x8000 }

// attr returns n's metadata.
func (n *inode) attr() inodefs.Attr {
	return inodefs.Attr{Ino: n.ino, Mode: inodefs.FileMode(n.mode), Size: n.size, ModTime: n.mtime}
}

// inode reads inode number ino.
func (f *FS) inode(ino uint64) (*inode, error) {
	if ino == 0 || ino > f.inodesCount {
		return nil, fmt.Errorf("inode %d of %d: %w", ino, f.inodesCount, ErrCorrupt)
	}
	g := (ino - 1) / f.inodesPerGroup
	idx := (ino - 1) % f.inodesPerGroup
	table, err := f.inodeTable(g)
	if err != nil {
		return nil, fmt.Errorf("inode %d: %w", ino, err)
	}
	if table == 0 || table >= f.blocksCount {
		return nil, fmt.Errorf("inode %d: inode table at block %d: %w", ino, table, ErrCorrupt)
	}
	raw := make([]byte, f.inodeSize)
	at := int64(table)*f.blockSize + int64(idx)*f.inodeSize
	if err := f.readAt(raw, at); err != nil {
		return nil, fmt.Errorf("inode %d: %w", ino, err)
	}
	le := binary.LittleEndian
	n := &inode{ino: ino, raw: raw, mode: le.Uint16(raw[0x0:])}
	if f.csum {
		var b [4]byte
		le.PutUint32(b[:], uint32(ino))
		n.seed = integrity.CRC32CRaw(f.seed, b[:])
		n.seed = integrity.CRC32CRaw(n.seed, raw[0x64:0x68]) // i_generation
		if f.inodeCsum && !inodeCsumOK(raw, n.seed) {
			if err := f.mismatch(fmt.Sprintf("inode %d in block %d", ino, at/f.blockSize), ino); err != nil {
				return nil, err
			}
		}
	}
	n.size = int64(le.Uint32(raw[0x4:]))
	if n.isRegular() || f.incompat&incompatLargeDir != 0 {
		// Elsewhere i_size_high was i_dir_acl (ext4_isize).
		n.size |= int64(le.Uint32(raw[0x6C:])) << 32
	}
	if n.size < 0 {
		return nil, fmt.Errorf("inode %d: size %d: %w", ino, n.size, ErrCorrupt)
	}
	n.flags = le.Uint32(raw[0x20:])
	copy(n.block[:], raw[iBlockOffset:iBlockOffset+iBlockLen])
	sec := int64(int32(le.Uint32(raw[0x10:])))
	var nsec int64
	if f.inodeSize > 128 {
		extra := int64(le.Uint16(raw[0x80:]))
		if 128+extra > f.inodeSize {
			return nil, fmt.Errorf("inode %d: extra size %d: %w", ino, extra, ErrCorrupt)
		}
		if extra >= 0x8C-0x80 {
			x := le.Uint32(raw[0x88:])
			sec += int64(x&3) << 32
			nsec = int64(x >> 2)
		}
	}
	n.mtime = time.Unix(sec, nsec%1e9)
	return n, nil
}

// inodeCsumOK checks an on-disk inode's checksum as ext4_inode_csum_verify
// does: CRC32C over the inode with the checksum fields taken as zeros; 32
// bits when the inode's extra space holds i_checksum_hi, else the low 16.
func inodeCsumOK(raw []byte, seed uint32) bool {
	le := binary.LittleEndian
	zero := []byte{0, 0}
	c := integrity.CRC32CRaw(seed, raw[:0x7C])
	c = integrity.CRC32CRaw(c, zero)
	c = integrity.CRC32CRaw(c, raw[0x7E:128])
	want := uint32(le.Uint16(raw[0x7C:]))
	if len(raw) > 128 && 128+int(le.Uint16(raw[0x80:])) >= 0x84 {
		c = integrity.CRC32CRaw(c, raw[128:0x82])
		c = integrity.CRC32CRaw(c, zero)
		c = integrity.CRC32CRaw(c, raw[0x84:])
		want |= uint32(le.Uint16(raw[0x82:])) << 16
		return c == want
	}
	c = integrity.CRC32CRaw(c, raw[128:])
	return c&0xFFFF == want
}

// inlineXattr returns the value of the in-inode extended attribute
// system.<name> (name index 7), or nil when there is none.
func (f *FS) inlineXattr(n *inode, name string) ([]byte, error) {
	if f.inodeSize <= 128 {
		return nil, nil
	}
	le := binary.LittleEndian
	start := 128 + int(le.Uint16(n.raw[0x80:]))
	if start+4 > len(n.raw) || le.Uint32(n.raw[start:]) != 0xEA020000 {
		return nil, nil
	}
	area := n.raw[start+4:]
	for off := 0; off+16 <= len(area); {
		nameLen := int(area[off])
		index := area[off+1]
		if nameLen == 0 && index == 0 && le.Uint16(area[off+2:]) == 0 {
			break // end of entries (four zero bytes)
		}
		valOff := int(le.Uint16(area[off+2:]))
		valInum := le.Uint32(area[off+4:])
		valSize := int(le.Uint32(area[off+8:]))
		if off+16+nameLen > len(area) {
			return nil, fmt.Errorf("inode %d: xattr entry past the inode: %w", n.ino, ErrCorrupt)
		}
		if index == 7 && string(area[off+16:off+16+nameLen]) == name {
			if valInum != 0 {
				return nil, fmt.Errorf("inode %d: system.%s stored in inode %d: %w", n.ino, name, valInum, ErrUnsupported)
			}
			if valOff+valSize > len(area) || valSize < 0 {
				return nil, fmt.Errorf("inode %d: xattr value past the inode: %w", n.ino, ErrCorrupt)
			}
			return area[valOff : valOff+valSize], nil
		}
		off += (16 + nameLen + 3) &^ 3
	}
	return nil, nil
}

// inlineData returns the content of an inode with EXT4_INLINE_DATA_FL: the
// first 60 bytes in i_block, the rest in the system.data xattr.
func (f *FS) inlineData(n *inode) ([]byte, error) {
	extra, err := f.inlineXattr(n, "data")
	if err != nil {
		return nil, err
	}
	data := make([]byte, 0, iBlockLen+len(extra))
	data = append(append(data, n.block[:]...), extra...)
	if n.size > int64(len(data)) {
		return nil, fmt.Errorf("inode %d: inline size %d exceeds the %d bytes stored: %w", n.ino, n.size, len(data), ErrCorrupt)
	}
	return data, nil
}

// run is a stretch of a file's logical blocks mapped the same way.
type run struct {
	phys   uint64 // first physical block; 0 for a hole
	length uint64 // blocks
	zero   bool   // a hole or an unwritten extent: reads as zeros
}

// mapBlock maps logical block lblk of inode n to a run starting there.
func (f *FS) mapBlock(n *inode, lblk uint64) (run, error) {
	var r run
	var err error
	if n.flags&flagExtents != 0 {
		r, err = f.mapExtent(n, lblk)
	} else {
		r, err = f.mapIndirect(n, lblk)
	}
	if err != nil {
		return run{}, fmt.Errorf("inode %d block %d: %w", n.ino, lblk, err)
	}
	if r.length == 0 {
		return run{}, fmt.Errorf("inode %d block %d: empty run: %w", n.ino, lblk, ErrCorrupt)
	}
	if !r.zero && (r.phys >= f.blocksCount || r.length > f.blocksCount-r.phys) {
		return run{}, fmt.Errorf("inode %d block %d: blocks %d+%d past the %d-block filesystem: %w",
			n.ino, lblk, r.phys, r.length, f.blocksCount, ErrCorrupt)
	}
	return r, nil
}

// mapExtent descends the extent tree. Each level's depth must be exactly
// one less than its parent's, so the descent takes at most
// maxExtentDepth+1 node reads and cannot cycle.
func (f *FS) mapExtent(n *inode, lblk uint64) (run, error) {
	le := binary.LittleEndian
	node := n.block[:]
	want := -1
	limit := uint64(1 << 32) // logical blocks are 32-bit; the next subtree's start bounds holes
	for hop := 0; ; hop++ {
		if len(node) < 12 || le.Uint16(node) != extentMagic {
			return run{}, fmt.Errorf("extent node without magic: %w", ErrCorrupt)
		}
		entries := int(le.Uint16(node[2:]))
		maxEntries := int(le.Uint16(node[4:]))
		depth := int(le.Uint16(node[6:]))
		if entries > maxEntries || 12+12*maxEntries > len(node) {
			return run{}, fmt.Errorf("extent node with %d/%d entries in %d bytes: %w", entries, maxEntries, len(node), ErrCorrupt)
		}
		if depth > maxExtentDepth || (want >= 0 && depth != want) || hop > maxExtentDepth {
			return run{}, fmt.Errorf("extent node depth %d (want %d): %w", depth, want, ErrCorrupt)
		}
		ents := node[12 : 12+12*entries]
		if depth == 0 {
			next := limit
			for i := 0; i < entries; i++ {
				e := ents[12*i:]
				start := uint64(le.Uint32(e))
				length := uint64(le.Uint16(e[4:]))
				unwritten := false
				if length > 32768 {
					length -= 32768
					unwritten = true
				}
				phys := uint64(le.Uint16(e[6:]))<<32 | uint64(le.Uint32(e[8:]))
				if lblk >= start && lblk < start+length {
					off := lblk - start
					return run{phys: phys + off, length: length - off, zero: unwritten}, nil
				}
				if start > lblk && start < next {
					next = start
				}
			}
			if lblk >= next {
				return run{}, fmt.Errorf("extent map: %w", ErrCorrupt)
			}
			return run{length: next - lblk, zero: true}, nil
		}
		// Index node: take the last entry starting at or before lblk.
		child := -1
		next := limit
		for i := 0; i < entries; i++ {
			start := uint64(le.Uint32(ents[12*i:]))
			if start <= lblk {
				child = i
			} else if start < next {
				next = start
			}
		}
		if child < 0 {
			return run{length: next - lblk, zero: true}, nil
		}
		e := ents[12*child:]
		blk := uint64(le.Uint16(e[8:]))<<32 | uint64(le.Uint32(e[4:]))
		b, err := f.readBlock(blk)
		if err != nil {
			return run{}, fmt.Errorf("extent index: %w", err)
		}
		if err := f.checkExtentBlock(n, b, blk); err != nil {
			return run{}, err
		}
		node = b
		want = depth - 1
		limit = next
	}
}

// checkExtentBlock verifies a non-root extent tree block of inode n read
// from block blk: the CRC32C in the tail after its eh_max entries.
func (f *FS) checkExtentBlock(n *inode, b []byte, blk uint64) error {
	if !f.csum {
		return nil
	}
	le := binary.LittleEndian
	tail := 12 + 12*int(le.Uint16(b[4:]))
	if tail+4 <= len(b) && integrity.CRC32CRaw(n.seed, b[:tail]) == le.Uint32(b[tail:]) {
		return nil
	}
	return f.mismatch(fmt.Sprintf("extent block %d", blk), n.ino)
}

// mapIndirect maps through an ext2/3 block map: 12 direct pointers, then
// single, double and triple indirect blocks.
func (f *FS) mapIndirect(n *inode, lblk uint64) (run, error) {
	le := binary.LittleEndian
	per := uint64(f.blockSize / 4)
	ptr := func(i uint64) uint64 { return uint64(le.Uint32(n.block[4*i:])) }
	if lblk < 12 {
		p := ptr(lblk)
		if p == 0 {
			return run{length: 1, zero: true}, nil
		}
		r := run{phys: p, length: 1}
		for i := lblk + 1; i < 12 && ptr(i) == p+(i-lblk); i++ {
			r.length++
		}
		return r, nil
	}
	rel := lblk - 12
	var root uint64
	levels := 0
	span := uint64(1) // blocks covered by one pointer at the top level
	switch {
	case rel < per:
		root, levels = ptr(12), 1
	case rel-per < per*per:
		rel -= per
		root, levels, span = ptr(13), 2, per
	case rel-per-per*per < per*per*per:
		rel -= per + per*per
		root, levels, span = ptr(14), 3, per*per
	default:
		return run{}, fmt.Errorf("logical block beyond the triple indirect map: %w", ErrCorrupt)
	}
	blk := root
	for l := 0; l < levels; l++ {
		if blk == 0 {
			// A hole covering the rest of this subtree.
			return run{length: span*per - rel%(span*per), zero: true}, nil
		}
		b, err := f.readBlock(blk)
		if err != nil {
			return run{}, fmt.Errorf("indirect block: %w", err)
		}
		idx := rel / span
		blk = uint64(le.Uint32(b[4*idx:]))
		if l == levels-1 {
			if blk == 0 {
				return run{length: 1, zero: true}, nil
			}
			r := run{phys: blk, length: 1}
			for i := idx + 1; i < per && uint64(le.Uint32(b[4*i:])) == blk+(i-idx); i++ {
				r.length++
			}
			return r, nil
		}
		rel %= span
		span /= per
	}
	return run{}, fmt.Errorf("indirect map: %w", ErrCorrupt)
}

// readAt reads file content of inode n at offset off into p, returning the
// bytes read; reads past the end stop at the file size.
func (f *FS) readFile(n *inode, inline []byte, p []byte, off int64) (int, error) {
	if off >= n.size {
		return 0, nil
	}
	if int64(len(p)) > n.size-off {
		p = p[:n.size-off]
	}
	if n.flags&flagInlineData != 0 {
		return copy(p, inline[off:]), nil
	}
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		lblk := uint64(pos / f.blockSize)
		r, err := f.mapBlock(n, lblk)
		if err != nil {
			return done, err
		}
		inBlock := pos % f.blockSize
		avail := int64(r.length)*f.blockSize - inBlock
		if avail <= 0 { // cannot happen with length >= 1; keeps progress certain
			return done, fmt.Errorf("inode %d: empty run: %w", n.ino, ErrCorrupt)
		}
		chunk := p[done:min(len(p), done+int(min(avail, int64(len(p)))))]
		if r.zero {
			clear(chunk)
		} else if err := f.readAt(chunk, int64(r.phys)*f.blockSize+inBlock); err != nil {
			return done, fmt.Errorf("inode %d: %w", n.ino, err)
		}
		done += len(chunk)
	}
	return done, nil
}
