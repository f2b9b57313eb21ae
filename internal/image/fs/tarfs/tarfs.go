// Package tarfs owns tarball image roots: it indexes a .tar, .tar.gz or
// .tar.zst (docker export style or plain) in one pass and serves it as a
// rootfs.Source. Names are cleaned and clamped at the root, so no entry can
// land outside it; symbolic links are kept as links and hard links share
// their target's content; whiteouts are ignored; a later entry for the same
// name replaces an earlier one, as extraction would. Contents of an
// uncompressed tarball are re-read from their offsets; a compressed one's
// small files are kept in memory (up to a cap) and larger ones are streamed
// again from the tarball when opened, and every chunk of such a re-read is
// checked against what the first, verified reading saw before any byte of
// it is returned. A tarball that can be read only once
// (standard input) is indexed by OpenStream, which keeps the contents of
// configuration files and the metadata of everything else. It never writes
// anything.
package tarfs

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/amilint/amilint/internal/image/integrity"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// ErrCorrupt reports a tarball that cannot be read to its end.
var ErrCorrupt = errors.New("corrupt tarball")

// ErrTooLarge reports a compressed tarball whose small files' contents
// exceed Options.MaxMemory, or one with more than Options.MaxEntries
// entries.
var ErrTooLarge = errors.New("tarball too large to hold in memory")

// ErrNotKept reports opening a file of a tarball read from a stream whose
// content was not kept (see OpenStream); its metadata is there.
var ErrNotKept = errors.New("content not kept: the tarball was read once from a stream")

// Defaults for Options.
const (
	DefaultMaxMemory  = 1 << 30
	DefaultMaxHeld    = 64 << 10
	DefaultMaxEntries = 4 << 20
)

// Options bound what Open keeps.
type Options struct {
	// MaxMemory caps the bytes of file content held in memory for a
	// compressed tarball (0 means DefaultMaxMemory). An uncompressed
	// tarball's contents are re-read from it and do not count.
	MaxMemory int64
	// MaxHeld is the size up to which a compressed tarball's files are
	// held in memory (0 means DefaultMaxHeld); larger files are streamed
	// again from the tarball when opened, which costs a decompression of
	// everything before them.
	MaxHeld int64
	// MaxEntries caps the number of entries indexed (0 means
	// DefaultMaxEntries).
	MaxEntries int
}

// Compression names how a tarball is compressed.
type Compression string

// The compressions Detect recognises.
const (
	Plain Compression = "tar"
	Gzip  Compression = "gzip"
	Zstd  Compression = "zstd"
	Xz    Compression = "xz"
	Bzip2 Compression = "bzip2"
)

// Detect names r's compression by its magic bytes, and reports whether r
// looks like a tarball at all (a compressed stream is assumed to hold one;
// a plain tar needs the ustar magic or a valid header checksum).
func Detect(r io.ReaderAt) (Compression, bool) {
	var b [512]byte
	n, _ := r.ReadAt(b[:], 0)
	return DetectHead(b[:n])
}

// DetectHead is Detect over the first bytes of a tarball (up to 512 of
// them), for a stream that can only be peeked at.
func DetectHead(head []byte) (Compression, bool) {
	var b [512]byte
	n := copy(b[:], head)
	switch {
	case n >= 2 && b[0] == 0x1f && b[1] == 0x8b:
		return Gzip, true
	case n >= 4 && string(b[:4]) == "\x28\xb5\x2f\xfd":
		return Zstd, true
	case n >= 6 && string(b[:6]) == "\xfd7zXZ\x00":
		return Xz, true
	case n >= 3 && string(b[:3]) == "BZh":
		return Bzip2, true
	case n == 512 && (string(b[257:262]) == "ustar" || headerChecksumOK(b[:])):
		return Plain, true
	}
	return "", false
}

// headerChecksumOK checks a v7 tar header's checksum (for tarballs without
// the ustar magic).
func headerChecksumOK(b []byte) bool {
	var want int64
	field := strings.TrimRight(strings.TrimSpace(string(bytes.TrimRight(b[148:156], "\x00 "))), "\x00")
	if field == "" {
		return false
	}
	if _, err := fmt.Sscanf(field, "%o", &want); err != nil {
		return false
	}
	var sum int64
	for i, c := range b {
		if i >= 148 && i < 156 {
			c = ' '
		}
		sum += int64(c)
	}
	return sum == want && b[0] != 0
}

// FS is an indexed tarball. It is safe for concurrent use.
type FS struct {
	root *node
	ra   io.ReaderAt       // the tarball, for contents of an uncompressed one
	sec  *io.SectionReader // the tarball, to stream a compressed one again
	comp Compression       // how sec is compressed
	// seed keys the sums of streamed files' chunks: a file changed after
	// the tarball was opened cannot be made to match them without it.
	seed maphash.Seed
}

// sumChunk is the size of the chunks of a streamed file whose sums the
// first reading keeps (8 bytes a chunk: 1/8192 of the content).
const sumChunk = 64 << 10

type node struct {
	name     string
	mode     fs.FileMode
	size     int64
	mtime    time.Time
	link     string   // symbolic link target
	data     []byte   // content held in memory
	off      int64    // content offset in an uncompressed tarball; -1 otherwise
	entry    int      // ordinal of the entry holding the content, to stream it again
	notKept  bool     // read from a stream that did not keep the content
	sums     []uint64 // of each sumChunk of a streamed file's content, as first read
	sparse   bool     // a sparse member: its stream is checked to its end instead
	children map[string]*node
}

// Open indexes the tarball r of size bytes.
func Open(r io.ReaderAt, size int64, opt Options) (*FS, error) {
	if opt.MaxMemory <= 0 {
		opt.MaxMemory = DefaultMaxMemory
	}
	if opt.MaxEntries <= 0 {
		opt.MaxEntries = DefaultMaxEntries
	}
	if opt.MaxHeld <= 0 {
		opt.MaxHeld = DefaultMaxHeld
	}
	comp, ok := Detect(r)
	if !ok {
		return nil, fmt.Errorf("open tarball: %w: no tar header", ErrCorrupt)
	}
	sec := io.NewSectionReader(r, 0, size)
	t := &FS{root: &node{mode: fs.ModeDir | 0o755, children: map[string]*node{}}, sec: sec, comp: comp, seed: maphash.MakeSeed()}
	var stream io.Reader
	if comp == Plain {
		t.ra = r
		stream = sec
	} else {
		zr, err := t.decompress()
		if err != nil {
			return nil, fmt.Errorf("open tarball: %w", err)
		}
		defer zr.Close()
		stream = zr
	}
	if err := t.index(stream, sec, comp == Plain, nil, opt); err != nil {
		return nil, fmt.Errorf("open tarball: %w", err)
	}
	if comp != Plain {
		// Read on to the end of the compressed stream, so its trailers
		// are checked.
		if err := finish(stream); err != nil {
			return nil, fmt.Errorf("open tarball: %w", err)
		}
	}
	return t, nil
}

// decompress starts decompressing the tarball from its beginning.
func (t *FS) decompress() (io.ReadCloser, error) {
	return decompressor(bufio.NewReader(io.NewSectionReader(t.sec, 0, t.sec.Size())), t.comp)
}

// Decompress decompresses r, a gzip or zstd stream (by DetectHead), with
// the reader and bounds tarballs get; a container image's layers reuse it.
// Reading it to its end checks every trailer.
func Decompress(r io.Reader, comp Compression) (io.ReadCloser, error) {
	return decompressor(r, comp)
}

// stream reads the tarball again up to n's entry and returns its
// content, checked against the sums of the first reading.
func (t *FS) stream(n *node) (io.Reader, io.Closer, error) {
	var zr io.ReadCloser
	if t.comp == Plain {
		// A sparse member of a plain tarball: no stream to decompress.
		zr = io.NopCloser(io.NewSectionReader(t.sec, 0, t.sec.Size()))
	} else {
		var err error
		if zr, err = t.decompress(); err != nil {
			return nil, nil, err
		}
	}
	tr := tar.NewReader(zr)
	for i := 0; i <= n.entry; i++ {
		if _, err := tr.Next(); err != nil {
			zr.Close()
			return nil, nil, fmt.Errorf("%w: entry %d on a second reading: %w", ErrCorrupt, n.entry+1, err)
		}
	}
	if n.sparse {
		return &tailChecked{r: io.LimitReader(tr, n.size), left: n.size, tr: tr, zr: zr, plain: t.comp == Plain}, zr, nil
	}
	return &checkedReader{r: io.LimitReader(tr, n.size), sums: n.sums, seed: t.seed}, zr, nil
}

// tailChecked serves a sparse member's content and, before the read that
// completes it returns, reads the rest of the tarball, so the
// decompressor checks its trailers: a reader that stops at the size it
// was told (io.ReadFull) still gets the error, and the last bytes are
// withheld with it.
type tailChecked struct {
	r     io.Reader
	left  int64
	tr    *tar.Reader
	zr    io.Reader
	plain bool
}

func (c *tailChecked) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left > 0 || c.plain || c.tr == nil {
		return n, err
	}
	tr := c.tr
	c.tr = nil
	for {
		if _, err := tr.Next(); err == io.EOF {
			break
		} else if err != nil {
			return 0, fmt.Errorf("%w: after the file on a second reading: %w", ErrCorrupt, err)
		}
	}
	if err := finish(c.zr); err != nil {
		return 0, err
	}
	return n, err
}

// sumChunks reads a streamed file's content (size bytes) on the first
// reading and returns the sums of its chunks.
func sumChunks(r io.Reader, size int64, seed maphash.Seed) ([]uint64, error) {
	var sums []uint64
	buf := make([]byte, sumChunk)
	for size > 0 {
		n := min(size, sumChunk)
		if _, err := io.ReadFull(r, buf[:n]); err != nil {
			return nil, err
		}
		sums = append(sums, maphash.Bytes(seed, buf[:n]))
		size -= n
	}
	return sums, nil
}

// checkedReader serves a streamed file's content one chunk at a time, each
// chunk read whole and compared with the first reading's sum before any of
// it is returned: the gzip trailer or zstd checksum that vouched for the
// first reading is too far on to vouch for this one, so a tarball changed
// or damaged after it was opened fails here instead of being read as
// good.
type checkedReader struct {
	r     io.Reader
	sums  []uint64
	seed  maphash.Seed
	chunk int    // index of the next chunk to read
	buf   []byte // what is left of the current chunk
}

func (c *checkedReader) Read(p []byte) (int, error) {
	if len(c.buf) == 0 {
		if c.chunk == len(c.sums) {
			return 0, io.EOF
		}
		if cap(c.buf) < sumChunk {
			c.buf = make([]byte, sumChunk)
		}
		b := c.buf[:sumChunk]
		n, err := io.ReadFull(c.r, b)
		if err == io.ErrUnexpectedEOF || (err == io.EOF && n == 0) {
			// The last chunk is short, or the content ends early (the
			// sum of the chunk tells which).
			err = nil
		}
		if err != nil {
			c.buf = nil
			return 0, err
		}
		if n == 0 || maphash.Bytes(c.seed, b[:n]) != c.sums[c.chunk] {
			c.buf, c.chunk = nil, len(c.sums)
			return 0, fmt.Errorf("%w: bytes %d to %d differ from the first, verified reading (the tarball changed or is damaged since it was opened)",
				ErrCorrupt, int64(c.chunk)*sumChunk, int64(c.chunk)*sumChunk+int64(n))
		}
		c.chunk++
		c.buf = b[:n]
	}
	n := copy(p, c.buf)
	c.buf = c.buf[n:]
	return n, nil
}

// index reads every header once. For a plain tarball sec is also the
// stream, and its position after each header is the content's offset.
// keep is set for a tarball read once from a stream: it says which
// files' contents to hold, the others are kept as metadata only.
func (t *FS) index(stream io.Reader, sec *io.SectionReader, plain bool, keep func(name string, size int64, mode fs.FileMode) bool, opt Options) error {
	var last *lastBlock // what a header that archive/tar refuses was
	if !plain {
		last = &lastBlock{r: stream}
		stream = last
	}
	tr := tar.NewReader(stream)
	var held int64
	entries := 0
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			if m := headerMismatch(err, sec, plain, last, entries+1); m != nil {
				return m
			}
			return fmt.Errorf("%w: entry %d: %w", ErrCorrupt, entries+1, err)
		}
		entries++
		if entries > opt.MaxEntries {
			return fmt.Errorf("%w: more than %d entries", ErrTooLarge, opt.MaxEntries)
		}
		name := clean(hdr.Name)
		if name == "." && hdr.Typeflag != tar.TypeDir {
			continue // only a directory can be the root
		}
		base := path.Base(name)
		if strings.HasPrefix(base, ".wh.") {
			continue // an overlay whiteout, meaningless in a flat export
		}
		n := &node{name: base, mode: hdr.FileInfo().Mode(), size: hdr.Size, mtime: hdr.ModTime}
		switch hdr.Typeflag {
		case tar.TypeReg, '\x00' /* pre-POSIX regular file (TypeRegA) */, tar.TypeGNUSparse:
			sparse := hdr.Typeflag == tar.TypeGNUSparse
			for k := range hdr.PAXRecords {
				sparse = sparse || strings.HasPrefix(k, "GNU.sparse.")
			}
			if plain && !sparse {
				pos, err := sec.Seek(0, io.SeekCurrent)
				if err != nil {
					return err
				}
				n.off = pos
				place(t, name, n)
				continue
			}
			n.off, n.entry = -1, entries-1
			if keep != nil && !keep(name, hdr.Size, n.mode) {
				n.entry, n.notKept = -1, true
				place(t, name, n) // tar.Reader skips the content
				continue
			}
			if keep == nil && hdr.Size > opt.MaxHeld {
				// Streamed again when opened, and checked then against
				// the sums of this reading. A sparse member's holes cost
				// nothing to skip here but would have to be read to be
				// summed (a few bytes may declare terabytes of them): its
				// second reading goes on to the end of the stream instead.
				n.sparse = sparse
				if !sparse {
					if n.sums, err = sumChunks(tr, hdr.Size, t.seed); err != nil {
						return fmt.Errorf("%w: %s: %w", ErrCorrupt, name, err)
					}
				}
				place(t, name, n)
				continue
			}
			if held+hdr.Size > opt.MaxMemory || hdr.Size < 0 {
				hint := "decompress the tarball: a plain tar is read in place"
				if keep != nil {
					hint = "give the tarball as a file: it is then read in place"
				}
				return fmt.Errorf("%w: file contents exceed %d bytes at %s (%s)", ErrTooLarge, opt.MaxMemory, name, hint)
			}
			// Read at most the declared size; a short read is corruption.
			buf := make([]byte, hdr.Size)
			if _, err := io.ReadFull(tr, buf); err != nil {
				return fmt.Errorf("%w: %s: %w", ErrCorrupt, name, err)
			}
			held += hdr.Size
			n.data = buf
		case tar.TypeDir:
			n.size = 0
		case tar.TypeSymlink:
			n.link = hdr.Linkname
			n.size = int64(len(hdr.Linkname))
		case tar.TypeLink:
			target, err := t.lookup(clean(hdr.Linkname))
			if err != nil || target.mode.IsDir() {
				return fmt.Errorf("%w: hard link %s to %s, which is not an earlier file", ErrCorrupt, name, hdr.Linkname)
			}
			c := *target
			c.name = base
			n = &c
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			n.size = 0
		default:
			continue // global headers, unknown types: nothing to extract
		}
		if name == "." {
			if n.mode.IsDir() {
				t.root.mode, t.root.mtime = n.mode, n.mtime
			}
			continue
		}
		place(t, name, n)
	}
}

// headerMismatch tells, when archive/tar refused a header (ErrHeader,
// which it returns for a failing checksum among other things), whether the
// header block it last read fails its checksum, and names it; else nil.
func headerMismatch(err error, sec *io.SectionReader, plain bool, last *lastBlock, entry int) error {
	if !errors.Is(err, tar.ErrHeader) {
		return nil
	}
	var b [512]byte
	var where string
	switch {
	case plain && sec != nil:
		pos, err := sec.Seek(0, io.SeekCurrent)
		if err != nil || pos < 512 {
			return nil
		}
		if _, err := sec.ReadAt(b[:], pos-512); err != nil {
			return nil
		}
		where = fmt.Sprintf("at byte %d", pos-512)
	case last != nil && last.n >= 512:
		b = last.block()
		where = fmt.Sprintf("at byte %d of the tar stream", last.n-512)
	default:
		return nil
	}
	if b == [512]byte{} || headerChecksumOK(b[:]) {
		return nil
	}
	return &integrity.Mismatch{Format: "tar", Structure: fmt.Sprintf("header of entry %d %s", entry, where), Corrupt: ErrCorrupt}
}

// lastBlock reads through r and keeps the last 512 bytes read, the block
// a tar reader refused.
type lastBlock struct {
	r   io.Reader
	n   int64     // bytes read so far
	win [512]byte // the last bytes read end at its end
}

func (l *lastBlock) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	q := p[:n]
	if len(q) >= len(l.win) {
		copy(l.win[:], q[len(q)-len(l.win):])
	} else {
		copy(l.win[:], l.win[len(q):])
		copy(l.win[len(l.win)-len(q):], q)
	}
	l.n += int64(n)
	return n, err
}

// block returns the last 512 bytes read.
func (l *lastBlock) block() [512]byte { return l.win }

// place puts n at name, creating missing parents as directories and
// replacing what was there, as extraction would.
func place(t *FS, name string, n *node) {
	dir := t.root
	parts := strings.Split(name, "/")
	for _, c := range parts[:len(parts)-1] {
		child := dir.children[c]
		if child == nil || !child.mode.IsDir() {
			child = &node{name: c, mode: fs.ModeDir | 0o755, children: map[string]*node{}}
			dir.children[c] = child
		}
		dir = child
	}
	last := parts[len(parts)-1]
	if old := dir.children[last]; old != nil && old.mode.IsDir() && n.mode.IsDir() {
		// A directory entry again: new metadata, same contents.
		old.mode, old.mtime = n.mode, n.mtime
		return
	}
	if n.mode.IsDir() && n.children == nil {
		n.children = map[string]*node{}
	}
	dir.children[last] = n
}

// clean turns a member name into an fs.ValidPath name: leading "/" and
// "./" dropped, ".." clamped at the root, trailing "/" removed.
func clean(name string) string {
	p := path.Clean("/" + name)
	if p == "/" {
		return "."
	}
	return p[1:]
}

func (t *FS) lookup(name string) (*node, error) {
	if !fs.ValidPath(name) {
		return nil, fs.ErrInvalid
	}
	n := t.root
	if name == "." {
		return n, nil
	}
	for _, c := range strings.Split(name, "/") {
		if !n.mode.IsDir() {
			return nil, fs.ErrNotExist
		}
		next := n.children[c]
		if next == nil {
			return nil, fs.ErrNotExist
		}
		n = next
	}
	return n, nil
}

func (t *FS) get(op, name string) (*node, error) {
	n, err := t.lookup(name)
	if err != nil {
		return nil, &fs.PathError{Op: op, Path: name, Err: err}
	}
	return n, nil
}

// Lstat describes name without following it.
func (t *FS) Lstat(name string) (fs.FileInfo, error) {
	n, err := t.get("lstat", name)
	if err != nil {
		return nil, err
	}
	return n.info(name), nil
}

// ReadLink returns a symbolic link's target as stored.
func (t *FS) ReadLink(name string) (string, error) {
	n, err := t.get("readlink", name)
	if err != nil {
		return "", err
	}
	if n.mode&fs.ModeSymlink == 0 {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	return n.link, nil
}

// ReadDir lists a directory sorted by name.
func (t *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	n, err := t.get("readdir", name)
	if err != nil {
		return nil, err
	}
	if !n.mode.IsDir() {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("not a directory")}
	}
	return n.entries(), nil
}

func (n *node) entries() []fs.DirEntry {
	out := make([]fs.DirEntry, 0, len(n.children))
	for _, c := range n.children {
		out = append(out, fs.FileInfoToDirEntry(c.info(c.name)))
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

// ReadFile reads a regular file.
func (t *FS) ReadFile(name string) ([]byte, error) {
	f, err := t.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: errors.New("is a directory")}
	}
	// A compressed tarball may declare a file of any size; never allocate
	// more than rootfs would read of it.
	if st.Size() > rootfs.MaxReadFile {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%d bytes, over %d: %w", st.Size(), rootfs.MaxReadFile, rootfs.ErrTooLarge)}
	}
	b := make([]byte, st.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	return b, nil
}

// Open opens a file or directory (never a link: the view resolves those).
func (t *FS) Open(name string) (fs.File, error) {
	n, err := t.get("open", name)
	if err != nil {
		return nil, err
	}
	f := &file{n: n, name: name}
	switch {
	case n.mode.IsDir():
		f.dir = n.entries()
	case n.mode.IsRegular() && n.notKept:
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrNotKept}
	case n.mode.IsRegular() && n.data != nil:
		f.r = bytes.NewReader(n.data)
	case n.mode.IsRegular() && n.off >= 0:
		f.r = io.NewSectionReader(t.ra, n.off, n.size)
	case n.mode.IsRegular():
		r, c, err := t.stream(n)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		f.r, f.c = r, c
	default:
		f.r = bytes.NewReader(nil)
	}
	return f, nil
}

type info struct {
	n    *node
	name string
}

func (n *node) info(name string) fs.FileInfo { return info{n, path.Base(name)} }

func (i info) Name() string       { return i.name }
func (i info) Size() int64        { return i.n.size }
func (i info) Mode() fs.FileMode  { return i.n.mode }
func (i info) ModTime() time.Time { return i.n.mtime }
func (i info) IsDir() bool        { return i.n.mode.IsDir() }
func (i info) Sys() any           { return nil }

type file struct {
	n    *node
	name string
	r    io.Reader
	c    io.Closer // the decompressor of a streamed file
	read int64
	dir  []fs.DirEntry
}

func (f *file) Stat() (fs.FileInfo, error) { return f.n.info(f.name), nil }

func (f *file) Close() error {
	if f.c != nil {
		return f.c.Close()
	}
	return nil
}

func (f *file) Read(p []byte) (int, error) {
	if f.r == nil {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: errors.New("is a directory")}
	}
	n, err := f.r.Read(p)
	if err == io.EOF && f.c != nil && f.read+int64(n) < f.n.size {
		err = fmt.Errorf("%w: %s: content ends early", ErrCorrupt, f.name)
	}
	f.read += int64(n)
	if err != nil && err != io.EOF {
		return n, &fs.PathError{Op: "read", Path: f.name, Err: err}
	}
	return n, err
}

// ReadDir lists a directory in chunks, as fs.ReadDirFile says.
func (f *file) ReadDir(count int) ([]fs.DirEntry, error) {
	if !f.n.mode.IsDir() {
		return nil, &fs.PathError{Op: "readdir", Path: f.name, Err: errors.New("not a directory")}
	}
	if count <= 0 {
		out := f.dir
		f.dir = nil
		return out, nil
	}
	if len(f.dir) == 0 {
		return nil, io.EOF
	}
	count = min(count, len(f.dir))
	out := f.dir[:count]
	f.dir = f.dir[count:]
	return out, nil
}
