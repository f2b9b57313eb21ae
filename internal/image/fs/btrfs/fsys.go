package btrfs

import (
	"cmp"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/amilint/amilint/internal/image/fs/inodefs"
	"github.com/amilint/amilint/internal/image/rootfs"
)

var _ rootfs.Source = (*FS)(nil)

// inodes is the io/fs view of the filesystem's inodes; FS embeds it for
// its Open, ReadDir, ReadFile, Lstat and ReadLink.
type inodes = inodefs.FS[*inode]

// Inode numbers as inodefs sees them: a subvolume's index (the order this
// reader first met it) in the top 16 bits, the inode's objectid in its
// subvolume below, so that two subvolumes' inodes never share a number.
const (
	subvolShift  = 48
	objectidMask = 1<<subvolShift - 1
	maxSubvols   = 1 << 16
)

// maxLinkLen bounds a symbolic link's target, as PATH_MAX does.
const maxLinkLen = 4096

// Corruption lists the structures that failed their checksums and were
// read as stored, one line each, when the Checker given to OpenWith is
// lenient; it is empty for a strict Checker, whose mismatches are errors.
func (f *FS) Corruption() []string { return f.check.Lines() }

// Subvolume returns the id and name of the subvolume shown as the root.
func (f *FS) Subvolume() (uint64, string) { return f.rootSub.id, f.subName }

// Warnings says what the image read may miss: an fsync log tree not yet
// replayed (an image of a running system).
func (f *FS) Warnings() []string {
	if f.logRoot == 0 {
		return nil
	}
	return []string{"btrfs: the filesystem has a log tree not replayed (not cleanly unmounted: an image of a running system?): " +
		"the tree read is the state last committed and misses files fsynced since"}
}

// Repaired lists, one line each, the tree blocks read so far from their
// second DUP copy because the first failed its checks, as the kernel
// reads them (and rewrites the bad copy): the answer is the kernel's, the
// disk is damaged.
func (f *FS) Repaired() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.warnings)
}

// inode is one inode of one subvolume.
type inode struct {
	sub   *subvol
	obj   uint64
	mode  uint16
	flags uint64
	size  int64
	mtime time.Time

	once    sync.Once
	extents []extent
	extErr  error
}

func (n *inode) ino() uint64 { return uint64(n.sub.idx)<<subvolShift | n.obj }

func (n *inode) attr() inodefs.Attr {
	return inodefs.Attr{Ino: n.ino(), Mode: inodefs.FileMode(n.mode), Size: n.size, ModTime: n.mtime}
}

// disk is the filesystem as inodefs reads it.
type disk struct{ f *FS }

func (d disk) Root() uint64                               { return uint64(d.f.rootSub.idx)<<subvolShift | d.f.rootSub.rootID }
func (d disk) Inode(ino uint64) (*inode, error)           { return d.f.inode(ino) }
func (d disk) Dirents(n *inode) ([]inodefs.Dirent, error) { return d.f.dirents(n) }
func (d disk) Symlink(n *inode) (string, error)           { return d.f.linkTarget(n) }
func (d disk) Attr(n *inode) inodefs.Attr                 { return n.attr() }
func (d disk) Contents(n *inode) (io.ReaderAt, error)     { return content{f: d.f, n: n}, nil }

// subvolByID returns subvolume id, reading its root item the first time;
// nil when the root tree has none (a deleted subvolume).
func (f *FS) subvolByID(id uint64) (*subvol, error) {
	f.mu.Lock()
	i, ok := f.byID[id]
	f.mu.Unlock()
	if ok {
		return f.subvols[i], nil
	}
	var item []byte
	err := f.search(f.rootTree, key{obj: id, typ: typeRootItem}, key{obj: id, typ: typeRootItem, off: 1<<64 - 1}, func(_ key, b []byte) bool {
		item = append(item[:0], b...) // the last (newest) one counts
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("root item of subvolume %d: %w", id, err)
	}
	if item == nil {
		return nil, nil
	}
	if len(item) < 239 {
		return nil, fmt.Errorf("root item of subvolume %d: %d bytes: %w", id, len(item), ErrCorrupt)
	}
	s := &subvol{id: id, rootID: le.Uint64(item[168:]),
		tree: tree{id: id, block: le.Uint64(item[176:]), level: item[238]}}
	if s.tree.level >= maxLevel || s.rootID < firstFreeObjectid || s.rootID > objectidMask {
		return nil, fmt.Errorf("root item of subvolume %d: level %d, root directory %d: %w", id, s.tree.level, s.rootID, ErrCorrupt)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if i, ok := f.byID[id]; ok {
		return f.subvols[i], nil
	}
	if len(f.subvols) >= maxSubvols {
		return nil, fmt.Errorf("over %d subvolumes: %w", maxSubvols, ErrUnsupported)
	}
	s.idx = len(f.subvols)
	f.subvols = append(f.subvols, s)
	f.byID[id] = s.idx
	return s, nil
}

// inode reads inode ino (subvolume index and objectid).
func (f *FS) inode(ino uint64) (*inode, error) {
	idx, obj := int(ino>>subvolShift), ino&objectidMask
	f.mu.Lock()
	var s *subvol
	if idx < len(f.subvols) {
		s = f.subvols[idx]
	}
	f.mu.Unlock()
	if s == nil {
		return nil, fmt.Errorf("inode %d in no subvolume: %w", ino, ErrCorrupt)
	}
	if obj == emptySubvolDirObjc {
		// The kernel shows a deleted subvolume's entry as an empty
		// directory of this number.
		return &inode{sub: s, obj: obj, mode: 0o40755}, nil
	}
	b, err := f.lookup(s.tree, key{obj: obj, typ: typeInodeItem})
	if err != nil {
		return nil, fmt.Errorf("inode %d of subvolume %d: %w", obj, s.id, err)
	}
	if b == nil {
		return nil, fmt.Errorf("inode %d of subvolume %d: no inode item: %w", obj, s.id, ErrCorrupt)
	}
	if len(b) < 160 {
		return nil, fmt.Errorf("inode %d of subvolume %d: item of %d bytes: %w", obj, s.id, len(b), ErrCorrupt)
	}
	size := le.Uint64(b[16:])
	if size > 1<<62 {
		return nil, fmt.Errorf("inode %d of subvolume %d: size %d: %w", obj, s.id, size, ErrCorrupt)
	}
	mode := le.Uint32(b[52:])
	mt := time.Unix(int64(le.Uint64(b[136:])), int64(le.Uint32(b[144:])%1e9)).UTC()
	return &inode{sub: s, obj: obj, mode: uint16(mode), flags: le.Uint64(b[64:]), size: int64(size), mtime: mt}, nil
}

// dirents lists directory n's DIR_INDEX items, as the kernel's readdir
// does; an entry naming a subvolume leads to that subvolume's root.
func (f *FS) dirents(n *inode) ([]inodefs.Dirent, error) {
	if n.obj == emptySubvolDirObjc {
		return nil, nil
	}
	var out []inodefs.Dirent
	var perr error
	lo, hi := key{obj: n.obj, typ: typeDirIndex}, key{obj: n.obj, typ: typeDirIndex, off: 1<<64 - 1}
	err := f.search(n.sub.tree, lo, hi, func(_ key, b []byte) bool {
		var ents []dirItem
		if ents, perr = parseDirItems(b); perr != nil {
			return false
		}
		for _, e := range ents {
			if len(out) >= inodefs.MaxDirents {
				perr = fmt.Errorf("directory %d: over %d entries: %w", n.obj, inodefs.MaxDirents, ErrCorrupt)
				return false
			}
			d := inodefs.Dirent{Name: e.name, Type: e.typ}
			switch e.loc.typ {
			case typeInodeItem:
				if e.loc.obj > objectidMask || e.loc.obj < firstFreeObjectid {
					perr = fmt.Errorf("directory %d: entry %q for inode %d: %w", n.obj, e.name, e.loc.obj, ErrCorrupt)
					return false
				}
				d.Ino = uint64(n.sub.idx)<<subvolShift | e.loc.obj
			case typeRootItem:
				s, err := f.subvolByID(e.loc.obj)
				if err != nil {
					perr = err
					return false
				}
				if s == nil {
					d.Ino = uint64(n.sub.idx)<<subvolShift | emptySubvolDirObjc
				} else {
					d.Ino = uint64(s.idx)<<subvolShift | s.rootID
				}
				d.Type = 2
			default:
				perr = fmt.Errorf("directory %d: entry %q of location type %d: %w", n.obj, e.name, e.loc.typ, ErrCorrupt)
				return false
			}
			out = append(out, d)
		}
		return true
	})
	if err == nil {
		err = perr
	}
	if err != nil {
		return nil, fmt.Errorf("directory %d of subvolume %d: %w", n.obj, n.sub.id, err)
	}
	return out, nil
}

// dirItem is one entry of a DIR_ITEM or DIR_INDEX item.
type dirItem struct {
	loc  key
	typ  byte
	name string
}

// parseDirItems parses the btrfs_dir_item entries of one item; xattr
// entries are left out.
func parseDirItems(b []byte) ([]dirItem, error) {
	var out []dirItem
	for len(b) > 0 {
		if len(b) < 30 {
			return nil, fmt.Errorf("dir item of %d bytes: %w", len(b), ErrCorrupt)
		}
		dataLen, nameLen := int(le.Uint16(b[25:])), int(le.Uint16(b[27:]))
		if nameLen == 0 || nameLen > 255 || 30+nameLen+dataLen > len(b) {
			return nil, fmt.Errorf("dir item: name of %d bytes, data of %d in %d: %w", nameLen, dataLen, len(b), ErrCorrupt)
		}
		e := dirItem{loc: readKey(b), typ: b[29], name: string(b[30 : 30+nameLen])}
		b = b[30+nameLen+dataLen:]
		if e.typ == 8 { // BTRFS_FT_XATTR
			continue
		}
		if e.name == "." || e.name == ".." || strings.ContainsAny(e.name, "/\x00") {
			return nil, fmt.Errorf("dir item: name %q: %w", e.name, ErrCorrupt)
		}
		out = append(out, e)
	}
	return out, nil
}

// extent is one EXTENT_DATA item of a file.
type extent struct {
	fileOff uint64
	typ     uint8 // 0 inline, 1 regular, 2 prealloc
	comp    uint8
	ram     uint64
	inline  []byte
	// regular and prealloc: where the extent is on disk, and which part
	// of it (after decompression) the file uses.
	diskBytenr, diskNum, offset, num uint64
}

// length is the bytes of the file the extent covers.
func (e *extent) length() uint64 {
	if e.typ == 0 {
		return e.ram
	}
	return e.num
}

// maxExtents bounds the extent items read of one file.
const maxExtents = 1 << 20

// fileExtents reads file n's extent items, in file order.
func (f *FS) fileExtents(n *inode) ([]extent, error) {
	n.once.Do(func() {
		var perr error
		lo, hi := key{obj: n.obj, typ: typeExtentData}, key{obj: n.obj, typ: typeExtentData, off: 1<<64 - 1}
		err := f.search(n.sub.tree, lo, hi, func(k key, b []byte) bool {
			if len(n.extents) >= maxExtents {
				perr = fmt.Errorf("over %d extents: %w", maxExtents, ErrCorrupt)
				return false
			}
			var e extent
			if e, perr = f.parseExtent(k.off, b); perr != nil {
				return false
			}
			n.extents = append(n.extents, e)
			return true
		})
		if err == nil {
			err = perr
		}
		if err != nil {
			n.extErr = fmt.Errorf("extents of inode %d of subvolume %d: %w", n.obj, n.sub.id, err)
		}
	})
	return n.extents, n.extErr
}

func (f *FS) parseExtent(off uint64, b []byte) (extent, error) {
	if len(b) < 21 {
		return extent{}, fmt.Errorf("extent at %d: %d bytes: %w", off, len(b), ErrCorrupt)
	}
	e := extent{fileOff: off, ram: le.Uint64(b[8:]), comp: b[16], typ: b[20]}
	if b[17] != 0 || le.Uint16(b[18:]) != 0 {
		return e, fmt.Errorf("extent at %d: encrypted or encoded: %w", off, ErrUnsupported)
	}
	if e.comp > compZstd {
		return e, fmt.Errorf("extent at %d: compression type %d: %w", off, e.comp, ErrUnsupported)
	}
	switch e.typ {
	case 0:
		e.inline = b[21:]
		if e.comp == compNone {
			e.ram = uint64(len(e.inline))
		}
		if e.ram > maxCompressed {
			return e, fmt.Errorf("inline extent at %d of %d bytes: %w", off, e.ram, ErrCorrupt)
		}
	case 1, 2:
		if len(b) < 53 {
			return e, fmt.Errorf("extent at %d: %d bytes: %w", off, len(b), ErrCorrupt)
		}
		e.diskBytenr, e.diskNum, e.offset, e.num = le.Uint64(b[21:]), le.Uint64(b[29:]), le.Uint64(b[37:]), le.Uint64(b[45:])
		if e.num > 1<<62 || off+e.num < off {
			return e, fmt.Errorf("extent at %d of %d bytes: %w", off, e.num, ErrCorrupt)
		}
		if e.comp != compNone && e.diskBytenr != 0 && (e.diskNum > maxCompressed || e.ram > maxCompressed || e.offset > e.ram || e.num > e.ram-e.offset) {
			return e, fmt.Errorf("compressed extent at %d (%d bytes on disk, %d decompressed, %d at %d used): %w", off, e.diskNum, e.ram, e.num, e.offset, ErrCorrupt)
		}
	default:
		return e, fmt.Errorf("extent at %d of type %d: %w", off, e.typ, ErrCorrupt)
	}
	return e, nil
}

// content reads a regular file's contents.
type content struct {
	f *FS
	n *inode
}

func (c content) ReadAt(p []byte, off int64) (int, error) {
	got, err := c.f.readFile(c.n, p, off)
	if err == nil && got < len(p) {
		err = io.EOF
	}
	return got, err
}

// readFile reads file n at off: extents as stored, zeros for holes
// (explicit or, under NO_HOLES, implicit) and preallocated extents.
func (f *FS) readFile(n *inode, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fs.ErrInvalid
	}
	if off >= n.size {
		return 0, nil
	}
	end := min(n.size, off+int64(len(p)))
	p = p[:end-off]
	clear(p)
	exts, err := f.fileExtents(n)
	if err != nil {
		return 0, err
	}
	// The first extent that may reach off: the last starting at or before.
	i, _ := slices.BinarySearchFunc(exts, uint64(off), func(e extent, o uint64) int { return cmp.Compare(e.fileOff, o) })
	if i > 0 {
		i--
	}
	for ; i < len(exts) && int64(exts[i].fileOff) < end; i++ {
		e := &exts[i]
		s, t := max(int64(e.fileOff), off), min(end, int64(e.fileOff+e.length()))
		if s >= t {
			continue
		}
		dst := p[s-off : t-off]
		in := uint64(s) - e.fileOff // offset into the extent's file range
		switch {
		case e.typ == 0:
			data := e.inline
			if e.comp != compNone {
				if data, err = decompress(e.comp, e.inline, int(e.ram), int(f.sectorSize)); err != nil {
					return 0, fmt.Errorf("inode %d of subvolume %d: %w", n.obj, n.sub.id, err)
				}
			}
			if in < uint64(len(data)) {
				copy(dst, data[in:])
			}
		case e.typ == 2 || e.diskBytenr == 0:
			// prealloc or a hole: zeros.
		case e.comp == compNone:
			if err := f.readData(n, e, dst, e.diskBytenr+e.offset+in); err != nil {
				return 0, fmt.Errorf("inode %d of subvolume %d: extent at %d: %w", n.obj, n.sub.id, e.fileOff, err)
			}
		default:
			data, err := f.compressedExtent(n, e)
			if err != nil {
				return 0, fmt.Errorf("inode %d of subvolume %d: extent at %d: %w", n.obj, n.sub.id, e.fileOff, err)
			}
			copy(dst, data[e.offset+in:])
		}
	}
	return len(p), nil
}

// compressedExtent reads and decompresses a regular compressed extent,
// through a one-entry cache: sequential reads come in pieces smaller
// than an extent.
func (f *FS) compressedExtent(n *inode, e *extent) ([]byte, error) {
	f.mu.Lock()
	k := extentKey{e.diskBytenr, e.diskNum, e.ram, e.comp}
	if f.lastExtent == k && f.lastData != nil {
		d := f.lastData
		f.mu.Unlock()
		return d, nil
	}
	f.mu.Unlock()
	src := make([]byte, e.diskNum)
	if err := f.readLogical(src, e.diskBytenr); err != nil {
		return nil, err
	}
	// The checksums cover the extent as stored, compressed.
	if err := f.verifyData(n, src, e.diskBytenr); err != nil {
		return nil, err
	}
	data, err := decompress(e.comp, src, int(e.ram), int(f.sectorSize))
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.lastExtent, f.lastData = k, data
	f.mu.Unlock()
	return data, nil
}

// extentKey names a compressed extent's decompressed bytes.
type extentKey struct {
	bytenr, num, ram uint64
	comp             uint8
}

// linkTarget reads a symlink's target, stored as its file contents.
func (f *FS) linkTarget(n *inode) (string, error) {
	if n.size <= 0 || n.size > maxLinkLen {
		return "", fmt.Errorf("symlink %d of subvolume %d of %d bytes: %w", n.obj, n.sub.id, n.size, ErrCorrupt)
	}
	b := make([]byte, n.size)
	if _, err := f.readFile(n, b, 0); err != nil {
		return "", err
	}
	if strings.IndexByte(string(b), 0) >= 0 {
		return "", fmt.Errorf("symlink %d of subvolume %d: a NUL byte in its target: %w", n.obj, n.sub.id, ErrCorrupt)
	}
	return string(b), nil
}

// lookupInode returns the inode name denotes, following no links.
func lookupInode(f *FS, name string) (*inode, error) { return inodefs.Lookup(f.inodes, "lookup", name) }
