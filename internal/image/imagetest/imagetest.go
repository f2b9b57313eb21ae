// Package imagetest holds what the filesystem readers' tests share: a
// source tree exercising every on-disk layout worth testing, a proto file
// writer for mkfs.xfs, a comparison of a rootfs.Source against the host
// tree it was built from, and a byte-counting io.ReaderAt. It is imported
// only by tests.
package imagetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// Options chooses what BuildTree puts in the tree.
type Options struct {
	// BigDir is the number of entries of big/ (0: none).
	BigDir int
	// NoSymlinks leaves out symbolic links and special files, for
	// testing/fstest.TestFS.
	NoSymlinks bool
	// Sparse makes the large files sparse (holes between data runs) and
	// adds frag.bin, a file of many small data runs separated by holes.
	Sparse bool
	// NoBigFile leaves out the 20 MB file (testing/fstest.TestFS reads
	// every file many times over in small pieces).
	NoBigFile bool
}

// BuildTree fills dir with a tree exercising the layouts the readers must
// handle: small (inline) and empty files, block-boundary sizes, nested and
// large directories, a 20 MB file, fast (< 60 bytes) and slow symlinks,
// absolute, relative and dangling links, and a FIFO.
func BuildTree(t testing.TB, dir string, o Options) {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	data := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		return b
	}
	write := func(name string, b []byte) {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, b, 0o644))
	}
	require.NoError(t, os.Chmod(dir, 0o755))
	write("etc/os-release", []byte("ID=debian\nVERSION_ID=12\n"))
	write("etc/hostname", []byte("image\n"))
	write("etc/empty", nil)
	write("etc/sixty", bytes.Repeat([]byte("6"), 60))
	write("etc/small150", data(150))
	write("etc/block4096", data(4096))
	write("etc/block4097", data(4097))
	write("usr/lib/systemd/system/ssh.service", []byte("[Unit]\nDescription=OpenSSH\n[Service]\nExecStart=/usr/sbin/sshd -D\n[Install]\nWantedBy=multi-user.target\n"))
	write("usr/lib/systemd/system/ecs.service", []byte("[Unit]\nDescription=ECS agent\n[Service]\nExecStart=/usr/bin/ecs\nRestart=always\n[Install]\nWantedBy=multi-user.target\n"))
	write("usr/share/doc/deep/a/b/c/d/e/f/g/readme", []byte("deep\n"))
	write("var/lib/medium.bin", data(300_000))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "var/empty-dir"), 0o755))
	require.NoError(t, os.Chmod(filepath.Join(dir, "etc/hostname"), 0o600))
	require.NoError(t, os.Chmod(filepath.Join(dir, "var/lib/medium.bin"), 0o4755))

	// A 20 MB file; sparse, its data runs are at the start, middle and end.
	big := filepath.Join(dir, "var/lib/big.img")
	const bigSize = 20 << 20
	switch {
	case o.NoBigFile:
	case o.Sparse:
		fh, err := os.Create(big)
		require.NoError(t, err)
		for _, off := range []int64{0, 10 << 20, bigSize - 5000} {
			_, err := fh.WriteAt(data(5000+int(off%7)), off)
			require.NoError(t, err)
		}
		require.NoError(t, fh.Truncate(bigSize))
		require.NoError(t, fh.Close())
		// Data far out, for triple-indirect blocks with 1 KiB blocks.
		fh, err = os.Create(filepath.Join(dir, "var/lib/far.img"))
		require.NoError(t, err)
		_, err = fh.WriteAt(data(3000), 80<<20)
		require.NoError(t, err)
		require.NoError(t, fh.Close())
		// Many data runs separated by holes: hundreds of extents.
		fh, err = os.Create(filepath.Join(dir, "var/lib/frag.bin"))
		require.NoError(t, err)
		for i := range 300 {
			_, err := fh.WriteAt(data(4096), int64(i)*3*4096)
			require.NoError(t, err)
		}
		require.NoError(t, fh.Close())
	default:
		write("var/lib/big.img", data(bigSize))
	}

	// Directories of 5, 100 and 400 entries: on XFS short-form, block
	// and leaf directories (big/ is a node directory).
	for _, n := range []int{5, 100, 400} {
		for i := range n {
			write(fmt.Sprintf("sizes/d%d/file-%04d", n, i), nil)
		}
	}
	for i := range o.BigDir {
		write(fmt.Sprintf("big/entry-%05d.conf", i), fmt.Appendf(nil, "entry %d\n", i))
	}
	if o.NoSymlinks {
		return
	}
	link := func(target, name string) {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.Symlink(target, p))
	}
	link("/usr/lib/systemd/system/ssh.service", "etc/systemd/system/multi-user.target.wants/ssh.service")
	link("../../../usr/lib/systemd/system/ecs.service", "etc/systemd/system/multi-user.target.wants/ecs.service")
	link("/dev/null", "etc/systemd/system/masked.service")
	link("os-release", "etc/fast-link")
	link("/"+strings.Repeat("long-component/", 5)+"target-of-a-slow-symlink", "etc/slow-link")
	link(strings.Repeat("d123456789/", 45)+"end", "etc/remote-link") // 500 bytes: remote on XFS
	link("/nonexistent/dangling", "etc/dangling")
	link("usr/lib", "lib")
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "var/fifo"), 0o600))
	// A character device, where the test may make one (root, CAP_MKNOD).
	if err := syscall.Mknod(filepath.Join(dir, "var/null"), syscall.S_IFCHR|0o666, 1<<8|3); err != nil {
		t.Logf("no device node in the tree: %v", err)
	}
}

// ProtoFile writes a mkfs.xfs(8) proto file describing the tree at dir.
func ProtoFile(t testing.TB, dir, protoPath string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("/dev/null\n0 0\nd--755 0 0\n")
	var walk func(string, int)
	walk = func(p string, depth int) {
		ents, err := os.ReadDir(p)
		require.NoError(t, err)
		indent := strings.Repeat(" ", depth)
		for _, e := range ents {
			fi, err := e.Info()
			require.NoError(t, err)
			full := filepath.Join(p, e.Name())
			perm := fi.Mode().Perm()
			suid, sgid := "-", "-"
			if fi.Mode()&fs.ModeSetuid != 0 {
				suid = "u"
			}
			if fi.Mode()&fs.ModeSetgid != 0 {
				sgid = "g"
			}
			mode := fmt.Sprintf("%s%s%03o 0 0", suid, sgid, perm)
			switch {
			case fi.IsDir():
				fmt.Fprintf(&b, "%s%s d%s\n", indent, e.Name(), mode)
				walk(full, depth+1)
				fmt.Fprintf(&b, "%s$\n", indent)
			case fi.Mode()&fs.ModeSymlink != 0:
				target, err := os.Readlink(full)
				require.NoError(t, err)
				fmt.Fprintf(&b, "%s%s l%s %s\n", indent, e.Name(), mode, target)
			case fi.Mode()&fs.ModeNamedPipe != 0:
				fmt.Fprintf(&b, "%s%s p%s\n", indent, e.Name(), mode)
			case fi.Mode()&fs.ModeDevice != 0:
				st, ok := fi.Sys().(*syscall.Stat_t)
				require.True(t, ok)
				rdev := uint64(st.Rdev)
				major := (rdev>>8)&0xfff | (rdev>>32)&^0xfff
				minor := rdev&0xff | (rdev>>12)&^0xff
				typ := "b"
				if fi.Mode()&fs.ModeCharDevice != 0 {
					typ = "c"
				}
				fmt.Fprintf(&b, "%s%s %s%s %d %d\n", indent, e.Name(), typ, mode, major, minor)
			case fi.Mode().IsRegular():
				fmt.Fprintf(&b, "%s%s -%s %s\n", indent, e.Name(), mode, full)
			}
		}
	}
	walk(dir, 1)
	b.WriteString("$\n")
	require.NoError(t, os.WriteFile(protoPath, []byte(b.String()), 0o644))
}

// CompareOptions says what Compare checks beyond names, types, sizes,
// contents and link targets.
type CompareOptions struct {
	ModTimes bool // compare modification times to the second
	Perms    bool // compare permission, setuid, setgid and sticky bits
	// Extra names the entries of the image's root that mkfs adds
	// (lost+found); they must exist and are otherwise ignored.
	Extra []string
}

// Compare walks the host tree src and checks that fsys holds exactly the
// same entries: every path, type, size, content hash and link target, and
// the same directory listings. It returns the number of entries checked.
func Compare(t testing.TB, src string, fsys rootfs.Source, o CompareOptions) int {
	t.Helper()
	checked := 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		rel, err := filepath.Rel(src, p)
		require.NoError(t, err)
		name := filepath.ToSlash(rel)
		want, err := os.Lstat(p)
		require.NoError(t, err)
		got, err := fsys.Lstat(name)
		if !assert.NoError(t, err, "lstat %s", name) {
			return nil
		}
		checked++
		assert.Equal(t, want.Mode().Type(), got.Mode().Type(), "type of %s", name)
		if o.Perms {
			keep := fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky
			if want.Mode()&fs.ModeSymlink == 0 {
				assert.Equal(t, want.Mode()&keep, got.Mode()&keep, "permissions of %s", name)
			}
		}
		if o.ModTimes && want.Mode().IsRegular() {
			assert.Equal(t, want.ModTime().Unix(), got.ModTime().Unix(), "mtime of %s", name)
		}
		wantBase := filepath.Base(p)
		if name == "." {
			wantBase = "."
		}
		assert.Equal(t, wantBase, got.Name(), "name of %s", name)
		switch {
		case want.IsDir():
			wantList, err := os.ReadDir(p)
			require.NoError(t, err)
			gotList, err := fsys.ReadDir(name)
			if !assert.NoError(t, err, "readdir %s", name) {
				return nil
			}
			gotNames := dirNames(gotList)
			if name == "." {
				for _, x := range o.Extra {
					assert.Contains(t, gotNames, x)
					gotNames = slices.DeleteFunc(gotNames, func(n string) bool { return n == x })
				}
			}
			assert.Equal(t, dirNames(wantList), gotNames, "listing of %s", name)
			for _, e := range gotList {
				wi, err := os.Lstat(filepath.Join(p, e.Name()))
				if err == nil {
					assert.Equal(t, wi.Mode().Type(), e.Type(), "entry type of %s/%s", name, e.Name())
				}
			}
		case want.Mode()&fs.ModeSymlink != 0:
			wantT, err := os.Readlink(p)
			require.NoError(t, err)
			gotT, err := fsys.ReadLink(name)
			if assert.NoError(t, err, "readlink %s", name) {
				assert.Equal(t, wantT, gotT, "target of %s", name)
			}
			assert.Equal(t, int64(len(wantT)), got.Size(), "size of link %s", name)
		case want.Mode().IsRegular():
			assert.Equal(t, want.Size(), got.Size(), "size of %s", name)
			wantSum := hashFile(t, os.DirFS(src), name)
			f, err := fsys.Open(name)
			if !assert.NoError(t, err, "open %s", name) {
				return nil
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			assert.NoError(t, err, "read %s", name)
			assert.Equal(t, wantSum, fmt.Sprintf("%x", h.Sum(nil)), "content of %s", name)
			assert.NoError(t, f.Close())
		}
		return nil
	})
	require.NoError(t, err)
	return checked
}

func dirNames(list []fs.DirEntry) []string {
	names := make([]string, 0, len(list))
	for _, e := range list {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

func hashFile(t testing.TB, fsys fs.FS, name string) string {
	t.Helper()
	f, err := fsys.Open(name)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	require.NoError(t, err)
	return fmt.Sprintf("%x", h.Sum(nil))
}

// CountingReaderAt counts the bytes and calls read through it.
type CountingReaderAt struct {
	R     io.ReaderAt
	Bytes atomic.Int64
	Calls atomic.Int64
}

// ReadAt reads from R and counts.
func (c *CountingReaderAt) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.R.ReadAt(p, off)
	c.Bytes.Add(int64(n))
	c.Calls.Add(1)
	return n, err
}

// Walk visits every entry of fsys below root, reading every regular file
// (up to 1 MiB of each, 8 MiB in all), and returns how many entries it
// visited or the first error. It stops after limit entries so hostile
// images cannot make it unbounded.
func Walk(fsys rootfs.Source, limit int) (int, error) {
	visited := 0
	budget := int64(8 << 20)
	var walk func(string, int) error
	walk = func(dir string, depth int) error {
		if depth > 64 {
			return nil
		}
		list, err := fsys.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, e := range list {
			if visited >= limit {
				return nil
			}
			visited++
			name := e.Name()
			if dir != "." {
				name = dir + "/" + name
			}
			if !fs.ValidPath(name) {
				return fmt.Errorf("invalid name %q", name)
			}
			fi, err := fsys.Lstat(name)
			if err != nil {
				return err
			}
			switch {
			case fi.IsDir():
				if err := walk(name, depth+1); err != nil {
					return err
				}
			case fi.Mode()&fs.ModeSymlink != 0:
				if _, err := fsys.ReadLink(name); err != nil {
					return err
				}
			case fi.Mode().IsRegular():
				f, err := fsys.Open(name)
				if err != nil {
					return err
				}
				n, err := io.Copy(io.Discard, io.LimitReader(f, min(budget, 1<<20)))
				budget -= n
				f.Close()
				if err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := walk(".", 0)
	return visited, err
}

// CompactUnit is the granularity of compact images.
const CompactUnit = 512

// Compact encodes the non-zero CompactUnit-sized units of a device of size
// bytes, except those skip names, as a compact image: a big-endian count,
// the units' numbers, then their contents. Fuzz inputs stay small this way
// although the images mkfs makes are large and mostly zeros; mutating the
// numbers moves blocks around, which is fair game for a fuzzer too.
func Compact(t testing.TB, r io.ReaderAt, size int64, skip func(off int64) bool) []byte {
	t.Helper()
	var idx []uint32
	var data []byte
	zero := make([]byte, CompactUnit)
	chunk := make([]byte, 1<<20)
	for base := int64(0); base < size; base += int64(len(chunk)) {
		c := chunk[:min(int64(len(chunk)), size-base)]
		n, err := r.ReadAt(c, base)
		if err != nil && !errors.Is(err, io.EOF) {
			require.NoError(t, err)
		}
		for off := 0; off+CompactUnit <= n; off += CompactUnit {
			u := c[off : off+CompactUnit]
			if (skip != nil && skip(base+int64(off))) || bytes.Equal(u, zero) {
				continue
			}
			idx = append(idx, uint32((base+int64(off))/CompactUnit))
			data = append(data, u...)
		}
	}
	out := binary.BigEndian.AppendUint32(nil, uint32(len(idx)))
	for _, i := range idx {
		out = binary.BigEndian.AppendUint32(out, i)
	}
	return append(out, data...)
}

// CompactReader serves a compact image as a device of Size bytes, zeros
// wherever the image holds no unit.
type CompactReader struct {
	Size  int64
	units map[uint32][]byte
}

// NewCompactReader decodes a compact image, however malformed: it keeps
// the units that the input holds whole.
func NewCompactReader(b []byte, size int64) *CompactReader {
	c := &CompactReader{Size: size, units: map[uint32][]byte{}}
	if len(b) < 4 {
		return c
	}
	n := int(min(binary.BigEndian.Uint32(b), uint32((len(b)-4)/(4+CompactUnit))))
	data := b[4+4*n:]
	for i := range n {
		c.units[binary.BigEndian.Uint32(b[4+4*i:])] = data[i*CompactUnit : (i+1)*CompactUnit]
	}
	return c
}

// ReadAt reads from the device.
func (c *CompactReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 || off >= c.Size {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && off+int64(n) < c.Size {
		pos := off + int64(n)
		u := c.units[uint32(pos/CompactUnit)]
		in := int(pos % CompactUnit)
		chunk := p[n:min(len(p), n+CompactUnit-in, int(c.Size-pos)+n)]
		if u == nil {
			clear(chunk)
		} else {
			copy(chunk, u[in:])
		}
		n += len(chunk)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Patch writes p at device offset off, copying the units it changes.
func (c *CompactReader) Patch(off int64, p []byte) {
	for len(p) > 0 {
		k := uint32(off / CompactUnit)
		u := make([]byte, CompactUnit)
		copy(u, c.units[k])
		n := copy(u[off%CompactUnit:], p)
		c.units[k] = u
		p, off = p[n:], off+int64(n)
	}
}

// Clone returns a copy that Patch can change independently.
func (c *CompactReader) Clone() *CompactReader {
	d := &CompactReader{Size: c.Size, units: make(map[uint32][]byte, len(c.units))}
	for k, v := range c.units {
		d.units[k] = v
	}
	return d
}

// SystemdDirs are the unit directories the benchmarks list.
var SystemdDirs = []string{"etc/systemd/system", "lib/systemd/system", "usr/lib/systemd/system"}

// DebianRoot is where another task's debootstrap leaves a Debian root,
// relative to the module root.
const DebianRoot = ".cache/debian-root"

// BenchTree returns the tree benchmarks build images of: the Debian root
// when it exists (found from the test's working directory upwards), else
// a tree of 20,000 files generated under dir.
func BenchTree(t testing.TB, dir string) string {
	t.Helper()
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			root := filepath.Join(d, DebianRoot)
			if fi, err := os.Stat(filepath.Join(root, "usr/lib/systemd/system")); err == nil && fi.IsDir() {
				t.Logf("benchmark tree: %s", root)
				return root
			}
			if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil || d == filepath.Dir(d) {
				break
			}
		}
	}
	src := filepath.Join(dir, "tree")
	BuildTree(t, src, Options{BigDir: 20000, Sparse: true})
	for i := range 200 {
		p := filepath.Join(src, "usr/lib/systemd/system", fmt.Sprintf("unit-%03d.service", i))
		require.NoError(t, os.WriteFile(p, []byte("[Service]\nExecStart=/bin/true\n"), 0o644))
	}
	t.Logf("benchmark tree: generated, 20,000+ files")
	return src
}

// Patched is a ReaderAt over Base with some bytes replaced: a fuzz
// target corrupts a real image built once without copying it.
type Patched struct {
	Base    io.ReaderAt
	Patches map[int64]byte
}

// NewPatched applies patch, offset and value pairs of five bytes (a
// little-endian uint32 and the value; at most 64 pairs), to base of size
// bytes: offsets with the low bit clear fall in the first head bytes
// (superblocks, headers, tables), the others anywhere.
func NewPatched(base io.ReaderAt, size, head int64, patch []byte) *Patched {
	p := &Patched{Base: base, Patches: map[int64]byte{}}
	if size <= 0 {
		return p
	}
	for i := 0; i+5 <= len(patch) && i < 5*64; i += 5 {
		off := int64(binary.LittleEndian.Uint32(patch[i:]))
		if off&1 == 0 {
			off %= min(size, head)
		} else {
			off %= size
		}
		p.Patches[off] = patch[i+4]
	}
	return p
}

// ReadAt reads Base with the patches applied.
func (p *Patched) ReadAt(b []byte, off int64) (int, error) {
	n, err := p.Base.ReadAt(b, off)
	for o, v := range p.Patches {
		if o >= off && o < off+int64(n) {
			b[o-off] = v
		}
	}
	return n, err
}
