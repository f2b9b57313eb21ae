package xfs

import (
	"fmt"
	"strings"

	"github.com/amilint/amilint/internal/image/fs/inodefs"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// dirent is one directory entry; its Type is XFS_DIR3_FT_*, 0 without
// the ftype feature.
type dirent = inodefs.Dirent

// leafOffset is the byte offset in a directory's data fork where the leaf
// and free-index blocks start; data blocks lie below it (32 GiB).
const leafOffset = int64(32) << 30

const (
	dataHdrSize = 64 // xfs_dir3_data_hdr
)

// addEntry validates a name and appends the entry unless it is "." or "..".
func addEntry(out []dirent, dirIno uint64, name []byte, ino uint64, ftype byte) ([]dirent, error) {
	s := string(name)
	switch {
	case s == "." || s == "..":
		return out, nil
	case s == "" || strings.ContainsAny(s, "/\x00"):
		return out, fmt.Errorf("directory %d: invalid entry name %q: %w", dirIno, s, ErrCorrupt)
	}
	return append(out, dirent{Name: s, Ino: ino, Type: ftype}), nil
}

// readDirents lists directory inode n: a short-form directory in the
// inode, or the data blocks of a block, leaf or node directory (those below
// leafOffset; the leaf and free blocks above it only index them).
func (f *FS) readDirents(n *inode) ([]dirent, error) {
	if !n.isDir() {
		return nil, fmt.Errorf("inode %d: %w", n.ino, rootfs.ErrNotDir)
	}
	hasFtype := f.incompat&incompatFtype != 0
	if n.format == fmtLocal {
		return f.shortform(n, hasFtype)
	}
	if n.format != fmtExtents && n.format != fmtBtree {
		return nil, fmt.Errorf("directory %d: data fork format %d: %w", n.ino, n.format, ErrCorrupt)
	}
	size := min(n.size, leafOffset)
	if uint64(size>>f.blockLog) > f.dblocks {
		return nil, fmt.Errorf("directory %d: size %d exceeds the filesystem: %w", n.ino, n.size, ErrCorrupt)
	}
	perDirBlk := uint64(1) << f.dirBlkLog
	end := (uint64(size) + uint64(f.dirBlkSize) - 1) >> f.blockLog
	end = (end + perDirBlk - 1) &^ (perDirBlk - 1)
	var out []dirent
	buf := make([]byte, f.dirBlkSize)
	// A directory's blocks are its own, each once (xfs_repair: a block
	// claimed twice): records naming one block again and again would
	// multiply its entries.
	seen := map[uint64]bool{}
	block := func(at int64) error {
		if seen[uint64(at)] {
			return fmt.Errorf("directory %d: block %d mapped twice: %w", n.ino, at>>f.blockLog, ErrCorrupt)
		}
		seen[uint64(at)] = true
		var err error
		if out, err = f.dataBlock(n, buf, at, hasFtype, out); err != nil {
			return err
		}
		if len(out) > inodefs.MaxDirents {
			return fmt.Errorf("directory %d: more than %d entries: %w", n.ino, inodefs.MaxDirents, ErrUnsupported)
		}
		return nil
	}
	for lblk := uint64(0); lblk < end; {
		r, err := f.mapBlock(n, lblk)
		if err != nil {
			return nil, fmt.Errorf("directory %d: %w", n.ino, err)
		}
		if r.zero {
			// Skip the hole, to the next directory block boundary.
			lblk = (lblk + r.length + perDirBlk - 1) &^ (perDirBlk - 1)
			continue
		}
		if lblk%perDirBlk != 0 {
			return nil, fmt.Errorf("directory %d: data block at unaligned offset %d: %w", n.ino, lblk, ErrCorrupt)
		}
		if r.length >= perDirBlk {
			// Whole directory blocks in this run: read them in turn
			// without mapping each again.
			cnt := min(r.length&^(perDirBlk-1), end-lblk)
			for k := uint64(0); k < cnt; k += perDirBlk {
				at := int64(r.disk+k) << f.blockLog
				if err := f.readAt(buf, at); err != nil {
					return nil, fmt.Errorf("directory %d: %w", n.ino, err)
				}
				if err := block(at); err != nil {
					return nil, err
				}
			}
			lblk += cnt
			continue
		}
		// A directory block split between extents: gather its filesystem
		// blocks one by one. Its header records its first block.
		first := int64(r.disk) << f.blockLog
		for i := uint64(0); i < perDirBlk; i++ {
			part := buf[int64(i)<<f.blockLog : int64(i+1)<<f.blockLog]
			if i > 0 {
				if r, err = f.mapBlock(n, lblk+i); err != nil {
					return nil, fmt.Errorf("directory %d: %w", n.ino, err)
				}
			}
			if r.zero {
				return nil, fmt.Errorf("directory %d: hole inside a directory block: %w", n.ino, ErrCorrupt)
			}
			if err := f.readAt(part, int64(r.disk)<<f.blockLog); err != nil {
				return nil, fmt.Errorf("directory %d: %w", n.ino, err)
			}
		}
		if err := block(first); err != nil {
			return nil, err
		}
		lblk += perDirBlk
	}
	return out, nil
}

// shortform parses a directory stored in the inode's data fork.
func (f *FS) shortform(n *inode, hasFtype bool) ([]dirent, error) {
	b := n.fork
	if n.size < int64(len(b)) {
		b = b[:n.size]
	}
	if len(b) < 6 {
		return nil, fmt.Errorf("directory %d: short-form header: %w", n.ino, ErrCorrupt)
	}
	count, i8 := int(b[0]), b[1] != 0
	inoLen := 4
	if i8 {
		inoLen = 8
	}
	pos := 2 + inoLen
	var out []dirent
	for range count {
		if pos+3 > len(b) {
			return nil, fmt.Errorf("directory %d: short-form entry past the fork: %w", n.ino, ErrCorrupt)
		}
		nameLen := int(b[pos])
		entLen := 3 + nameLen + inoLen
		if hasFtype {
			entLen++
		}
		if pos+entLen > len(b) {
			return nil, fmt.Errorf("directory %d: short-form entry past the fork: %w", n.ino, ErrCorrupt)
		}
		name := b[pos+3 : pos+3+nameLen]
		p := pos + 3 + nameLen
		var ftype byte
		if hasFtype {
			ftype = b[p]
			p++
		}
		var ino uint64
		if i8 {
			ino = be.Uint64(b[p:])
		} else {
			ino = uint64(be.Uint32(b[p:]))
		}
		var err error
		if out, err = addEntry(out, n.ino, name, ino, ftype); err != nil {
			return nil, err
		}
		pos += entLen
	}
	return out, nil
}

// dataBlock parses one directory data block, read at byte at: "XDB3" (a
// block directory, whose leaf entries and tail fill the block's end) or
// "XDD3". Its header's CRC, block number and UUID are checked first.
func (f *FS) dataBlock(n *inode, b []byte, at int64, hasFtype bool, out []dirent) ([]dirent, error) {
	if err := f.checkBlockHeader(b, at, dirCRCOff, 8, 24, fmt.Sprintf("directory block %d", at>>f.blockLog), n.ino); err != nil {
		return nil, err
	}
	magic := string(b[:4])
	end := len(b)
	switch magic {
	case "XDB3":
		count := int64(be.Uint32(b[end-8:]))
		if count > int64(end-dataHdrSize-8)/8 {
			return nil, fmt.Errorf("directory %d: %d leaf entries in a block: %w", n.ino, count, ErrCorrupt)
		}
		end -= 8 + int(count)*8
	case "XDD3":
	default:
		return nil, fmt.Errorf("directory %d: data block magic %q: %w", n.ino, magic, ErrCorrupt)
	}
	if owner := be.Uint64(b[40:]); owner != n.ino {
		return nil, fmt.Errorf("directory %d: data block owned by inode %d: %w", n.ino, owner, ErrCorrupt)
	}
	for pos := dataHdrSize; pos < end; {
		if end-pos < 8 {
			return nil, fmt.Errorf("directory %d: entry past the block: %w", n.ino, ErrCorrupt)
		}
		if be.Uint16(b[pos:]) == 0xFFFF { // an unused region
			length := int(be.Uint16(b[pos+2:]))
			if length < 8 || length%8 != 0 || length > end-pos {
				return nil, fmt.Errorf("directory %d: free region of %d bytes: %w", n.ino, length, ErrCorrupt)
			}
			pos += length
			continue
		}
		if end-pos < 16 {
			return nil, fmt.Errorf("directory %d: entry past the block: %w", n.ino, ErrCorrupt)
		}
		ino := be.Uint64(b[pos:])
		nameLen := int(b[pos+8])
		raw := 8 + 1 + nameLen + 2
		if hasFtype {
			raw++
		}
		entLen := (raw + 7) &^ 7
		if entLen > end-pos {
			return nil, fmt.Errorf("directory %d: entry of %d bytes past the block: %w", n.ino, entLen, ErrCorrupt)
		}
		var ftype byte
		if hasFtype {
			ftype = b[pos+9+nameLen]
		}
		var err error
		if out, err = addEntry(out, n.ino, b[pos+9:pos+9+nameLen], ino, ftype); err != nil {
			return nil, err
		}
		pos += entLen
	}
	return out, nil
}
