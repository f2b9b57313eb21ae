package ext4

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/amilint/amilint/internal/image/fs/inodefs"
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
	for lblk := uint64(0); lblk < nblocks; {
		r, err := f.mapBlock(n, lblk)
		if err != nil {
			return nil, fmt.Errorf("directory %d: %w", n.ino, err)
		}
		cnt := min(r.length, nblocks-lblk)
		if !r.zero {
			for i := uint64(0); i < cnt; i++ {
				b, err := f.readBlock(r.phys + i)
				if err != nil {
					return nil, fmt.Errorf("directory %d: %w", n.ino, err)
				}
				if out, err = f.parseDirents(b, n.ino, out); err != nil {
					return nil, err
				}
			}
		}
		lblk += cnt
	}
	return out, nil
}
