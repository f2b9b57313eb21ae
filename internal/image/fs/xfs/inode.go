package xfs

import (
	"fmt"
	"time"

	"github.com/amilint/amilint/internal/image/fs/inodefs"
)

// Data fork formats (di_format).
const (
	fmtDev     = 0 // device files: no data
	fmtLocal   = 1
	fmtExtents = 2
	fmtBtree   = 3
)

const (
	coreSize       = 176 // the v3 dinode core; the data fork follows it
	diflagRealtime = 0x1 // data lives on the realtime device
	diflag2Bigtime = 1 << 3
	diflag2Nrext64 = 1 << 4
	bmbtHdrSize    = 72 // "BMA3" long-form btree block header
	maxBmbtLevel   = 9
)

// inode is the part of a v3 dinode the reader uses.
type inode struct {
	ino      uint64
	mode     uint16
	format   uint8
	size     int64
	mtime    time.Time
	nextents uint64
	realtime bool
	fork     []byte // the data fork
}

func (n *inode) isDir() bool { return n.mode&0xF000 == 0x4000 }

// attr returns n's metadata.
func (n *inode) attr() inodefs.Attr {
	return inodefs.Attr{Ino: n.ino, Mode: inodefs.FileMode(n.mode), Size: n.size, ModTime: n.mtime}
}

// inode reads inode number ino: its AG, AG block and index within the
// block are packed in the number by sb_agblklog and sb_inopblog.
func (f *FS) inode(ino uint64) (*inode, error) {
	ag := ino >> (f.agBlkLog + f.inoPBLog)
	agb := (ino >> f.inoPBLog) & (1<<f.agBlkLog - 1)
	idx := ino & (1<<f.inoPBLog - 1)
	if ag >= f.agCount || agb >= f.agBlocks || ag*f.agBlocks+agb >= f.dblocks {
		return nil, fmt.Errorf("inode %d outside the filesystem: %w", ino, ErrCorrupt)
	}
	raw := make([]byte, f.inodeSize)
	off := int64(ag*f.agBlocks+agb)<<f.blockLog + int64(idx)*f.inodeSize
	if err := f.readAt(raw, off); err != nil {
		return nil, fmt.Errorf("inode %d: %w", ino, err)
	}
	if !crcOK(raw, inodeCRCOff) {
		if err := f.mismatch(fmt.Sprintf("inode %d (AG %d block %d)", ino, ag, agb), ino); err != nil {
			return nil, err
		}
	}
	if string(raw[:2]) != "IN" || raw[4] != 3 {
		return nil, fmt.Errorf("inode %d: bad magic %q or version %d: %w", ino, raw[:2], raw[4], ErrCorrupt)
	}
	if got := be.Uint64(raw[0x98:]); got != ino {
		return nil, fmt.Errorf("inode %d: records number %d: %w", ino, got, ErrCorrupt)
	}
	if [16]byte(raw[0xA0:0xB0]) != f.uuid {
		return nil, fmt.Errorf("inode %d: records another filesystem's UUID %x: %w", ino, raw[0xA0:0xB0], ErrCorrupt)
	}
	n := &inode{ino: ino, mode: be.Uint16(raw[0x2:]), format: raw[0x5]}
	n.size = int64(be.Uint64(raw[0x38:]))
	if n.size < 0 {
		return nil, fmt.Errorf("inode %d: size %d: %w", ino, n.size, ErrCorrupt)
	}
	n.realtime = be.Uint16(raw[0x5A:])&diflagRealtime != 0
	flags2 := be.Uint64(raw[0x78:])
	if f.incompat&incompatNrext64 != 0 && flags2&diflag2Nrext64 != 0 {
		n.nextents = be.Uint64(raw[0x18:])
	} else {
		n.nextents = uint64(be.Uint32(raw[0x4C:]))
	}
	forkSize := f.inodeSize - coreSize
	if forkoff := int64(raw[0x52]); forkoff != 0 {
		if forkoff*8 > forkSize {
			return nil, fmt.Errorf("inode %d: fork offset %d: %w", ino, forkoff, ErrCorrupt)
		}
		forkSize = forkoff * 8
	}
	n.fork = raw[coreSize : coreSize+forkSize]
	if flags2&diflag2Bigtime != 0 {
		// Nanoseconds since the 32-bit epoch's start, 1901-12-13.
		t := be.Uint64(raw[0x28:])
		n.mtime = time.Unix(int64(t/1e9)-(1<<31), int64(t%1e9))
	} else {
		n.mtime = time.Unix(int64(int32(be.Uint32(raw[0x28:]))), int64(be.Uint32(raw[0x2C:])%1e9))
	}
	return n, nil
}

// run is a stretch of a file's logical blocks mapped the same way.
type run struct {
	disk   uint64 // first block on the device (linear, not AG-relative)
	length uint64 // blocks
	zero   bool   // a hole or an unwritten extent: reads as zeros
}

// extent is one decoded bmbt record.
type extent struct {
	off, fsb, count uint64
	unwritten       bool
}

func decodeExtent(rec []byte) extent {
	l0, l1 := be.Uint64(rec), be.Uint64(rec[8:])
	return extent{
		unwritten: l0>>63 != 0,
		off:       (l0 & (1<<63 - 1)) >> 9,
		fsb:       (l0&0x1FF)<<43 | l1>>21,
		count:     l1 & (1<<21 - 1),
	}
}

// maxOff bounds logical block offsets: bmbt startoff has 54 bits.
const maxOff = uint64(1) << 54

// mapBlock maps logical block lblk of inode n to a run starting there.
func (f *FS) mapBlock(n *inode, lblk uint64) (run, error) {
	var r run
	var err error
	if n.realtime {
		return run{}, fmt.Errorf("inode %d: data on the realtime device: %w", n.ino, ErrUnsupported)
	}
	switch n.format {
	case fmtExtents:
		if n.nextents > uint64(len(n.fork)/16) {
			return run{}, fmt.Errorf("inode %d: %d extents in a %d-byte fork: %w", n.ino, n.nextents, len(n.fork), ErrCorrupt)
		}
		r, err = f.mapRecords(n.fork[:16*n.nextents], lblk, maxOff)
	case fmtBtree:
		r, err = f.mapBtree(n, lblk)
	case fmtDev, fmtLocal:
		return run{}, fmt.Errorf("inode %d: data fork format %d has no blocks: %w", n.ino, n.format, ErrCorrupt)
	default:
		return run{}, fmt.Errorf("inode %d: unknown data fork format %d: %w", n.ino, n.format, ErrCorrupt)
	}
	if err != nil {
		return run{}, fmt.Errorf("inode %d block %d: %w", n.ino, lblk, err)
	}
	return r, nil
}

// mapRecords finds lblk among extent records; limit bounds a hole's run
// (the next subtree's first offset).
func (f *FS) mapRecords(recs []byte, lblk, limit uint64) (run, error) {
	next := limit
	for i := 0; i+16 <= len(recs); i += 16 {
		e := decodeExtent(recs[i:])
		if e.count == 0 {
			return run{}, fmt.Errorf("empty extent: %w", ErrCorrupt)
		}
		if lblk >= e.off && lblk < e.off+e.count {
			d := lblk - e.off
			agb := e.fsb & (1<<f.agBlkLog - 1)
			if agb+e.count > f.agBlocks {
				return run{}, fmt.Errorf("extent of %d blocks at %d crosses its AG: %w", e.count, e.fsb, ErrCorrupt)
			}
			disk, err := f.daddr(e.fsb + d)
			if err != nil {
				return run{}, err
			}
			if e.count-d > f.dblocks-disk {
				return run{}, fmt.Errorf("extent past the filesystem: %w", ErrCorrupt)
			}
			return run{disk: disk, length: e.count - d, zero: e.unwritten}, nil
		}
		if e.off > lblk && e.off < next {
			next = e.off
		}
	}
	if lblk >= next {
		return run{}, fmt.Errorf("block %d beyond the map: %w", lblk, ErrCorrupt)
	}
	return run{length: next - lblk, zero: true}, nil
}

// mapBtree descends a bmap btree rooted in the inode. Each block's level
// must be exactly one less than its parent's, so the descent takes at most
// maxBmbtLevel reads and cannot cycle; each block must name n as owner.
func (f *FS) mapBtree(n *inode, lblk uint64) (run, error) {
	if len(n.fork) < 4 {
		return run{}, fmt.Errorf("bmap root too small: %w", ErrCorrupt)
	}
	level := int(be.Uint16(n.fork))
	numrecs := int(be.Uint16(n.fork[2:]))
	maxrecs := (len(n.fork) - 4) / 16
	if level == 0 || level > maxBmbtLevel || numrecs == 0 || numrecs > maxrecs {
		return run{}, fmt.Errorf("bmap root level %d with %d records: %w", level, numrecs, ErrCorrupt)
	}
	keys := n.fork[4 : 4+8*numrecs]
	ptrs := n.fork[4+8*maxrecs : 4+8*maxrecs+8*numrecs]
	limit := maxOff
	for {
		child := -1
		next := limit
		for i := range numrecs {
			k := be.Uint64(keys[8*i:])
			if k <= lblk {
				child = i
			} else if k < next {
				next = k
			}
		}
		if child < 0 {
			return run{length: next - lblk, zero: true}, nil
		}
		limit = next
		fsb := be.Uint64(ptrs[8*child:])
		d, err := f.daddr(fsb)
		if err != nil {
			return run{}, fmt.Errorf("bmap btree: %w", err)
		}
		b, err := f.readFSBlock(fsb)
		if err != nil {
			return run{}, fmt.Errorf("bmap btree: %w", err)
		}
		if err := f.checkBlockHeader(b, int64(d)<<f.blockLog, bmbtCRCOff, 24, 40, fmt.Sprintf("bmap btree block %d", d), n.ino); err != nil {
			return run{}, err
		}
		if string(b[:4]) != "BMA3" {
			return run{}, fmt.Errorf("bmap btree block magic %q: %w", b[:4], ErrCorrupt)
		}
		if got := int(be.Uint16(b[4:])); got != level-1 {
			return run{}, fmt.Errorf("bmap btree block level %d under level %d: %w", got, level, ErrCorrupt)
		}
		if owner := be.Uint64(b[56:]); owner != n.ino {
			return run{}, fmt.Errorf("bmap btree block owned by inode %d: %w", owner, ErrCorrupt)
		}
		level--
		numrecs = int(be.Uint16(b[6:]))
		maxrecs = (len(b) - bmbtHdrSize) / 16
		if numrecs > maxrecs {
			return run{}, fmt.Errorf("bmap btree block with %d records: %w", numrecs, ErrCorrupt)
		}
		if level == 0 {
			return f.mapRecords(b[bmbtHdrSize:bmbtHdrSize+16*numrecs], lblk, limit)
		}
		if numrecs == 0 {
			return run{}, fmt.Errorf("empty bmap btree node: %w", ErrCorrupt)
		}
		keys = b[bmbtHdrSize : bmbtHdrSize+8*numrecs]
		ptrs = b[bmbtHdrSize+8*maxrecs : bmbtHdrSize+8*maxrecs+8*numrecs]
	}
}

// readFile reads file content of inode n at offset off into p, returning
// the bytes read; reads past the end stop at the file size.
func (f *FS) readFile(n *inode, p []byte, off int64) (int, error) {
	if off >= n.size {
		return 0, nil
	}
	if int64(len(p)) > n.size-off {
		p = p[:n.size-off]
	}
	if n.format == fmtLocal {
		if n.size > int64(len(n.fork)) {
			return 0, fmt.Errorf("inode %d: local data of %d bytes in a %d-byte fork: %w", n.ino, n.size, len(n.fork), ErrCorrupt)
		}
		return copy(p, n.fork[off:n.size]), nil
	}
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		r, err := f.mapBlock(n, uint64(pos>>f.blockLog))
		if err != nil {
			return done, err
		}
		inBlock := pos & (f.blockSize - 1)
		avail := int64(min(r.length, uint64(1)<<40))<<f.blockLog - inBlock
		if avail <= 0 {
			return done, fmt.Errorf("inode %d: empty run: %w", n.ino, ErrCorrupt)
		}
		chunk := p[done:min(len(p), done+int(min(avail, int64(len(p)))))]
		if r.zero {
			clear(chunk)
		} else if err := f.readAt(chunk, int64(r.disk)<<f.blockLog+inBlock); err != nil {
			return done, fmt.Errorf("inode %d: %w", n.ino, err)
		}
		done += len(chunk)
	}
	return done, nil
}
