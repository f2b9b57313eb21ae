package btrfs

import (
	"fmt"
)

// The checksum tree (BTRFS_CSUM_TREE_OBJECTID) and its items: key
// (EXTENT_CSUM_OBJECTID, EXTENT_CSUM, logical address), data the
// checksums of the sectors from there on, one after another.
const (
	csumTreeObjectid   = 7
	extentCsumObjectid = 1<<64 - 10
	typeExtentCsum     = 128
	inodeNoDataSum     = 1 << 0 // BTRFS_INODE_NODATASUM
)

// findCsumTree finds the checksum tree's root, if there is one.
func (f *FS) findCsumTree() error {
	var item []byte
	err := f.search(f.rootTree, key{obj: csumTreeObjectid, typ: typeRootItem}, key{obj: csumTreeObjectid, typ: typeRootItem, off: 1<<64 - 1}, func(_ key, b []byte) bool {
		item = append(item[:0], b...)
		return true
	})
	if err != nil {
		return fmt.Errorf("root tree: checksum tree: %w", err)
	}
	if item == nil {
		return nil
	}
	if len(item) < 239 || item[238] >= maxLevel {
		return fmt.Errorf("root item of the checksum tree: %w", ErrCorrupt)
	}
	f.csumTree = &tree{id: csumTreeObjectid, block: le.Uint64(item[176:]), level: item[238]}
	return nil
}

// readData reads file n's data at logical address l into dst, reading the
// whole sectors around it to check them against the checksum tree.
func (f *FS) readData(n *inode, e *extent, dst []byte, l uint64) error {
	if f.csumTree == nil || n.flags&inodeNoDataSum != 0 {
		return f.readLogical(dst, l)
	}
	ss := uint64(f.sectorSize)
	lo := l - (l-e.diskBytenr)%ss
	hi := l + uint64(len(dst))
	if r := (hi - e.diskBytenr) % ss; r != 0 {
		hi += ss - r
	}
	hi = min(hi, e.diskBytenr+e.diskNum)
	if hi < l+uint64(len(dst)) || (hi-lo)%ss != 0 {
		// An extent that does not end on a sector: read as it is.
		return f.readLogical(dst, l)
	}
	buf := make([]byte, hi-lo)
	if err := f.readLogical(buf, lo); err != nil {
		return err
	}
	if err := f.verifyData(n, buf, lo); err != nil {
		return err
	}
	copy(dst, buf[l-lo:])
	return nil
}

// verifyData checks the sectors of data, read at logical address l (on a
// sector), against the checksum tree, as the kernel checks a data read
// (btrfs_check_read_bio); a sector with no checksum stored is read as it
// is.
func (f *FS) verifyData(n *inode, data []byte, l uint64) error {
	if f.csumTree == nil || n.flags&inodeNoDataSum != 0 || len(data) == 0 {
		return nil
	}
	ss, cs := uint64(f.sectorSize), uint64(f.csumSize())
	if uint64(len(data))%ss != 0 {
		return nil
	}
	// An item holds at most a leaf's worth of checksums: start the
	// search that far back.
	span := uint64(f.nodeSize) / cs * ss
	from := uint64(0)
	if l > span {
		from = l - span
	}
	end := l + uint64(len(data))
	var perr error
	err := f.search(*f.csumTree, key{obj: extentCsumObjectid, typ: typeExtentCsum, off: from},
		key{obj: extentCsumObjectid, typ: typeExtentCsum, off: end - 1}, func(k key, b []byte) bool {
			start := k.off
			if start%ss != l%ss {
				perr = fmt.Errorf("checksum item at %d, not on a sector: %w", start, ErrCorrupt)
				return false
			}
			count := uint64(len(b)) / cs
			for i := range count {
				at := start + i*ss
				if at < l {
					continue
				}
				if at >= end {
					return false
				}
				sec := data[at-l : at-l+ss]
				if got := f.sum(sec); string(got) != string(b[i*cs:(i+1)*cs]) {
					if perr = f.mismatch(fmt.Sprintf("data sector %d", at), n.ino()); perr != nil {
						return false
					}
				}
			}
			return true
		})
	if err == nil {
		err = perr
	}
	return err
}
