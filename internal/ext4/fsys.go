package ext4

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/amilint/amilint/internal/rootfs"
)

var _ rootfs.Source = (*FS)(nil)

var errNotDir = rootfs.ErrNotDir

// maxLinkLen bounds a symbolic link's target, as PATH_MAX does.
const maxLinkLen = 4096

// Cache bounds: directories' parsed entries and inodes, so the view's
// repeated lookups of the same prefixes do not re-read the image.
const (
	cacheMaxEntries = 1 << 16
	cacheMaxInodes  = 1 << 12
)

// dirCache holds recently read directories and inodes. It is dropped whole
// when full: simple, bounded, and enough for a tree walk's locality.
type dirCache struct {
	dirs    map[uint64]map[string]dirent
	entries int
	inodes  map[uint64]*inode
}

// cachedInode reads inode ino through the cache.
func (f *FS) cachedInode(ino uint64) (*inode, error) {
	f.mu.Lock()
	n, ok := f.cache.inodes[ino]
	f.mu.Unlock()
	if ok {
		return n, nil
	}
	n, err := f.inode(ino)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	if f.cache.inodes == nil || len(f.cache.inodes) >= cacheMaxInodes {
		f.cache.inodes = make(map[uint64]*inode)
	}
	f.cache.inodes[ino] = n
	f.mu.Unlock()
	return n, nil
}

// dirIndex returns directory n's entries by name, through the cache.
func (f *FS) dirIndex(n *inode) (map[string]dirent, error) {
	f.mu.Lock()
	m, ok := f.cache.dirs[n.ino]
	f.mu.Unlock()
	if ok {
		return m, nil
	}
	ents, err := f.readDirents(n)
	if err != nil {
		return nil, err
	}
	m = make(map[string]dirent, len(ents))
	for _, e := range ents {
		if _, dup := m[e.name]; !dup {
			m[e.name] = e
		}
	}
	f.mu.Lock()
	if f.cache.dirs == nil || f.cache.entries+len(m) > cacheMaxEntries {
		f.cache.dirs = make(map[uint64]map[string]dirent)
		f.cache.entries = 0
	}
	if len(m) <= cacheMaxEntries {
		f.cache.dirs[n.ino] = m
		f.cache.entries += len(m)
	}
	f.mu.Unlock()
	return m, nil
}

// lookup returns the inode name denotes, following no links: every
// component but the last must be a directory.
func (f *FS) lookup(op, name string) (*inode, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	n, err := f.cachedInode(rootIno)
	if err != nil {
		return nil, &fs.PathError{Op: op, Path: name, Err: err}
	}
	if name == "." {
		return n, nil
	}
	for c := range strings.SplitSeq(name, "/") {
		if !n.isDir() {
			return nil, &fs.PathError{Op: op, Path: name, Err: errNotDir}
		}
		m, err := f.dirIndex(n)
		if err != nil {
			return nil, &fs.PathError{Op: op, Path: name, Err: err}
		}
		e, ok := m[c]
		if !ok {
			return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		if n, err = f.cachedInode(e.ino); err != nil {
			return nil, &fs.PathError{Op: op, Path: name, Err: err}
		}
	}
	return n, nil
}

// Open opens the named file or directory. It does not follow a final
// symbolic link: opening one fails with fs.ErrInvalid, since a Source's
// links are resolved by the view above it.
func (f *FS) Open(name string) (fs.File, error) {
	n, err := f.lookup("open", name)
	if err != nil {
		return nil, err
	}
	if n.isSymlink() {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("a symbolic link: %w", fs.ErrInvalid)}
	}
	fl := &file{fs: f, n: n, name: baseName(name)}
	if n.flags&flagInlineData != 0 && !n.isDir() {
		if fl.inline, err = f.inlineData(n); err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
	}
	return fl, nil
}

// MaxReadFile bounds what ReadFile reads: an image's inode may claim any
// size (a sparse file needs no blocks), and reading a whole file is never
// worth holding more than this in memory. Open streams files of any size.
const MaxReadFile = 64 << 20

// ErrTooLarge reports a ReadFile of a file over MaxReadFile bytes.
var ErrTooLarge = errors.New("file too large to read whole")

// ReadFile reads the whole named regular file, which must not be a link
// and must hold at most MaxReadFile bytes.
func (f *FS) ReadFile(name string) ([]byte, error) {
	fl, err := f.Open(name)
	if err != nil {
		return nil, err
	}
	n := fl.(*file).n
	if !n.isRegular() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("not a regular file: %w", fs.ErrInvalid)}
	}
	if n.size > MaxReadFile {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("%d bytes, over %d: %w", n.size, MaxReadFile, ErrTooLarge)}
	}
	b := make([]byte, n.size)
	got, err := fl.(*file).ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:got], nil
}

// ReadDir lists the named directory, sorted by name, without following
// links in its entries.
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	n, err := f.lookup("readdir", name)
	if err != nil {
		return nil, err
	}
	list, err := f.dirEntries(n)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	return list, nil
}

func (f *FS) dirEntries(n *inode) ([]fs.DirEntry, error) {
	if !n.isDir() {
		return nil, errNotDir
	}
	m, err := f.dirIndex(n)
	if err != nil {
		return nil, err
	}
	list := make([]fs.DirEntry, 0, len(m))
	for _, e := range m {
		typ, ok := ftypeMode(e.ftype)
		if !ok {
			// No file type in the entry: take it from the inode.
			c, err := f.cachedInode(e.ino)
			if err != nil {
				return nil, err
			}
			typ = fileMode(c.mode).Type()
		}
		list = append(list, &dirEntry{fs: f, e: e, typ: typ})
	}
	slices.SortFunc(list, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return list, nil
}

// Lstat describes the named entry without following it.
func (f *FS) Lstat(name string) (fs.FileInfo, error) {
	n, err := f.lookup("lstat", name)
	if err != nil {
		return nil, err
	}
	return newInfo(baseName(name), n), nil
}

// ReadLink returns the target of the named symbolic link as stored.
func (f *FS) ReadLink(name string) (string, error) {
	n, err := f.lookup("readlink", name)
	if err != nil {
		return "", err
	}
	if !n.isSymlink() {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fmt.Errorf("not a symbolic link: %w", fs.ErrInvalid)}
	}
	t, err := f.linkTarget(n)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	return t, nil
}

// linkTarget reads a symlink's target: inline data, a fast symlink in
// i_block (under 60 bytes, no extents), or data blocks.
func (f *FS) linkTarget(n *inode) (string, error) {
	if n.size > maxLinkLen {
		return "", fmt.Errorf("symlink %d of %d bytes: %w", n.ino, n.size, ErrCorrupt)
	}
	if n.flags&flagEncrypt != 0 {
		return "", fmt.Errorf("symlink %d is encrypted: %w", n.ino, ErrUnsupported)
	}
	switch {
	case n.flags&flagInlineData != 0:
		data, err := f.inlineData(n)
		if err != nil {
			return "", err
		}
		return string(data[:n.size]), nil
	case n.flags&flagExtents == 0 && n.size < iBlockLen:
		return string(n.block[:n.size]), nil
	}
	buf := make([]byte, n.size)
	got, err := f.readFile(n, nil, buf, 0)
	if err != nil {
		return "", err
	}
	return string(buf[:got]), nil
}

func baseName(name string) string {
	if name == "." {
		return "."
	}
	return path.Base(name)
}

// info is an entry's fs.FileInfo.
type info struct {
	name  string
	size  int64
	mode  fs.FileMode
	mtime time.Time
	ino   uint64
}

func newInfo(name string, n *inode) *info {
	return &info{name: name, size: n.size, mode: fileMode(n.mode), mtime: n.mtime, ino: n.ino}
}

func (i *info) Name() string       { return i.name }
func (i *info) Size() int64        { return i.size }
func (i *info) Mode() fs.FileMode  { return i.mode }
func (i *info) ModTime() time.Time { return i.mtime }
func (i *info) IsDir() bool        { return i.mode.IsDir() }

// Sys returns the inode number as a uint64.
func (i *info) Sys() any { return i.ino }

// dirEntry is one entry of a ReadDir listing; Info reads its inode lazily.
type dirEntry struct {
	fs  *FS
	e   dirent
	typ fs.FileMode
}

func (d *dirEntry) Name() string      { return d.e.name }
func (d *dirEntry) IsDir() bool       { return d.typ.IsDir() }
func (d *dirEntry) Type() fs.FileMode { return d.typ }
func (d *dirEntry) String() string    { return fs.FormatDirEntry(d) }

func (d *dirEntry) Info() (fs.FileInfo, error) {
	n, err := d.fs.cachedInode(d.e.ino)
	if err != nil {
		return nil, &fs.PathError{Op: "stat", Path: d.e.name, Err: err}
	}
	return newInfo(d.e.name, n), nil
}

// file is an open file or directory. Regular files implement io.ReaderAt
// and io.Seeker; directories implement fs.ReadDirFile.
type file struct {
	fs     *FS
	n      *inode
	name   string
	inline []byte
	off    int64
	dir    []fs.DirEntry
	dirPos int
	listed bool
}

func (fl *file) Stat() (fs.FileInfo, error) { return newInfo(fl.name, fl.n), nil }
func (fl *file) Close() error               { return nil }

func (fl *file) Read(p []byte) (int, error) {
	n, err := fl.ReadAt(p, fl.off)
	fl.off += int64(n)
	return n, err
}

// ReadAt reads file content at off.
func (fl *file) ReadAt(p []byte, off int64) (int, error) {
	if fl.n.isDir() {
		return 0, &fs.PathError{Op: "read", Path: fl.name, Err: errors.New("is a directory")}
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "read", Path: fl.name, Err: fs.ErrInvalid}
	}
	if !fl.n.isRegular() {
		return 0, &fs.PathError{Op: "read", Path: fl.name, Err: fmt.Errorf("not a regular file: %w", fs.ErrInvalid)}
	}
	n, err := fl.fs.readFile(fl.n, fl.inline, p, off)
	if err != nil {
		return n, &fs.PathError{Op: "read", Path: fl.name, Err: err}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (fl *file) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += fl.off
	case io.SeekEnd:
		offset += fl.n.size
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
func (fl *file) ReadDir(count int) ([]fs.DirEntry, error) {
	if !fl.listed {
		list, err := fl.fs.dirEntries(fl.n)
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
