package oci

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/amilint/amilint/internal/image/fs/tarfs"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// Tree is the root filesystem of an image once its layers are applied: a
// rootfs.Source held in memory. Every entry keeps its metadata; a regular
// file keeps its content when the keep rule chose it while its layer
// streamed by, or can fetch it on demand when its layer has a table of
// contents; any other file fails to open with tarfs.ErrNotKept. It is safe
// for concurrent use once built.
type Tree struct {
	root *node
	opt  TreeOptions
	held int64 // bytes of content kept
	n    int   // entries applied

	mu     sync.Mutex // guards cached and the lazy nodes' data
	cached int64      // bytes of lazily fetched content held
}

// TreeOptions bound what a Tree keeps.
type TreeOptions struct {
	// Keep says whether to hold a regular file's content as its layer
	// streams by; the name is the file's path in the image, links in its
	// parents followed. Nil means Keep.
	Keep func(name string, size int64, mode fs.FileMode) bool
	// MaxMemory caps the bytes of content held, kept while streaming and
	// fetched on demand together (0: tarfs.DefaultStreamMaxMemory).
	MaxMemory int64
	// MaxEntries caps the entries applied over all layers (0:
	// tarfs.DefaultMaxEntries).
	MaxEntries int
}

// Keep is the default keep rule: tarfs.StreamKeep, with an ostree/bootc
// image's /usr/etc (its default /etc) kept as /etc is.
func Keep(name string, size int64, mode fs.FileMode) bool {
	if rest, ok := strings.CutPrefix(name, "usr/etc/"); ok {
		name = "etc/" + rest
	}
	return tarfs.StreamKeep(name, size, mode)
}

// lazyFile is the content of a file of a layer read by its table of
// contents: read fetches and verifies it; data keeps it once read.
type lazyFile struct {
	read func() ([]byte, error)
	data []byte
}

type node struct {
	name     string
	mode     fs.FileMode
	size     int64
	mtime    time.Time
	link     string // symbolic link target
	data     []byte // content held
	lazy     *lazyFile
	layer    int // the layer that put the entry here
	children map[string]*node
}

// NewTree returns an empty tree (a root directory) bounded by opt.
func NewTree(opt TreeOptions) *Tree {
	if opt.Keep == nil {
		opt.Keep = Keep
	}
	if opt.MaxMemory <= 0 {
		opt.MaxMemory = tarfs.DefaultStreamMaxMemory
	}
	if opt.MaxEntries <= 0 {
		opt.MaxEntries = tarfs.DefaultMaxEntries
	}
	return &Tree{root: &node{mode: fs.ModeDir | 0o755, children: map[string]*node{}, layer: -1}, opt: opt}
}

var _ rootfs.Source = (*Tree)(nil)

// lookup finds name without following any link (the view resolves them).
func (t *Tree) lookup(name string) (*node, error) {
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

func (t *Tree) get(op, name string) (*node, error) {
	n, err := t.lookup(name)
	if err != nil {
		return nil, &fs.PathError{Op: op, Path: name, Err: err}
	}
	return n, nil
}

// Lstat describes name without following it.
func (t *Tree) Lstat(name string) (fs.FileInfo, error) {
	n, err := t.get("lstat", name)
	if err != nil {
		return nil, err
	}
	return info{n, path.Base(name)}, nil
}

// ReadLink returns a symbolic link's target as stored.
func (t *Tree) ReadLink(name string) (string, error) {
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
func (t *Tree) ReadDir(name string) ([]fs.DirEntry, error) {
	n, err := t.get("readdir", name)
	if err != nil {
		return nil, err
	}
	if !n.mode.IsDir() {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: rootfs.ErrNotDir}
	}
	return n.entries(), nil
}

func (n *node) entries() []fs.DirEntry {
	out := make([]fs.DirEntry, 0, len(n.children))
	for name, c := range n.children {
		out = append(out, fs.FileInfoToDirEntry(info{c, name}))
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out
}

// ReadFile reads a regular file whole (at most rootfs.MaxReadFile bytes).
func (t *Tree) ReadFile(name string) ([]byte, error) {
	n, err := t.get("read", name)
	if err != nil {
		return nil, err
	}
	b, err := t.content(n)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	return bytes.Clone(b), nil
}

// content returns a regular file's bytes: held, or fetched now.
func (t *Tree) content(n *node) ([]byte, error) {
	switch {
	case n.mode.IsDir():
		return nil, errors.New("is a directory")
	case !n.mode.IsRegular():
		return nil, nil
	case n.data != nil || n.size == 0:
		return n.data, nil
	case n.lazy != nil:
		return t.fetch(n)
	}
	return nil, tarfs.ErrNotKept
}

// fetch reads a file of a layer with a table of contents, verified against
// the digest the table records, and keeps it while the memory bound allows.
func (t *Tree) fetch(n *node) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if n.lazy.data != nil {
		return n.lazy.data, nil
	}
	if n.size > rootfs.MaxReadFile {
		return nil, fmt.Errorf("%d bytes, over %d: %w", n.size, rootfs.MaxReadFile, rootfs.ErrTooLarge)
	}
	b, err := n.lazy.read()
	if err != nil {
		return nil, err
	}
	if t.cached+t.held+int64(len(b)) <= t.opt.MaxMemory {
		n.lazy.data = b
		t.cached += int64(len(b))
	}
	return b, nil
}

// Open opens a file or directory (never a link: the view resolves those).
func (t *Tree) Open(name string) (fs.File, error) {
	n, err := t.get("open", name)
	if err != nil {
		return nil, err
	}
	f := &file{n: n, name: name}
	if n.mode.IsDir() {
		f.dir = n.entries()
		return f, nil
	}
	b, err := t.content(n)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	f.r = bytes.NewReader(b)
	return f, nil
}

type info struct {
	n    *node
	name string
}

func (i info) Name() string       { return i.name }
func (i info) Size() int64        { return i.n.size }
func (i info) Mode() fs.FileMode  { return i.n.mode }
func (i info) ModTime() time.Time { return i.n.mtime }
func (i info) IsDir() bool        { return i.n.mode.IsDir() }
func (i info) Sys() any           { return nil }

type file struct {
	n    *node
	name string
	r    *bytes.Reader
	dir  []fs.DirEntry
}

func (f *file) Stat() (fs.FileInfo, error) { return info{f.n, path.Base(f.name)}, nil }
func (f *file) Close() error               { return nil }

func (f *file) Read(p []byte) (int, error) {
	if f.r == nil {
		return 0, &fs.PathError{Op: "read", Path: f.name, Err: errors.New("is a directory")}
	}
	return f.r.Read(p)
}

// ReadDir lists a directory in chunks, as fs.ReadDirFile says.
func (f *file) ReadDir(count int) ([]fs.DirEntry, error) {
	if !f.n.mode.IsDir() {
		return nil, &fs.PathError{Op: "readdir", Path: f.name, Err: rootfs.ErrNotDir}
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
