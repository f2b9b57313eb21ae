package ext4

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/amilint/amilint/internal/image/fs/inodefs"
	"github.com/amilint/amilint/internal/image/integrity"
	"github.com/amilint/amilint/internal/image/readahead"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// dirent is one directory entry; its Type is EXT4_FT_*, 0 when the
// filesystem has no filetype feature.
type dirent = inodefs.Dirent

// parseDirents appends the live entries of one directory block (or of an
// inline directory's data) to out, skipping "." and "..", deleted entries
// (inode 0), the htree's fake entries and the metadata_csum tail.
func (f *FS) parseDirents(b []byte, dirIno uint64, out []dirent) ([]dirent, error) {
	le := binary.LittleEndian
	for off := 0; off < len(b); {
		if off+8 > len(b) {
			return out, fmt.Errorf("directory %d: entry header past the block: %w", dirIno, ErrCorrupt)
		}
		ino := uint64(le.Uint32(b[off:]))
		recLen := int(le.Uint16(b[off+4:]))
		if f.blockSize >= 65536 { // ext4_rec_len_from_disk
			if recLen == 65535 || recLen == 0 {
				recLen = 65536
			} else {
				recLen = recLen&65532 | (recLen&3)<<16
			}
		}
		nameLen := int(b[off+6])
		ftype := b[off+7]
		if f.incompat&incompatFiletype == 0 {
			nameLen |= int(ftype) << 8
			ftype = 0
		}
		if recLen < 8 || recLen%4 != 0 || off+recLen > len(b) {
			return out, fmt.Errorf("directory %d: record length %d at %d: %w", dirIno, recLen, off, ErrCorrupt)
		}
		if ino != 0 {
			if 8+nameLen > recLen {
				return out, fmt.Errorf("directory %d: name of %d bytes in a %d-byte record: %w", dirIno, nameLen, recLen, ErrCorrupt)
			}
			name := string(b[off+8 : off+8+nameLen])
			switch {
			case name == "." || name == "..":
			case name == "" || strings.ContainsAny(name, "/\x00"):
				return out, fmt.Errorf("directory %d: invalid entry name %q: %w", dirIno, name, ErrCorrupt)
			default:
				out = append(out, dirent{Name: name, Ino: ino, Type: ftype})
			}
		}
		off += recLen
	}
	return out, nil
}

// maxDirBytes bounds the size of a directory a listing reads. Its blocks
// may be distinct in the filesystem and still one cluster of a qcow2 disk,
// which can map millions of guest clusters to one host cluster; blocks
// holding only deleted entries add nothing to inodefs.MaxDirents' count,
// so each one read would cost a read and a place in the duplicate check,
// millions of times over. 256 MiB holds eight times MaxDirents entries of
// the shortest names; a directory only grows that large from having held
// millions of files, which a listing would refuse anyway.
var maxDirBytes int64 = 256 << 20

// readDirents lists directory inode n. An htree directory is read linearly:
// its leaves are ordinary directory blocks and its index blocks look like
// one deleted entry spanning the block.
func (f *FS) readDirents(n *inode) ([]dirent, error) {
	if !n.isDir() {
		return nil, fmt.Errorf("inode %d: %w", n.ino, rootfs.ErrNotDir)
	}
	if n.flags&flagEncrypt != 0 {
		return nil, fmt.Errorf("directory %d is encrypted: %w", n.ino, ErrUnsupported)
	}
	var out []dirent
	if n.flags&flagInlineData != 0 {
		data, err := f.inlineData(n)
		if err != nil {
			return nil, err
		}
		// The first four bytes hold the parent's inode number; entries
		// follow in i_block and continue in the system.data value.
		if out, err = f.parseDirents(data[4:iBlockLen], n.ino, out); err != nil {
			return nil, err
		}
		if len(data) > iBlockLen {
			if out, err = f.parseDirents(data[iBlockLen:], n.ino, out); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	if n.size%f.blockSize != 0 {
		return nil, fmt.Errorf("directory %d: size %d not a multiple of the block size: %w", n.ino, n.size, ErrCorrupt)
	}
	nblocks := uint64(n.size / f.blockSize)
	if nblocks > f.blocksCount {
		return nil, fmt.Errorf("directory %d: %d blocks in a %d-block filesystem: %w", n.ino, nblocks, f.blocksCount, ErrCorrupt)
	}
	if n.size > maxDirBytes {
		return nil, fmt.Errorf("directory %d: %d bytes, more than %d: %w", n.ino, n.size, maxDirBytes, ErrUnsupported)
	}
	if f.hints && nblocks > 1 {
		f.hintBlocks(n, nblocks)
	}
	// A directory's blocks are its own, each once (e2fsck: multiply-claimed
	// blocks): a map naming one block again and again would multiply its
	// entries by the device's size.
	seen := map[uint64]bool{}
	for lblk := uint64(0); lblk < nblocks; {
		r, err := f.mapBlock(n, lblk)
		if err != nil {
			return nil, fmt.Errorf("directory %d: %w", n.ino, err)
		}
		cnt := min(r.length, nblocks-lblk)
		if !r.zero {
			for i := uint64(0); i < cnt; i++ {
				if seen[r.phys+i] {
					return nil, fmt.Errorf("directory %d: block %d mapped twice: %w", n.ino, r.phys+i, ErrCorrupt)
				}
				seen[r.phys+i] = true
				b, err := f.readBlock(r.phys + i)
				if err != nil {
					return nil, fmt.Errorf("directory %d: %w", n.ino, err)
				}
				if err := f.checkDirBlock(n, b, lblk+i, r.phys+i); err != nil {
					return nil, err
				}
				if out, err = f.parseDirents(b, n.ino, out); err != nil {
					return nil, err
				}
				if len(out) > inodefs.MaxDirents {
					return nil, fmt.Errorf("directory %d: more than %d entries: %w", n.ino, inodefs.MaxDirents, ErrUnsupported)
				}
			}
		}
		lblk += cnt
	}
	return out, nil
}

// maxHintBlocks bounds the blocks of a directory hintBlocks tells of.
const maxHintBlocks = 256

// hintBlocks tells the device (readahead.Hint) of the first nblocks
// blocks of directory n, up to maxHintBlocks, before they are read one
// after another: on a remote disk they come side by side. What cannot be
// mapped is left for the reading to report.
func (f *FS) hintBlocks(n *inode, nblocks uint64) {
	nblocks = min(nblocks, maxHintBlocks)
	for lblk := uint64(0); lblk < nblocks; {
		r, err := f.mapBlock(n, lblk)
		if err != nil || r.length == 0 {
			return
		}
		cnt := min(r.length, nblocks-lblk)
		if !r.zero && r.phys < f.blocksCount {
			readahead.Hint(f.r, int64(r.phys)*f.blockSize, int64(min(cnt, f.blocksCount-r.phys))*f.blockSize)
		}
		lblk += cnt
	}
}

// checkDirBlock verifies block blk, logical block lblk of directory n, as
// __ext4_read_dirblock does with metadata_csum: an htree node (block 0 of
// an indexed directory, or one whose first entry spans the block) by the
// dx_tail after its index entries, a leaf by the 12-byte tail entry that
// ends it.
func (f *FS) checkDirBlock(n *inode, b []byte, lblk, blk uint64) error {
	if !f.csum {
		return nil
	}
	le := binary.LittleEndian
	if f.dirIndex && n.flags&flagIndex != 0 && (lblk == 0 || f.recLen(b[4:]) == len(b)) {
		if dxNodeOK(b, n.seed, f.recLen) {
			return nil
		}
		return f.mismatch(fmt.Sprintf("htree node block %d", blk), n.ino)
	}
	t := b[len(b)-12:]
	if le.Uint32(t) == 0 && f.recLen(t[4:]) == 12 && t[6] == 0 && t[7] == 0xDE &&
		integrity.CRC32CRaw(n.seed, b[:len(b)-12]) == le.Uint32(t[8:]) {
		return nil
	}
	return f.mismatch(fmt.Sprintf("directory block %d", blk), n.ino)
}

// recLen decodes a directory entry's record length (ext4_rec_len_from_disk).
func (f *FS) recLen(b []byte) int {
	r := int(binary.LittleEndian.Uint16(b))
	if f.blockSize >= 65536 {
		if r == 65535 || r == 0 {
			return 65536
		}
		return r&65532 | (r&3)<<16
	}
	return r
}

// dxNodeOK checks an htree node's checksum as ext4_dx_csum_verify does: the
// root (after the "." and ".." entries and the root info) or an interior
// node (after one empty entry spanning the block) holds limit and count,
// then the index entries, then at entry limit the dx_tail with the CRC32C
// of the header, the count entries in use and the tail's reserved word.
func dxNodeOK(b []byte, seed uint32, recLen func([]byte) int) bool {
	le := binary.LittleEndian
	var countOff int
	switch recLen(b[4:]) {
	case len(b):
		countOff = 8
	case 12:
		if recLen(b[16:]) != len(b)-12 || le.Uint32(b[24:]) != 0 || b[29] != 8 {
			return false
		}
		countOff = 32
	default:
		return false
	}
	limit, count := int(le.Uint16(b[countOff:])), int(le.Uint16(b[countOff+2:]))
	tail := countOff + 8*limit
	if count > limit || tail+8 > len(b) {
		return false
	}
	c := integrity.CRC32CRaw(seed, b[:countOff+8*count])
	c = integrity.CRC32CRaw(c, b[tail:tail+4])
	c = integrity.CRC32CRaw(c, []byte{0, 0, 0, 0})
	return c == le.Uint32(b[tail+4:])
}
