package inodefs_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/fs/inodefs"
	"github.com/amilint/amilint/internal/image/integrity"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// node is an inode of the fake disk.
type node struct {
	attr   inodefs.Attr
	ents   []inodefs.Dirent
	target string
	data   []byte
	err    error // what Dirents and Contents fail with
}

// disk is a fake inodefs.Disk: inodes by number, the root at 1. It counts
// the inodes it reads and the directories it lists.
type disk struct {
	nodes    map[uint64]*node
	reads    int
	listings int
}

var errNoInode = errors.New("no such inode")

func (d *disk) Root() uint64 { return 1 }
func (d *disk) Inode(ino uint64) (*node, error) {
	d.reads++
	n, ok := d.nodes[ino]
	if !ok {
		return nil, errNoInode
	}
	return n, nil
}
func (d *disk) Attr(n *node) inodefs.Attr { return n.attr }
func (d *disk) Dirents(n *node) ([]inodefs.Dirent, error) {
	d.listings++
	return n.ents, n.err
}
func (d *disk) Symlink(n *node) (string, error) { return n.target, n.err }
func (d *disk) Contents(n *node) (io.ReaderAt, error) {
	if n.err != nil {
		return nil, n.err
	}
	return bytes.NewReader(n.data), nil
}

var (
	mtime   = time.Unix(1700000000, 0)
	errDisk = errors.New("bad block")
)

// fake builds a small tree: etc/ with a file, an untyped entry (a FIFO), a
// duplicate name, a link and a file claiming 1 TiB; bad/, whose listing
// fails; and dangling, an entry with no inode.
func fake() *disk {
	dir := func(ino uint64, ents ...inodefs.Dirent) *node {
		return &node{attr: inodefs.Attr{Ino: ino, Mode: fs.ModeDir | 0o755, ModTime: mtime}, ents: ents}
	}
	file := func(ino uint64, data string) *node {
		return &node{attr: inodefs.Attr{Ino: ino, Mode: 0o644, Size: int64(len(data)), ModTime: mtime}, data: []byte(data)}
	}
	return &disk{nodes: map[uint64]*node{
		1: dir(1, inodefs.Dirent{Name: "etc", Ino: 2, Type: 2}, inodefs.Dirent{Name: "bad", Ino: 7, Type: 2},
			inodefs.Dirent{Name: "dangling", Ino: 99, Type: 1}),
		2: dir(2,
			inodefs.Dirent{Name: "os-release", Ino: 3, Type: 1},
			inodefs.Dirent{Name: "untyped", Ino: 8},
			inodefs.Dirent{Name: "os-release", Ino: 4, Type: 1},
			inodefs.Dirent{Name: "link", Ino: 5, Type: 7},
			inodefs.Dirent{Name: "huge", Ino: 6, Type: 1}),
		3: file(3, "ID=debian\n"),
		4: file(4, "second\n"),
		5: {attr: inodefs.Attr{Ino: 5, Mode: fs.ModeSymlink | 0o777, Size: 10}, target: "os-release"},
		6: {attr: inodefs.Attr{Ino: 6, Mode: 0o644, Size: 1 << 40}},
		7: {attr: inodefs.Attr{Ino: 7, Mode: fs.ModeDir | 0o755}, err: errDisk},
		8: {attr: inodefs.Attr{Ino: 8, Mode: fs.ModeNamedPipe | 0o600}},
	}}
}

func TestSourceSemantics(t *testing.T) {
	f := inodefs.New[*node](fake())
	var _ rootfs.Source = f
	for _, tc := range []struct {
		name string
		do   func() (any, error)
		want any
		err  error
	}{
		{"read a file", func() (any, error) { b, err := f.ReadFile("etc/os-release"); return string(b), err }, "ID=debian\n", nil},
		{"first of two entries of one name counts", func() (any, error) {
			fi, err := f.Lstat("etc/os-release")
			return fi.Sys(), err
		}, uint64(3), nil},
		{"untyped entry takes its inode's type", func() (any, error) {
			list, err := f.ReadDir("etc")
			names := map[string]fs.FileMode{}
			for _, e := range list {
				names[e.Name()] = e.Type()
			}
			return names, err
		}, map[string]fs.FileMode{"os-release": 0, "untyped": fs.ModeNamedPipe, "link": fs.ModeSymlink, "huge": 0}, nil},
		{"read a link", func() (any, error) { return f.ReadLink("etc/link") }, "os-release", nil},
		{"link is not followed by Open", func() (any, error) { return f.Open("etc/link") }, nil, fs.ErrInvalid},
		{"link is not followed by a lookup", func() (any, error) { return f.Lstat("etc/link/x") }, nil, rootfs.ErrNotDir},
		{"readlink of a file", func() (any, error) { return f.ReadLink("etc/os-release") }, nil, fs.ErrInvalid},
		{"file as a directory", func() (any, error) { return f.ReadDir("etc/os-release") }, nil, rootfs.ErrNotDir},
		{"missing", func() (any, error) { return f.Lstat("etc/nope") }, nil, fs.ErrNotExist},
		{"invalid name", func() (any, error) { return f.Lstat("/etc") }, nil, fs.ErrInvalid},
		{"read of a FIFO", func() (any, error) {
			fl, err := f.Open("etc/untyped")
			require.NoError(t, err)
			return fl.Read(make([]byte, 1))
		}, nil, fs.ErrInvalid},
		{"readfile of a directory", func() (any, error) { return f.ReadFile("etc") }, nil, fs.ErrInvalid},
		{"file over MaxReadFile", func() (any, error) { return f.ReadFile("etc/huge") }, nil, inodefs.ErrTooLarge},
		{"disk error listing", func() (any, error) { return f.ReadDir("bad") }, nil, errDisk},
		{"disk error in a lookup", func() (any, error) { return f.Lstat("bad/x") }, nil, errDisk},
		{"entry without an inode", func() (any, error) { return f.Lstat("dangling") }, nil, errNoInode},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.do()
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				var pe *fs.PathError
				assert.ErrorAs(t, err, &pe, "errors are *fs.PathError")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestFileReadsAndSeeks(t *testing.T) {
	f := inodefs.New[*node](fake())
	fl, err := f.Open("etc/os-release")
	require.NoError(t, err)
	fi, err := fl.Stat()
	require.NoError(t, err)
	assert.Equal(t, "os-release", fi.Name())
	assert.Equal(t, mtime, fi.ModTime())
	s, ok := fl.(io.ReadSeeker)
	require.True(t, ok)
	off, err := s.Seek(-7, io.SeekEnd)
	require.NoError(t, err)
	assert.Equal(t, int64(3), off)
	rest, err := io.ReadAll(s)
	require.NoError(t, err)
	assert.Equal(t, "debian\n", string(rest))
	_, err = s.Seek(-1, io.SeekStart)
	assert.ErrorIs(t, err, fs.ErrInvalid)
	buf := make([]byte, 20)
	n, err := fl.(io.ReaderAt).ReadAt(buf, 5)
	assert.Equal(t, 5, n)
	assert.ErrorIs(t, err, io.EOF, "a short ReadAt says why")
}

func TestLookupsHitTheCache(t *testing.T) {
	d := fake()
	f := inodefs.New[*node](d)
	_, err := f.Lstat("etc/os-release")
	require.NoError(t, err)
	first := d.reads
	for range 10 {
		_, err := f.Lstat("etc/os-release")
		require.NoError(t, err)
	}
	assert.Equal(t, first, d.reads, "repeated lookups read no inode again")
}

func TestFSTestConformance(t *testing.T) {
	d := fake()
	delete(d.nodes, 7)
	delete(d.nodes, 5)
	delete(d.nodes, 6)
	d.nodes[1].ents = d.nodes[1].ents[:1]
	d.nodes[2].ents = d.nodes[2].ents[:2]
	d.nodes[2].ents[1].Ino = 4
	require.NoError(t, fstest.TestFS(inodefs.New[*node](d), "etc/os-release", "etc/untyped"))
}

func TestFileMode(t *testing.T) {
	for _, tc := range []struct {
		mode uint16
		want fs.FileMode
	}{
		{0o100644, 0o644},
		{0o040755, fs.ModeDir | 0o755},
		{0o120777, fs.ModeSymlink | 0o777},
		{0o104755, fs.ModeSetuid | 0o755},
		{0o102755, fs.ModeSetgid | 0o755},
		{0o041777, fs.ModeDir | fs.ModeSticky | 0o777},
		{0o020666, fs.ModeDevice | fs.ModeCharDevice | 0o666},
		{0o060660, fs.ModeDevice | 0o660},
		{0o010600, fs.ModeNamedPipe | 0o600},
		{0o140755, fs.ModeSocket | 0o755},
		{0o000644, fs.ModeIrregular | 0o644},
	} {
		assert.Equal(t, tc.want, inodefs.FileMode(tc.mode), "mode %o", tc.mode)
	}
}

// shortReader serves only its first n bytes, then io.EOF, or err when set.
type shortReader struct {
	b   []byte
	n   int
	err error
}

func (s shortReader) ReadAt(p []byte, off int64) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if off >= int64(s.n) {
		return 0, io.EOF
	}
	n := copy(p, s.b[off:s.n])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func TestReadFull(t *testing.T) {
	errCorrupt := errors.New("corrupt fs")
	errDisk := errors.New("disk failed")
	dev := []byte("0123456789abcdef")
	for _, tt := range []struct {
		name string
		r    io.ReaderAt
		n    int
		off  int64
		want error
	}{
		{"inside", shortReader{b: dev, n: 16}, 4, 12, nil},
		{"negative offset", shortReader{b: dev, n: 16}, 4, -1, errCorrupt},
		{"past the end", shortReader{b: dev, n: 16}, 4, 13, errCorrupt},
		{"offset past the size", shortReader{b: dev, n: 16}, 0, 17, errCorrupt},
		{"device shorter than its size", shortReader{b: dev, n: 10}, 4, 8, io.ErrUnexpectedEOF},
		{"device error kept", shortReader{err: errDisk}, 4, 0, errDisk},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := make([]byte, tt.n)
			err := inodefs.ReadFull(tt.r, 16, p, tt.off, errCorrupt)
			if tt.want == nil {
				require.NoError(t, err)
				assert.Equal(t, dev[tt.off:tt.off+int64(tt.n)], p)
				return
			}
			require.ErrorIs(t, err, tt.want)
		})
	}
}

// TestDamage: the first error a Disk method returns is kept for Damage,
// with its path given to a checksum mismatch; names that do not exist are
// not damage. With OnDamage every one is told instead; with TrackPaths an
// inode is named by the path it was looked up by.
func TestDamage(t *testing.T) {
	d := fake()
	mismatch := &integrity.Mismatch{Format: "test", Structure: "directory block 9", Corrupt: errDisk}
	d.nodes[7].err = mismatch
	f := inodefs.New[*node](d)
	_, err := f.Lstat("etc/nope")
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = f.ReadFile("etc/huge")
	require.ErrorIs(t, err, inodefs.ErrTooLarge)
	require.NoError(t, f.Damage(), "a missing name or an over-large file is not damage")
	_, err = f.Lstat("bad/x")
	require.ErrorIs(t, err, integrity.ErrChecksum)
	m, ok := integrity.As(err)
	require.True(t, ok)
	assert.Equal(t, "test: directory block 9 (/bad) fails its checksum", m.Error())
	_, err = f.Lstat("dangling")
	require.ErrorIs(t, err, errNoInode)
	require.Error(t, f.Damage())
	assert.Equal(t, "test: directory block 9 (/bad) fails its checksum", f.Damage().Error(), "the first one")

	g := inodefs.New[*node](d)
	g.TrackPaths()
	var told []string
	g.OnDamage(func(path string, err error) { told = append(told, path) })
	_, _ = g.Lstat("bad/x")
	_, _ = g.Lstat("dangling")
	assert.Equal(t, []string{"/bad", "/dangling"}, told)
	assert.NoError(t, g.Damage())
	_, err = g.Lstat("etc/os-release")
	require.NoError(t, err)
	assert.Equal(t, "/etc/os-release", g.PathOf(3))
	assert.Equal(t, "/", g.PathOf(1))
	assert.Equal(t, "", g.PathOf(4), "never looked up")
}

// TestLargeDirectoryListedOnce: a walk of a directory lists it, then looks
// up each of its entries by name, through the directories above it. A
// directory over the cache's bound was listed again for every lookup: a
// scan of an intact image with 100,000 links in /etc/systemd/system
// (mke2fs -d) ran for more than 10 minutes, each lstat and readlink
// parsing the whole directory again.
func TestLargeDirectoryListedOnce(t *testing.T) {
	const n = 100_000
	d := &disk{nodes: map[uint64]*node{
		1: {attr: inodefs.Attr{Ino: 1, Mode: fs.ModeDir | 0o755}, ents: []inodefs.Dirent{{Name: "etc", Ino: 2, Type: 2}}},
		2: {attr: inodefs.Attr{Ino: 2, Mode: fs.ModeDir | 0o755}, ents: []inodefs.Dirent{{Name: "big", Ino: 3, Type: 2}}},
		3: {attr: inodefs.Attr{Ino: 3, Mode: fs.ModeDir | 0o755}},
		4: {attr: inodefs.Attr{Ino: 4, Mode: fs.ModeSymlink | 0o777}, target: "/dev/null"},
	}}
	for i := range n {
		d.nodes[3].ents = append(d.nodes[3].ents, inodefs.Dirent{Name: fmt.Sprintf("u%d.service", i), Ino: 4, Type: 7})
	}
	f := inodefs.New[*node](d)
	list, err := f.ReadDir("etc/big")
	require.NoError(t, err)
	require.Len(t, list, n)
	for _, e := range list[:1000] {
		_, err := f.Lstat("etc/big/" + e.Name())
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, d.listings, 3, "the directories on the path are listed once each")
}
