//go:build linux

package rootfs

import (
	"encoding/binary"
	"io"
	"io/fs"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxDirFDs bounds the directory descriptors a Dir keeps open. When the
// cache is full it is emptied; an image root's hot directories are few.
const maxDirFDs = 128

// unix.Stat_t and syscall.Stat_t are both the kernel's struct stat; callers
// type-assert FileInfo.Sys() to *syscall.Stat_t as they do for os.Lstat.
var _ [unsafe.Sizeof(unix.Stat_t{}) - unsafe.Sizeof(syscall.Stat_t{})]byte
var _ [unsafe.Sizeof(syscall.Stat_t{}) - unsafe.Sizeof(unix.Stat_t{})]byte

// dirFDs answers Dir's calls with one or two system calls each. Lstat and
// ReadLink use fstatat(2) and readlinkat(2) on the last component, relative
// to a cached descriptor of its directory opened with RESOLVE_IN_ROOT: ".."
// and symbolic links (absolute ones included) in the directory name stay
// inside the root, as after chroot(2), and a single component looked up
// without following it cannot leave its directory. Open, ReadFile and ReadDir,
// which read content, look the whole name up from the root with openat2 and
// RESOLVE_IN_ROOT at every call, so no cached descriptor decides what is read.
//
// The one thing the cache cannot see is a cached directory renamed out of
// the root while the Dir is open: until it is evicted, Lstat and ReadLink of
// its entries would describe them where they now are.
type dirFDs struct {
	root int

	mu     sync.Mutex
	closed bool
	dirs   map[string]*dirFD
}

// dirFD is a cached directory descriptor. It is closed when it has been
// evicted and its last user releases it.
type dirFD struct {
	fd      int
	refs    int
	evicted bool
	keep    bool // the root itself, closed only by close
}

// openFDs opens dir and checks that the kernel has openat2.
func openFDs(dir string) (*dirFDs, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	x := &dirFDs{root: fd, dirs: make(map[string]*dirFD)}
	probe, err := x.openat2(fd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC,
		unix.RESOLVE_IN_ROOT|unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "openat2", Path: dir, Err: err}
	}
	unix.Close(probe)
	return x, nil
}

// openat2 retries the EAGAIN the kernel returns when a rename raced a
// RESOLVE_IN_ROOT or RESOLVE_BENEATH lookup, and EINTR.
func (x *dirFDs) openat2(dirfd int, name string, flags uint64, resolve uint64) (int, error) {
	how := unix.OpenHow{Flags: flags, Resolve: resolve}
	for range 8 {
		fd, err := unix.Openat2(dirfd, name, &how)
		if err != unix.EAGAIN && err != unix.EINTR {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}

func (x *dirFDs) close() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return
	}
	x.closed = true
	x.evictLocked()
	unix.Close(x.root)
}

func (x *dirFDs) evictLocked() {
	for _, e := range x.dirs {
		e.evicted = true
		if e.refs == 0 {
			unix.Close(e.fd)
		}
	}
	clear(x.dirs)
}

// split returns the directory holding name and the entry's name in it. The
// entry is never ".." or "", so a lookup of it cannot leave the directory.
func split(name string) (dir, base string) {
	i := strings.LastIndexByte(name, '/')
	dir, base = ".", name
	if i >= 0 {
		dir, base = name[:i], name[i+1:]
	}
	if base == ".." || base == "" {
		return name, "."
	}
	return dir, base
}

// acquire returns a descriptor of the directory dir, resolved inside the
// root, holding a reference the caller must release.
func (x *dirFDs) acquire(dir string) (*dirFD, error) {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return nil, fs.ErrClosed
	}
	if dir == "." || dir == "" {
		x.mu.Unlock()
		return &dirFD{fd: x.root, keep: true}, nil
	}
	if e, ok := x.dirs[dir]; ok {
		e.refs++
		x.mu.Unlock()
		return e, nil
	}
	x.mu.Unlock()
	fd, err := x.openat2(x.root, dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC,
		unix.RESOLVE_IN_ROOT|unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		unix.Close(fd)
		return nil, fs.ErrClosed
	}
	if e, ok := x.dirs[dir]; ok {
		unix.Close(fd)
		e.refs++
		return e, nil
	}
	if len(x.dirs) >= maxDirFDs {
		x.evictLocked()
	}
	e := &dirFD{fd: fd, refs: 1}
	x.dirs[dir] = e
	return e, nil
}

func (x *dirFDs) release(e *dirFD) {
	if e.keep {
		return
	}
	x.mu.Lock()
	e.refs--
	if e.evicted && e.refs == 0 {
		unix.Close(e.fd)
	}
	x.mu.Unlock()
}

func (x *dirFDs) lstat(name string) (fs.FileInfo, error) {
	dir, base := split(name)
	e, err := x.acquire(dir)
	if err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	defer x.release(e)
	info := &fileInfo{name: path.Base(name)}
	st := (*unix.Stat_t)(unsafe.Pointer(&info.st))
	for {
		err = unix.Fstatat(e.fd, base, st, unix.AT_SYMLINK_NOFOLLOW)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	return info, nil
}

func (x *dirFDs) readLink(name string) (string, error) {
	dir, base := split(name)
	e, err := x.acquire(dir)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
	}
	defer x.release(e)
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(e.fd, base, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", &fs.PathError{Op: "readlink", Path: name, Err: err}
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// openFD opens name for reading, refusing a link as its last component, and
// describes it in st. Unlike lstat and readLink it looks the whole name up
// from the root, RESOLVE_IN_ROOT, at every call rather than through a cached
// parent: what is read is decided by the tree as it is now, inside the root.
// It refuses anything but a regular file or a directory: a device node in
// an image names a host device, and a FIFO could block a read forever.
// O_NONBLOCK keeps the open itself from blocking on a FIFO. With st nil the
// flags must hold O_DIRECTORY, which refuses all but a directory already.
func (x *dirFDs) openFD(op, name string, flags uint64, st *unix.Stat_t) (int, error) {
	e, err := x.acquire(".")
	if err != nil {
		return -1, &fs.PathError{Op: op, Path: name, Err: err}
	}
	fd, err := x.openat2(e.fd, name,
		unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY|flags,
		unix.RESOLVE_IN_ROOT|unix.RESOLVE_NO_MAGICLINKS)
	if err != nil {
		return -1, &fs.PathError{Op: op, Path: name, Err: err}
	}
	if st == nil {
		return fd, nil
	}
	if err := unix.Fstat(fd, st); err != nil {
		unix.Close(fd)
		return -1, &fs.PathError{Op: op, Path: name, Err: err}
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFREG && t != unix.S_IFDIR {
		unix.Close(fd)
		return -1, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	return fd, nil
}

func (x *dirFDs) open(name string) (fs.File, error) {
	info := &fileInfo{name: path.Base(name)}
	fd, err := x.openFD("open", name, 0, (*unix.Stat_t)(unsafe.Pointer(&info.st)))
	if err != nil {
		return nil, err
	}
	f := &file{fd: fd, x: x, name: name, info: info}
	f.cleanup = runtime.AddCleanup(f, func(fd int) { unix.Close(fd) }, fd)
	return f, nil
}

// readFile reads name whole, at most MaxReadFile bytes of it: the size the
// file claims only sizes the first buffer.
func (x *dirFDs) readFile(name string) ([]byte, error) {
	var st unix.Stat_t
	fd, err := x.openFD("open", name, 0, &st)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	// One byte more than the size, so a short read shows the end of a file
	// that did not grow.
	size := max(st.Size, 0)
	buf := make([]byte, 0, min(size, MaxReadFile)+1)
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, 4096)
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: name, Err: err}
		}
		if n <= 0 {
			return buf, nil
		}
		short := n < cap(buf)-len(buf)
		buf = buf[:len(buf)+n]
		if len(buf) > MaxReadFile {
			return nil, &fs.PathError{Op: "read", Path: name, Err: ErrTooLarge}
		}
		if short && size > 0 && int64(len(buf)) >= size {
			// Read short up to the size it had at open: its end.
			return buf, nil
		}
	}
}

func (x *dirFDs) readDir(name string) ([]fs.DirEntry, error) {
	fd, err := x.openFD("readdir", name, unix.O_DIRECTORY, nil)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	ents, err := x.getdents(fd, name)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return ents, nil
}

// getdents reads every entry of the open directory fd (the directory name)
// with getdents64(2), using the types it reports. os.File's own ReadDir is
// not used: its entries' Info would lstat a host path. The entries and
// their names are allocated together, not one by one.
func (x *dirFDs) getdents(fd int, name string) ([]fs.DirEntry, error) {
	var (
		names []byte  // every name, back to back
		ends  []int   // where each name ends in names
		typs  []uint8 // each entry's d_type
		buf   = make([]byte, 16<<10)
	)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
		}
		if n <= 0 {
			break
		}
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return nil, &fs.PathError{Op: "readdir", Path: name, Err: unix.EIO}
			}
			typ, nm := b[18], b[19:reclen]
			b = b[reclen:]
			if i := slices.Index(nm, 0); i >= 0 {
				nm = nm[:i]
			}
			if len(nm) == 0 || string(nm) == "." || string(nm) == ".." {
				continue
			}
			names = append(names, nm...)
			ends = append(ends, len(names))
			typs = append(typs, typ)
		}
	}
	if len(ends) == 0 {
		return nil, nil
	}
	all := string(names)
	store := make([]dirEntry, len(ends))
	ents := make([]fs.DirEntry, len(ends))
	start := 0
	for i, end := range ends {
		de := &store[i]
		*de = dirEntry{x: x, dir: name, name: all[start:end], typ: direntType(typs[i])}
		start = end
		if typs[i] == unix.DT_UNKNOWN {
			// Some file systems do not report types; ask, inside the root.
			fi, err := x.lstat(de.full())
			if err != nil {
				return nil, err
			}
			de.typ, de.info = fi.Mode().Type(), fi
		}
		ents[i] = de
	}
	return ents, nil
}

func direntType(t uint8) fs.FileMode {
	switch t {
	case unix.DT_DIR:
		return fs.ModeDir
	case unix.DT_LNK:
		return fs.ModeSymlink
	case unix.DT_FIFO:
		return fs.ModeNamedPipe
	case unix.DT_SOCK:
		return fs.ModeSocket
	case unix.DT_BLK:
		return fs.ModeDevice
	case unix.DT_CHR:
		return fs.ModeDevice | fs.ModeCharDevice
	}
	return 0
}

// dirEntry is one entry of a directory listing; Info asks the Dir, so it
// stays inside the root.
type dirEntry struct {
	x         *dirFDs
	dir, name string // the directory listed and the entry's name in it
	typ       fs.FileMode
	info      fs.FileInfo
}

// full is the entry's name from the root.
func (e *dirEntry) full() string { return path.Join(e.dir, e.name) }

func (e *dirEntry) Name() string      { return e.name }
func (e *dirEntry) IsDir() bool       { return e.typ.IsDir() }
func (e *dirEntry) Type() fs.FileMode { return e.typ }
func (e *dirEntry) String() string    { return fs.FormatDirEntry(e) }

func (e *dirEntry) Info() (fs.FileInfo, error) {
	if e.info != nil {
		return e.info, nil
	}
	return e.x.lstat(e.full())
}

// file is an open file of a Dir, on its raw descriptor: an os.File would
// cost two more system calls per open (fcntl, epoll_ctl), and its ReadDir
// entries' Info would lstat a host path. Its Stat is the one taken at open.
type file struct {
	fd      int
	x       *dirFDs
	name    string
	info    *fileInfo
	cleanup runtime.Cleanup
	closed  bool
	off     int64 // offset of the next Read
	short   bool  // the last Read returned less than asked
	ents    []fs.DirEntry
	read    bool
}

func (f *file) Stat() (fs.FileInfo, error) { return f.info, nil }

func (f *file) Read(p []byte) (int, error) {
	if f.closed {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: fs.ErrClosed}
	}
	if len(p) == 0 {
		return 0, nil
	}
	if f.atEOF() {
		return 0, io.EOF
	}
	for {
		n, err := unix.Read(f.fd, p)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return 0, &fs.PathError{Op: "read", Path: f.name, Err: err}
		}
		if n <= 0 {
			return 0, io.EOF
		}
		f.off += int64(n)
		f.short = n < len(p)
		return n, nil
	}
}

// atEOF reports a regular file read short up to the size it had at open:
// its end, known without the read(2) that would return 0.
func (f *file) atEOF() bool {
	return f.short && f.info.Mode().IsRegular() && f.info.Size() > 0 && f.off >= f.info.Size()
}

// ReadAt reads len(p) bytes at off, as io.ReaderAt.
func (f *file) ReadAt(p []byte, off int64) (int, error) {
	if f.closed {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: fs.ErrClosed}
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "readat", Path: f.name, Err: fs.ErrInvalid}
	}
	done := 0
	for done < len(p) {
		n, err := unix.Pread(f.fd, p[done:], off+int64(done))
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return done, &fs.PathError{Op: "read", Path: f.name, Err: err}
		}
		if n <= 0 {
			return done, io.EOF
		}
		done += n
	}
	return done, nil
}

// Seek sets the offset of the next Read, as io.Seeker.
func (f *file) Seek(offset int64, whence int) (int64, error) {
	if f.closed {
		return 0, &fs.PathError{Op: "seek", Path: f.name, Err: fs.ErrClosed}
	}
	off, err := unix.Seek(f.fd, offset, whence)
	if err != nil {
		return 0, &fs.PathError{Op: "seek", Path: f.name, Err: err}
	}
	f.ents, f.read = nil, false
	f.off, f.short = off, false
	return off, nil
}

func (f *file) Close() error {
	if f.closed {
		return &fs.PathError{Op: "close", Path: f.name, Err: fs.ErrClosed}
	}
	f.closed = true
	f.cleanup.Stop()
	if err := unix.Close(f.fd); err != nil {
		return &fs.PathError{Op: "close", Path: f.name, Err: err}
	}
	return nil
}

// ReadDir follows fs.ReadDirFile: n > 0 returns at most n entries and
// io.EOF at the end, n <= 0 returns all that remain.
func (f *file) ReadDir(n int) ([]fs.DirEntry, error) {
	if f.closed {
		return nil, &fs.PathError{Op: "readdir", Path: f.name, Err: fs.ErrClosed}
	}
	if !f.read {
		if !f.info.IsDir() {
			return nil, &fs.PathError{Op: "readdir", Path: f.name, Err: unix.ENOTDIR}
		}
		ents, err := f.x.getdents(f.fd, f.name)
		if err != nil {
			return nil, err
		}
		slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		f.ents, f.read = ents, true
	}
	if n <= 0 {
		ents := f.ents
		f.ents = nil
		return ents, nil
	}
	if len(f.ents) == 0 {
		return nil, io.EOF
	}
	n = min(n, len(f.ents))
	ents := f.ents[:n:n]
	f.ents = f.ents[n:]
	return ents, nil
}

// fileInfo describes an entry from its struct stat, as os.Lstat does.
type fileInfo struct {
	name string
	st   syscall.Stat_t
}

func (fi *fileInfo) Name() string       { return fi.name }
func (fi *fileInfo) Size() int64        { return fi.st.Size }
func (fi *fileInfo) IsDir() bool        { return fi.Mode().IsDir() }
func (fi *fileInfo) ModTime() time.Time { return time.Unix(fi.st.Mtim.Unix()) }
func (fi *fileInfo) Sys() any           { return &fi.st }

func (fi *fileInfo) Mode() fs.FileMode {
	m := fs.FileMode(fi.st.Mode & 0o777)
	switch fi.st.Mode & syscall.S_IFMT {
	case syscall.S_IFBLK:
		m |= fs.ModeDevice
	case syscall.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFDIR:
		m |= fs.ModeDir
	case syscall.S_IFIFO:
		m |= fs.ModeNamedPipe
	case syscall.S_IFLNK:
		m |= fs.ModeSymlink
	case syscall.S_IFSOCK:
		m |= fs.ModeSocket
	}
	if fi.st.Mode&syscall.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if fi.st.Mode&syscall.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if fi.st.Mode&syscall.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}
