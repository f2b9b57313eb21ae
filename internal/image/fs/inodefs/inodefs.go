// Package inodefs owns the io/fs plumbing that the inode-based filesystem
// readers (ext4, xfs) share: path lookup through bounded caches of inodes
// and directories, the fs.File, fs.DirEntry and fs.FileInfo types, and the
// bound on ReadFile. A reader supplies only its on-disk parsing, as a Disk.
//
// It never follows a symbolic link: every component of a name but the last
// must be a directory, a final link is reported as one, and links are
// resolved by the rootfs view above it.
package inodefs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/amilint/amilint/internal/image/integrity"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// Disk is what a filesystem reader provides: its inodes, of type N, and
// their directory entries, link targets and contents, read from the image.
// Its methods wrap ErrCorrupt-like errors of their own; they are called
// concurrently when the FS is used concurrently.
type Disk[N any] interface {
	// Root returns the root directory's inode number.
	Root() uint64
	// Inode reads inode number ino.
	Inode(ino uint64) (N, error)
	// Attr returns inode n's metadata.
	Attr(n N) Attr
	// Dirents lists directory n's entries, without "." and "..".
	Dirents(n N) ([]Dirent, error)
	// Symlink returns symbolic link n's target as stored.
	Symlink(n N) (string, error)
	// Contents returns regular file n's contents, Attr(n).Size bytes.
	Contents(n N) (io.ReaderAt, error)
}

// Attr is an inode's metadata.
type Attr struct {
	Ino     uint64
	Mode    fs.FileMode
	Size    int64
	ModTime time.Time
}

// Dirent is one directory entry as stored.
type Dirent struct {
	Name string
	Ino  uint64
	// Type is the file type the entry records, in the numbering ext4
	// (EXT4_FT_*) and XFS (XFS_DIR3_FT_*) share: 1 regular file,
	// 2 directory, 3 character device, 4 block device, 5 FIFO, 6 socket,
	// 7 symbolic link. Any other value, 0 included, means the entry
	// records none and the inode is read for it.
	Type byte
}

// MaxReadFile bounds what ReadFile reads: an image's inode may claim any
// size (a sparse file needs no blocks), and reading a whole file is never
// worth holding more than this in memory. Open streams files of any size.
// It is rootfs's bound, so the view and its sources agree.
const MaxReadFile = rootfs.MaxReadFile

// MaxDirents bounds the entries a reader lists of one directory: they are
// held in memory, and blocks the disk below maps many times over (a qcow2
// cluster behind every guest cluster) can make a directory of a few KiB
// claim as many as the device has room for.
const MaxDirents = 1 << 20

// ErrTooLarge reports a ReadFile of a file over MaxReadFile bytes. It is
// rootfs.ErrTooLarge, so callers test one error whatever the source.
var ErrTooLarge = rootfs.ErrTooLarge

// ReadFull reads exactly len(p) bytes at off from a device of size bytes,
// the one bounded read the filesystem readers share: a range outside the
// device fails with corrupt (the reader's ErrCorrupt), a short read with
// io.ErrUnexpectedEOF.
func ReadFull(r io.ReaderAt, size int64, p []byte, off int64, corrupt error) error {
	if off < 0 || off > size || int64(len(p)) > size-off {
		return fmt.Errorf("read %d bytes at %d outside the %d-byte device: %w", len(p), off, size, corrupt)
	}
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("read %d bytes at %d: %w", len(p), off, err)
}

// Cache bounds: directories' parsed entries and inodes, so the view's
// repeated lookups of the same prefixes do not re-read the image. The
// entries' bound holds the largest directory a reader lists (MaxDirents)
// beside the directories above it: a walk looks up every entry of a
// directory by name from the root, and a directory left out, or dropped
// by the next lookup of its parent, was listed again for every one.
const (
	cacheMaxEntries = 2 * MaxDirents
	cacheMaxInodes  = 1 << 12
)

// FS is a read-only rootfs.Source over a Disk. It is safe for concurrent
// use when the Disk is.
type FS[N any] struct {
	disk Disk[N]

	// mu guards the caches, which are dropped whole when full: simple,
	// bounded, and enough for a tree walk's locality.
	mu      sync.Mutex
	dirs    map[uint64]map[string]Dirent
	entries int
	inodes  map[uint64]N

	// paths names inodes by the first path they were looked up by, so a
	// reader that goes on past a checksum mismatch can say which file it
	// was reading (PathOf); nil unless TrackPaths was called.
	paths map[uint64]string

	// damage is the first error a Disk method returned, and onDamage,
	// when set, is told of every one instead (see Damage).
	damage   error
	onDamage func(path string, err error)
}

var _ rootfs.Source = (*FS[int])(nil)

// New returns the filesystem that d's inodes make up.
func New[N any](d Disk[N]) *FS[N] {
	return &FS[N]{disk: d}
}

// TrackPaths makes f remember, for every inode it reads, the path it was
// looked up by, so that PathOf can name it. A reader that records checksum
// mismatches and reads on (integrity.Checker.Lenient) calls it before its
// first lookup; an error that stops the read is given its path as it
// passes, at no cost. Paths of up to maxTracked inodes are kept.
func (f *FS[N]) TrackPaths() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.paths == nil {
		f.paths = map[uint64]string{f.disk.Root(): "/"}
	}
}

// Damage returns the first error reading the image's structures met: a
// Disk method's error (a block that fails its checksum, an inode pointing
// outside the device, a failed read), as returned to the caller then,
// never a name that does not exist or an over-large ReadFile. Code that
// treats an unreadable directory as absent, as systemd does, asks when it
// is done: a damaged image must not be audited as an intact one. It is nil
// when OnDamage was set.
func (f *FS[N]) Damage() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.damage
}

// OnDamage makes f tell fn of every error a Disk method returns, with the
// image path being read, instead of keeping the first for Damage: a reader
// that records mismatches and reads on records these too.
func (f *FS[N]) OnDamage(fn func(path string, err error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onDamage = fn
}

// damaged notes err, a Disk method's error reading image path p, and
// returns it with the path given to a checksum mismatch.
func (f *FS[N]) damaged(p string, err error) error {
	err = integrity.WithPath(err, p)
	f.mu.Lock()
	fn := f.onDamage
	if fn == nil && f.damage == nil {
		f.damage = err
	}
	f.mu.Unlock()
	if fn != nil {
		fn(p, err)
	}
	return err
}

// maxTracked bounds the paths TrackPaths keeps.
const maxTracked = 1 << 20

// PathOf returns the path inode ino was first looked up by ("/etc/x"), or
// "" when it is not known.
func (f *FS[N]) PathOf(ino uint64) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.paths[ino]
}

// name records that ino is at path p (image-absolute), when paths are
// tracked.
func (f *FS[N]) name(ino uint64, p string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.paths == nil || len(f.paths) >= maxTracked {
		return
	}
	if _, ok := f.paths[ino]; !ok {
		f.paths[ino] = p
	}
}

// abs is the image-absolute path of an fs.ValidPath name.
func abs(name string) string {
	if name == "." || name == "" {
		return "/"
	}
	return "/" + name
}

// join is the image-absolute path of entry e of directory dir.
func join(dir, e string) string {
	if dir == "/" {
		return "/" + e
	}
	return dir + "/" + e
}

// FileMode converts a POSIX st_mode, as inodes store it, to an fs.FileMode.
func FileMode(m uint16) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	switch m & 0xF000 {
	case 0x1000:
		mode |= fs.ModeNamedPipe
	case 0x2000:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case 0x4000:
		mode |= fs.ModeDir
	case 0x6000:
		mode |= fs.ModeDevice
	case 0xA000:
		mode |= fs.ModeSymlink
	case 0xC000:
		mode |= fs.ModeSocket
	case 0x8000:
	default:
		mode |= fs.ModeIrregular
	}
	return mode
}

// direntType maps a Dirent's Type to the type bits of an fs.FileMode.
func direntType(t byte) (fs.FileMode, bool) {
	switch t {
	case 1:
		return 0, true
	case 2:
		return fs.ModeDir, true
	case 3:
		return fs.ModeDevice | fs.ModeCharDevice, true
	case 4:
		return fs.ModeDevice, true
	case 5:
		return fs.ModeNamedPipe, true
	case 6:
		return fs.ModeSocket, true
	case 7:
		return fs.ModeSymlink, true
	}
	return 0, false
}

// inode reads inode ino, at image path p, through the cache. A checksum
// mismatch is given p.
func (f *FS[N]) inode(ino uint64, p string) (N, error) {
	f.mu.Lock()
	n, ok := f.inodes[ino]
	f.mu.Unlock()
	if ok {
		return n, nil
	}
	f.name(ino, p)
	n, err := f.disk.Inode(ino)
	if err != nil {
		return n, f.damaged(p, err)
	}
	f.mu.Lock()
	if f.inodes == nil || len(f.inodes) >= cacheMaxInodes {
		f.inodes = make(map[uint64]N)
	}
	f.inodes[ino] = n
	f.mu.Unlock()
	return n, nil
}

// dirIndex returns directory n, at image path p, by name, through the
// cache. Of entries of the same name, the first counts.
func (f *FS[N]) dirIndex(n N, p string) (map[string]Dirent, error) {
	ino := f.disk.Attr(n).Ino
	f.mu.Lock()
	m, ok := f.dirs[ino]
	f.mu.Unlock()
	if ok {
		return m, nil
	}
	ents, err := f.disk.Dirents(n)
	if err != nil {
		return nil, f.damaged(p, err)
	}
	m = make(map[string]Dirent, len(ents))
	for _, e := range ents {
		if _, dup := m[e.Name]; !dup {
			m[e.Name] = e
		}
	}
	f.mu.Lock()
	if f.dirs == nil || f.entries+len(m) > cacheMaxEntries {
		f.dirs = make(map[uint64]map[string]Dirent)
		f.entries = 0
	}
	if len(m) <= cacheMaxEntries {
		f.dirs[ino] = m
		f.entries += len(m)
	}
	f.mu.Unlock()
	return m, nil
}

// ReadAhead reads the entries of directory name into the cache for the
// lookups to come. It returns no error: a lookup meets it again.
func (f *FS[N]) ReadAhead(name string) {
	if n, err := Lookup(f, "readdir", name); err == nil && f.disk.Attr(n).Mode.IsDir() {
		_, _ = f.dirIndex(n, abs(name))
	}
}

// Lookup returns the inode name denotes in f, following no links: every
// component but the last must be a directory. Errors are *fs.PathError
// with Op op.
func Lookup[N any](f *FS[N], op, name string) (N, error) {
	var zero N
	if !fs.ValidPath(name) {
		return zero, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	n, err := f.inode(f.disk.Root(), "/")
	if err != nil {
		return zero, &fs.PathError{Op: op, Path: name, Err: err}
	}
	if name == "." {
		return n, nil
	}
	dir := "/"
	for c := range strings.SplitSeq(name, "/") {
		if !f.disk.Attr(n).Mode.IsDir() {
			return zero, &fs.PathError{Op: op, Path: name, Err: rootfs.ErrNotDir}
		}
		m, err := f.dirIndex(n, dir)
		if err != nil {
			return zero, &fs.PathError{Op: op, Path: name, Err: err}
		}
		e, ok := m[c]
		if !ok {
			return zero, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		dir = join(dir, c)
		if n, err = f.inode(e.Ino, dir); err != nil {
			return zero, &fs.PathError{Op: op, Path: name, Err: err}
		}
	}
	return n, nil
}

// Open opens the named file or directory. It does not follow a final
// symbolic link: opening one fails with fs.ErrInvalid, since a Source's
// links are resolved by the view above it.
func (f *FS[N]) Open(name string) (fs.File, error) {
	return f.open(name)
}

func (f *FS[N]) open(name string) (*file[N], error) {
	n, err := Lookup(f, "open", name)
	if err != nil {
		return nil, err
	}
	a := f.disk.Attr(n)
	if a.Mode&fs.ModeSymlink != 0 {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("a symbolic link: %w", fs.ErrInvalid)}
	}
	fl := &file[N]{fs: f, n: n, attr: a, name: baseName(name), path: abs(name)}
	if a.Mode.IsRegular() {
		if fl.r, err = f.disk.Contents(n); err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: f.damaged(fl.path, err)}
		}
	}
	return fl, nil
}

// ReadFile reads the whole named regular file, which must not be a link
// and must hold at most MaxReadFile bytes.
func (f *FS[N]) ReadFile(name string) ([]byte, error) {
	fl, err := f.open(name)
	if err != nil {
		return nil, err
	}
	if !fl.attr.Mode.IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("not a regular file: %w", fs.ErrInvalid)}
	}
	if size := fl.attr.Size; size > MaxReadFile {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%d bytes, over %d: %w", size, MaxReadFile, ErrTooLarge)}
	}
	b := make([]byte, fl.attr.Size)
	got, err := fl.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:got], nil
}

// ReadDir lists the named directory, sorted by name, without following
// links in its entries.
func (f *FS[N]) ReadDir(name string) ([]fs.DirEntry, error) {
	n, err := Lookup(f, "readdir", name)
	if err != nil {
		return nil, err
	}
	list, err := f.dirEntries(n, abs(name))
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	return list, nil
}

// dirEntries lists directory n, at image path dir.
func (f *FS[N]) dirEntries(n N, dir string) ([]fs.DirEntry, error) {
	if !f.disk.Attr(n).Mode.IsDir() {
		return nil, rootfs.ErrNotDir
	}
	m, err := f.dirIndex(n, dir)
	if err != nil {
		return nil, err
	}
	list := make([]fs.DirEntry, 0, len(m))
	for _, e := range m {
		typ, ok := direntType(e.Type)
		if !ok {
			// No file type in the entry: take it from the inode.
			c, err := f.inode(e.Ino, join(dir, e.Name))
			if err != nil {
				return nil, err
			}
			typ = f.disk.Attr(c).Mode.Type()
		}
		list = append(list, &dirEntry[N]{fs: f, e: e, typ: typ, dir: dir})
	}
	slices.SortFunc(list, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return list, nil
}

// Lstat describes the named entry without following it.
func (f *FS[N]) Lstat(name string) (fs.FileInfo, error) {
	n, err := Lookup(f, "lstat", name)
	if err != nil {
		return nil, err
	}
	return &info{name: baseName(name), a: f.disk.Attr(n)}, nil
}

// ReadLink returns the target of the named symbolic link as stored.
func (f *FS[N]) ReadLink(name string) (string, error) {
	n, err := Lookup(f, "readlink", name)
	if err != nil {
		return "", err
	}
	if f.disk.Attr(n).Mode&fs.ModeSymlink == 0 {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fmt.Errorf("not a symbolic link: %w", fs.ErrInvalid)}
	}
	t, err := f.disk.Symlink(n)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: f.damaged(abs(name), err)}
	}
	return t, nil
}

func baseName(name string) string {
	if name == "." {
		return "."
	}
	return path.Base(name)
}

// info is an entry's fs.FileInfo.
type info struct {
	name string
	a    Attr
}

func (i *info) Name() string       { return i.name }
func (i *info) Size() int64        { return i.a.Size }
func (i *info) Mode() fs.FileMode  { return i.a.Mode }
func (i *info) ModTime() time.Time { return i.a.ModTime }
func (i *info) IsDir() bool        { return i.a.Mode.IsDir() }

// Sys returns the inode number as a uint64.
func (i *info) Sys() any { return i.a.Ino }

// dirEntry is one entry of a ReadDir listing; Info reads its inode lazily.
type dirEntry[N any] struct {
	fs  *FS[N]
	e   Dirent
	typ fs.FileMode
	dir string // the directory's image path
}

func (d *dirEntry[N]) Name() string      { return d.e.Name }
func (d *dirEntry[N]) IsDir() bool       { return d.typ.IsDir() }
func (d *dirEntry[N]) Type() fs.FileMode { return d.typ }
func (d *dirEntry[N]) String() string    { return fs.FormatDirEntry(d) }

func (d *dirEntry[N]) Info() (fs.FileInfo, error) {
	n, err := d.fs.inode(d.e.Ino, join(d.dir, d.e.Name))
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: d.e.Name, Err: err}
	}
	return &info{name: d.e.Name, a: d.fs.disk.Attr(n)}, nil
}

// file is an open file or directory. Regular files implement io.ReaderAt
// and io.Seeker; directories implement fs.ReadDirFile.
type file[N any] struct {
	fs     *FS[N]
	n      N
	attr   Attr
	name   string
	path   string      // image-absolute, for errors
	r      io.ReaderAt // contents of a regular file
	off    int64
	dir    []fs.DirEntry
	dirPos int
	listed bool
}

func (fl *file[N]) Stat() (fs.FileInfo, error) { return &info{name: fl.name, a: fl.attr}, nil }
func (fl *file[N]) Close() error               { return nil }

func (fl *file[N]) Read(p []byte) (int, error) {
	n, err := fl.ReadAt(p, fl.off)
	fl.off += int64(n)
	return n, err
}

// ReadAt reads file content at off.
func (fl *file[N]) ReadAt(p []byte, off int64) (int, error) {
	if fl.attr.Mode.IsDir() {
		return 0, &fs.PathError{Op: "read", Path: fl.name, Err: errors.New("is a directory")}
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "read", Path: fl.name, Err: fs.ErrInvalid}
	}
	if fl.r == nil {
		return 0, &fs.PathError{Op: "read", Path: fl.name, Err: fmt.Errorf("not a regular file: %w", fs.ErrInvalid)}
	}
	n, err := fl.r.ReadAt(p, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return n, &fs.PathError{Op: "read", Path: fl.name, Err: fl.fs.damaged(fl.path, err)}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (fl *file[N]) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += fl.off
	case io.SeekEnd:
		offset += fl.attr.Size
	default:
		return 0, &fs.PathError{Op: "seek", Path: fl.name, Err: fs.ErrInvalid}
	}
	if offset < 0 {
		return 0, &fs.PathError{Op: "seek", Path: fl.name, Err: fs.ErrInvalid}
	}
	fl.off = offset
	return offset, nil
}

// ReadDir reads a directory's entries, n at a time as fs.ReadDirFile says.
func (fl *file[N]) ReadDir(count int) ([]fs.DirEntry, error) {
	if !fl.listed {
		list, err := fl.fs.dirEntries(fl.n, fl.path)
		if err != nil {
			return nil, &fs.PathError{Op: "readdir", Path: fl.name, Err: err}
		}
		fl.dir, fl.listed = list, true
	}
	rest := fl.dir[fl.dirPos:]
	if count <= 0 {
		fl.dirPos = len(fl.dir)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	rest = rest[:min(count, len(rest))]
	fl.dirPos += len(rest)
	return rest, nil
}

// FeatureNames names the set bits of a superblock's feature mask, by the
// reader's names (named) where known and in hex where not, comma-separated:
// what a reader's refusal of features it does not implement says.
func FeatureNames[T uint32 | uint64](bits T, named map[T]string) string {
	var s []string
	for b := T(1); b != 0; b <<= 1 {
		if bits&b == 0 {
			continue
		}
		n, ok := named[b]
		if !ok {
			n = fmt.Sprintf("unknown %#x", b)
		}
		s = append(s, n)
	}
	return strings.Join(s, ",")
}
