package ext4

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/fs/inodefs"
	"github.com/amilint/amilint/internal/image/imagetest"
	"github.com/amilint/amilint/internal/image/integrity"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// scratch holds the shared source tree and the benchmark image.
var scratch = &imagetest.Scratch{Prefix: "ext4-", Options: imagetest.Options{BigDir: 5000, Sparse: true}}

// tree returns the shared source tree, built once per test binary.
func tree(t testing.TB) string { return scratch.Tree(t) }

func TestMain(m *testing.M) { os.Exit(scratch.Run(m)) }

// mkfs runs mke2fs to build an image of src and returns its path.
func mkfs(t testing.TB, src, size string, args ...string) string {
	t.Helper()
	return mkfsAt(t, src, filepath.Join(t.TempDir(), "fs.img"), size, args...)
}

// mkfsAt runs mke2fs to build the image img of src.
func mkfsAt(t testing.TB, src, img, size string, args ...string) string {
	t.Helper()
	cmd := exec.Command("mke2fs", append(append([]string{"-q", "-F"}, args...), "-d", src, img, size)...)
	cmd.Env = append(os.Environ(), "MKE2FS_CONFIG=/etc/mke2fs.conf")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "mke2fs %v: %s", args, out)
	return img
}

// openImage opens an image file with the reader.
func openImage(t testing.TB, img string) *FS { return imagetest.OpenImage(t, img, Probe, Open) }

func TestImagesMatchTheirSourceTree(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		htree  bool // run e2fsck -D so big/ gets an htree index
		checks func(t *testing.T, f *FS)
	}{
		{name: "ext4 inline_data htree", args: []string{"-t", "ext4", "-O", "inline_data"}, htree: true,
			checks: func(t *testing.T, f *FS) {
				assert.NotZero(t, node(t, f, "etc/os-release").flags&flagInlineData, "small file is inline")
				assert.NotZero(t, node(t, f, "usr/share/doc/deep/a").flags&flagInlineData, "small dir is inline")
				assert.NotZero(t, node(t, f, "big").flags&flagIndex, "big/ has an htree index")
				assert.Positive(t, extentDepth(t, node(t, f, "var/lib/frag.bin")), "frag.bin has an extent tree of depth > 0")
				assert.NotZero(t, f.incompat&incompat64Bit)
			}},
		{name: "ext4", args: []string{"-t", "ext4"},
			checks: func(t *testing.T, f *FS) {
				assert.Zero(t, node(t, f, "etc/os-release").flags&flagInlineData)
				assert.Positive(t, extentDepth(t, node(t, f, "var/lib/frag.bin")))
			}},
		{name: "ext4 32-bit", args: []string{"-t", "ext4", "-O", "^64bit"}, htree: true,
			checks: func(t *testing.T, f *FS) {
				assert.Zero(t, f.incompat&incompat64Bit)
				assert.Equal(t, int64(32), f.descSize)
			}},
		{name: "ext4 1k blocks", args: []string{"-t", "ext4", "-b", "1024", "-O", "inline_data"}, htree: true,
			checks: func(t *testing.T, f *FS) { assert.Equal(t, int64(1024), f.blockSize) }},
		{name: "ext4 meta_bg", args: []string{"-t", "ext4", "-O", "meta_bg,^resize_inode"},
			checks: func(t *testing.T, f *FS) { assert.NotZero(t, f.incompat&incompatMetaBG) }},
		{name: "ext4 block maps", args: []string{"-t", "ext4", "-O", "^extent,^64bit"}, htree: true,
			checks: func(t *testing.T, f *FS) {
				assert.Zero(t, node(t, f, "var/lib/big.img").flags&flagExtents, "big.img uses a block map")
			}},
		{name: "ext2 1k blocks (triple indirect)", args: []string{"-t", "ext2", "-b", "1024"},
			checks: func(t *testing.T, f *FS) {
				n := node(t, f, "var/lib/far.img")
				assert.Zero(t, n.flags&flagExtents)
				assert.NotZero(t, binary.LittleEndian.Uint32(n.block[14*4:]), "far.img uses the triple indirect block")
			}},
		{name: "ext3 no filetype", args: []string{"-t", "ext3", "-O", "^filetype"},
			checks: func(t *testing.T, f *FS) { assert.Zero(t, f.incompat&incompatFiletype) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tree(t)
			img := mkfs(t, src, "64M", tc.args...)
			if tc.htree {
				out, err := exec.Command("e2fsck", "-fyD", img).CombinedOutput()
				var ee *exec.ExitError
				if errors.As(err, &ee) && ee.ExitCode() == 1 { // 1: "errors corrected", the re-indexing
					err = nil
				}
				require.NoError(t, err, "e2fsck: %s", out)
			}
			f := openImage(t, img)
			n := imagetest.Compare(t, src, f, imagetest.CompareOptions{ModTimes: true, Perms: true, Extra: []string{"lost+found"}})
			assert.Greater(t, n, 5000)
			tc.checks(t, f)

			// The chroot view resolves links through the reader.
			view := rootfs.New(f)
			b, err := view.ReadFile("etc/systemd/system/multi-user.target.wants/ssh.service")
			require.NoError(t, err)
			assert.Contains(t, string(b), "OpenSSH")
			b, err = view.ReadFile("lib/systemd/system/ecs.service")
			require.NoError(t, err)
			assert.Contains(t, string(b), "ECS agent")
			_, err = view.Open("etc/systemd/system/masked.service")
			assert.ErrorIs(t, err, rootfs.ErrMasked)
		})
	}
}

func node(t testing.TB, f *FS, name string) *inode {
	t.Helper()
	n, err := inodefs.Lookup(f.inodes, "test", name)
	require.NoError(t, err)
	return n
}

func extentDepth(t *testing.T, n *inode) int {
	t.Helper()
	require.NotZero(t, n.flags&flagExtents)
	return int(binary.LittleEndian.Uint16(n.block[6:]))
}

func TestSourceSemantics(t *testing.T) {
	f := openImage(t, mkfs(t, tree(t), "64M", "-t", "ext4", "-O", "inline_data"))
	_, err := f.Open("etc/fast-link")
	assert.ErrorIs(t, err, fs.ErrInvalid, "a Source never follows a link")
	_, err = f.ReadLink("etc/os-release")
	assert.ErrorIs(t, err, fs.ErrInvalid)
	_, err = f.Lstat("etc/os-release/x")
	assert.ErrorIs(t, err, rootfs.ErrNotDir)
	_, err = f.Lstat("etc/missing")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = f.Lstat("/etc")
	assert.ErrorIs(t, err, fs.ErrInvalid)
	fi, err := f.Lstat("etc/slow-link")
	require.NoError(t, err)
	assert.Equal(t, fs.ModeSymlink, fi.Mode().Type())
	fi, err = f.Lstat("var/fifo")
	require.NoError(t, err)
	assert.Equal(t, fs.ModeNamedPipe, fi.Mode().Type())

	// ReadFile refuses what it cannot hold; Open streams it.
	_, err = f.ReadFile("var/lib/far.img")
	assert.ErrorIs(t, err, ErrTooLarge)
	b, err := f.ReadFile("etc/os-release")
	require.NoError(t, err)
	assert.Equal(t, "ID=debian\nVERSION_ID=12\n", string(b))

	// Files are io.ReaderAt and io.Seeker.
	fl, err := f.Open("var/lib/big.img")
	require.NoError(t, err)
	want, err := os.ReadFile(filepath.Join(tree(t), "var/lib/big.img"))
	require.NoError(t, err)
	buf := make([]byte, 9000)
	n, err := fl.(interface {
		ReadAt([]byte, int64) (int, error)
	}).ReadAt(buf, 10<<20-100)
	require.NoError(t, err)
	assert.Equal(t, want[10<<20-100:10<<20-100+n], buf[:n])
}

func TestFSTestConformance(t *testing.T) {
	src := t.TempDir()
	imagetest.BuildTree(t, src, imagetest.Options{BigDir: 300, NoSymlinks: true, NoBigFile: true})
	for _, args := range [][]string{{"-t", "ext4", "-O", "inline_data"}, {"-t", "ext2"}} {
		f := openImage(t, mkfs(t, src, "64M", args...))
		require.NoError(t, fstest.TestFS(imagetest.NoLinks{Source: f}, "etc/os-release", "big/entry-00299.conf", "var/lib/medium.bin"))
	}
}

// smallImages builds a tiny tree and its 128 KiB images for corruption and
// fuzz tests.
func smallImages(t testing.TB) map[string][]byte {
	t.Helper()
	src := t.TempDir()
	for name, body := range map[string]string{
		"etc/os-release":                     "ID=debian\n",
		"usr/lib/systemd/system/ssh.service": strings.Repeat("[Unit]\n", 20),
	} {
		p := filepath.Join(src, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(src, "etc/systemd/system/multi-user.target.wants"), 0o755))
	require.NoError(t, os.Symlink("/usr/lib/systemd/system/ssh.service", filepath.Join(src, "etc/systemd/system/multi-user.target.wants/ssh.service")))
	require.NoError(t, os.Symlink(strings.Repeat("slow/", 20), filepath.Join(src, "etc/slow")))
	imgs := map[string][]byte{}
	for name, args := range map[string][]string{
		"inline": {"-t", "ext4", "-O", "inline_data,^has_journal,^resize_inode", "-b", "1024", "-N", "32"},
		"ext2":   {"-t", "ext2", "-O", "^resize_inode", "-b", "1024", "-N", "32"},
		"32bit":  {"-t", "ext4", "-O", "^has_journal,^64bit,^resize_inode", "-b", "1024", "-N", "32"},
	} {
		b, err := os.ReadFile(mkfs(t, src, "128K", args...))
		require.NoError(t, err)
		imgs[name] = b
	}
	return imgs
}

func TestCorruptImages(t *testing.T) {
	imgs := smallImages(t)
	base := imgs["inline"]
	ok, err := Open(bytes.NewReader(base), int64(len(base)))
	require.NoError(t, err)
	ino := node(t, ok, "usr/lib/systemd/system/ssh.service").ino
	inodeOff := func(f *FS, ino uint64) int64 {
		table, err := f.inodeTable((ino - 1) / f.inodesPerGroup)
		require.NoError(t, err)
		return int64(table)*f.blockSize + int64((ino-1)%f.inodesPerGroup)*f.inodeSize
	}
	off := inodeOff(ok, ino)
	dirIno := node(t, ok, "usr/lib/systemd/system").ino
	dirOff := inodeOff(ok, dirIno)
	le := binary.LittleEndian
	// The mutations below test the structural checks behind the
	// checksums: they seal what they change, as a tool writing the
	// structure would (TestChecksums tests the checksums).
	seal := func(b []byte) []byte {
		sealSuperblock(b)
		sealInode(b, ok, ino, off)
		sealInode(b, ok, dirIno, dirOff)
		return b
	}

	for _, tc := range []struct {
		name    string
		mutate  func(b []byte) []byte
		openErr error // error from Open, or nil when the walk must fail
		walkErr error
		readErr error // error from reading ssh.service whole through the view
	}{
		{name: "bad magic", mutate: func(b []byte) []byte { b[1024+56] = 0; return b }, openErr: ErrCorrupt},
		{name: "truncated", mutate: func(b []byte) []byte { return b[:len(b)/2] }, openErr: ErrCorrupt},
		{name: "unknown incompat feature", mutate: func(b []byte) []byte {
			le.PutUint32(b[1024+0x60:], le.Uint32(b[1024+0x60:])|0x1000) // dirdata
			return b
		}, openErr: ErrUnsupported},
		{name: "huge block size", mutate: func(b []byte) []byte { le.PutUint32(b[1024+0x18:], 40); return b }, openErr: ErrCorrupt},
		{name: "zero inodes per group", mutate: func(b []byte) []byte { le.PutUint32(b[1024+0x28:], 0); return b }, openErr: ErrCorrupt},
		{name: "extent past the device", mutate: func(b []byte) []byte {
			// Turn ssh.service into an extent file whose one extent lies
			// far past the device.
			n := b[off:]
			le.PutUint32(n[0x20:], flagExtents)
			copy(n[0x28:], []byte{0x0A, 0xF3, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0})
			copy(n[0x28+12:], []byte{0, 0, 0, 0, 1, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0x0F})
			return b
		}, walkErr: ErrCorrupt},
		{name: "extent depth beyond 5", mutate: func(b []byte) []byte {
			n := b[off:]
			le.PutUint32(n[0x20:], flagExtents)
			copy(n[0x28:], []byte{0x0A, 0xF3, 1, 0, 4, 0, 6, 0, 0, 0, 0, 0})
			return b
		}, walkErr: ErrCorrupt},
		{name: "extent index cycle", mutate: func(b []byte) []byte {
			// Block blk holds an index node of depth 1 pointing at itself;
			// the inode's root (depth 2) points at blk.
			blk := uint32(len(b)/1024 - 2)
			node := b[int(blk)*1024:]
			copy(node, []byte{0x0A, 0xF3, 1, 0, 84, 0, 1, 0, 0, 0, 0, 0})
			le.PutUint32(node[12:], 0)
			le.PutUint32(node[16:], blk)
			le.PutUint16(node[20:], 0)
			sealExtentBlock(node[:1024], ok, ino, b[off:])
			n := b[off:]
			le.PutUint32(n[0x20:], flagExtents)
			copy(n[0x28:], []byte{0x0A, 0xF3, 1, 0, 4, 0, 2, 0, 0, 0, 0, 0})
			le.PutUint32(n[0x28+12:], 0)
			le.PutUint32(n[0x28+16:], blk)
			le.PutUint16(n[0x28+20:], 0)
			return b
		}, walkErr: ErrCorrupt},
		{name: "directory size beyond the filesystem", mutate: func(b []byte) []byte {
			n := b[dirOff:]
			le.PutUint32(n[0x20:], le.Uint32(n[0x20:])&^flagInlineData|flagExtents)
			copy(n[0x28:], []byte{0x0A, 0xF3, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0})
			le.PutUint32(n[0x4:], 0xFFFFFC00) // 4 GiB of 1 KiB blocks
			return b
		}, walkErr: ErrCorrupt},
		{name: "file claims 40 GB", mutate: func(b []byte) []byte {
			// Found by fuzzing: fs.ReadFile preallocates the claimed size.
			n := b[off:]
			le.PutUint32(n[0x20:], flagExtents)
			copy(n[0x28:], []byte{0x0A, 0xF3, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0})
			le.PutUint32(n[0x6C:], 10)
			return b
		}, readErr: ErrTooLarge},
		{name: "inline size beyond the inode", mutate: func(b []byte) []byte {
			n := b[dirOff:]
			le.PutUint32(n[0x20:], flagInlineData)
			le.PutUint32(n[0x4:], 5000)
			return b
		}, walkErr: ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.mutate(bytes.Clone(base))
			if len(b) == len(base) {
				seal(b)
			}
			f, err := Open(bytes.NewReader(b), int64(len(b)))
			if tc.openErr != nil {
				require.ErrorIs(t, err, tc.openErr)
				return
			}
			require.NoError(t, err)
			if tc.readErr != nil {
				_, err = rootfs.New(f).ReadFile("usr/lib/systemd/system/ssh.service")
				require.ErrorIs(t, err, tc.readErr)
				return
			}
			_, err = imagetest.Walk(f, 10000)
			require.ErrorIs(t, err, tc.walkErr)
		})
	}
}

// sealSuperblock rewrites the superblock checksum of the image b.
func sealSuperblock(b []byte) {
	sb := b[1024:2048]
	binary.LittleEndian.PutUint32(sb[0x3FC:], integrity.CRC32CRaw(^uint32(0), sb[:0x3FC]))
}

// sealInode rewrites the checksum of inode ino, at byte off of b, of a
// filesystem f opened on b before it changed.
func sealInode(b []byte, f *FS, ino uint64, off int64) {
	le := binary.LittleEndian
	raw := b[off : off+f.inodeSize]
	var num [4]byte
	le.PutUint32(num[:], uint32(ino))
	seed := integrity.CRC32CRaw(integrity.CRC32CRaw(f.seed, num[:]), raw[0x64:0x68])
	le.PutUint16(raw[0x7C:], 0)
	le.PutUint16(raw[0x82:], 0)
	c := integrity.CRC32CRaw(seed, raw)
	le.PutUint16(raw[0x7C:], uint16(c))
	le.PutUint16(raw[0x82:], uint16(c>>16))
}

// sealExtentBlock writes the tail checksum of the extent block blk, owned
// by inode ino whose on-disk inode is raw.
func sealExtentBlock(blk []byte, f *FS, ino uint64, raw []byte) {
	le := binary.LittleEndian
	var num [4]byte
	le.PutUint32(num[:], uint32(ino))
	seed := integrity.CRC32CRaw(integrity.CRC32CRaw(f.seed, num[:]), raw[0x64:0x68])
	tail := 12 + 12*int(le.Uint16(blk[4:]))
	le.PutUint32(blk[tail:], integrity.CRC32CRaw(seed, blk[:tail]))
}

func TestProbe(t *testing.T) {
	assert.False(t, Probe(bytes.NewReader(make([]byte, 4096))))
	assert.False(t, Probe(bytes.NewReader(nil)))
	for _, b := range smallImages(t) {
		assert.True(t, Probe(bytes.NewReader(b)))
	}
}

// FuzzExt4 takes compact images (imagetest.Compact) of a 128 KiB device:
// the fuzzer mutates only what the filesystem holds.
// FuzzExt4 reads real ext4 images built once per process (the small
// layouts, and one whose journal needs replaying) corrupted by the fuzzed
// patches (offset and value pairs, half of them in the first 64 KiB:
// superblock, group descriptors, the first inode tables): the seeds are a
// few bytes, not the images.
func FuzzExt4(f *testing.F) {
	type image struct {
		b    []byte
		size int64
	}
	var images []image
	for _, b := range smallImages(f) {
		images = append(images, image{imagetest.Compact(f, bytes.NewReader(b), int64(len(b)), nil), int64(len(b))})
	}
	_, img, _ := dirtyJournalImage(f, "jo -c")
	fh, err := os.Open(img)
	require.NoError(f, err)
	defer fh.Close()
	fi, err := fh.Stat()
	require.NoError(f, err)
	images = append(images, image{imagetest.Compact(f, fh, fi.Size(), nil), fi.Size()})
	for i := range images {
		f.Add(uint8(i), []byte{})
		f.Add(uint8(i), []byte{0x38, 0x04, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0xff})
		f.Add(uint8(i), []byte{0x02, 0x10, 0x00, 0x00, 0x07})
	}
	f.Fuzz(func(t *testing.T, which uint8, patch []byte) {
		im := images[int(which)%len(images)]
		// Strictly, and leniently: a lenient reader goes past checksum
		// mismatches into the structures behind them.
		for _, check := range []*integrity.Checker{nil, integrity.Lenient(&integrity.Log{})} {
			r := imagetest.NewPatched(imagetest.NewCompactReader(im.b, im.size), im.size, 64<<10, patch)
			fsys, err := OpenWith(r, im.size, check)
			if err != nil {
				continue
			}
			_, _ = imagetest.Walk(fsys, 2000)
			_, _ = fsys.ReadLink("etc/slow")
			_, _ = rootfs.New(fsys).ReadFile("etc/systemd/system/multi-user.target.wants/ssh.service")
		}
	})
}

// TestConcurrentWalks walks one FS from several goroutines: the caches
// are shared, so run it with -race after changing them.
func TestConcurrentWalks(t *testing.T) {
	f := openImage(t, mkfs(t, tree(t), "64M", "-t", "ext4", "-O", "inline_data"))
	imagetest.ConcurrentWalks(t, f)
}

// snapshot describes every entry of fsys: type, size, and content hash or
// link target, for comparing two images.
func snapshot(t testing.TB, fsys *FS) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, fs.WalkDir(imagetest.NoLinks{Source: fsys}, ".", func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		fi, err := fsys.Lstat(p)
		require.NoError(t, err)
		desc := fmt.Sprintf("%v %d", fi.Mode(), fi.Size())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := fsys.ReadLink(p)
			require.NoError(t, err)
			desc += " -> " + target
		case fi.Mode().IsRegular():
			b, err := fsys.ReadFile(p)
			require.NoError(t, err)
			desc += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		out[p] = desc
		return nil
	}))
	return out
}

func TestJournalReplay(t *testing.T) {
	for _, open := range []string{"jo", "jo -c"} { // -c: checksummed (v3) tags
		t.Run(open, func(t *testing.T) {
			dirty, _, replayed := dirtyJournalImage(t, open)
			b, err := dirty.ReadFile("usr/lib/systemd/system/ssh.service")
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(string(b), "journal-2\n"), "%q", b)
			b, err = dirty.ReadFile("etc/os-release")
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(string(b), "ID=debian\n"), "revoked block not replayed: %q", b)
			b, err = dirty.ReadFile("usr/lib/systemd/system/ecs.service")
			require.NoError(t, err)
			assert.True(t, strings.HasPrefix(string(b), "[Service]\n"), "uncommitted block not replayed: %q", b)
			assert.Equal(t, snapshot(t, openImage(t, replayed)), snapshot(t, dirty))
		})
	}
}

// dirtyJournalImage builds a small ext4 image, writes transactions to its
// journal with debugfs (open is "jo" or "jo -c"), and returns the image
// opened with the reader, its path and the path of a copy whose journal
// e2fsck has replayed for real.
func dirtyJournalImage(t testing.TB, open string) (dirty *FS, img, ref string) {
	t.Helper()
	src := t.TempDir()
	for name, body := range map[string]string{
		"etc/os-release":                     strings.Repeat("ID=debian\n", 10),
		"usr/lib/systemd/system/ssh.service": strings.Repeat("[Unit]\n", 20),
		"usr/lib/systemd/system/ecs.service": strings.Repeat("[Service]\n", 20),
	} {
		p := filepath.Join(src, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	img = mkfs(t, src, "8M", "-t", "ext4", "-b", "1024")
	clean := openImage(t, img)
	assert.Nil(t, clean.journal, "a clean filesystem has nothing to replay")
	blockOf := func(name string) uint64 {
		r, err := clean.mapBlock(node(t, clean, name), 0)
		require.NoError(t, err)
		return r.phys
	}
	ssh, osr, ecs := blockOf("usr/lib/systemd/system/ssh.service"), blockOf("etc/os-release"), blockOf("usr/lib/systemd/system/ecs.service")
	dir := t.TempDir()
	block := func(name, content string) string {
		p := filepath.Join(dir, name)
		b := make([]byte, 1024)
		copy(b, content)
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}
	// Five transactions: ssh.service twice (the later wins), os-release
	// logged then revoked, ecs.service logged but never committed.
	script := fmt.Sprintf(`%[8]s
jw -b %[1]d %[4]s
jc
%[8]s
jw -b %[1]d %[5]s
jc
%[8]s
jw -b %[2]d %[6]s
jc
%[8]s
jw -r %[2]d %[6]s
jc
%[8]s
jw -b %[3]d -c %[7]s
jc
`, ssh, osr, ecs, block("1", "journal-1\n"), block("2", "journal-2\n"), block("3", "ID=journal\n"), block("4", "uncommitted\n"), open)
	cmd := exec.Command("debugfs", "-w", "-f", "-", img)
	cmd.Stdin = strings.NewReader(script)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "debugfs: %s", out)
	out, err = exec.Command("debugfs", "-R", "logdump", img).CombinedOutput()
	require.NoError(t, err)
	require.Contains(t, string(out), "revoke", "debugfs wrote a revoke block: %s", out)

	dirty = openImage(t, img)
	require.NotNil(t, dirty.journal, "needs_recovery: the journal is replayed")
	// The reference: e2fsck replays the journal of a copy for real.
	ref = filepath.Join(dir, "replayed.img")
	raw, err := os.ReadFile(img)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(ref, raw, 0o644))
	out, err = exec.Command("e2fsck", "-E", "journal_only", "-y", ref).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		err = nil
	}
	require.NoError(t, err, "e2fsck: %s", out)
	assert.Nil(t, openImage(t, ref).journal)
	return dirty, img, ref
}

// TestChecksums damages each kind of structure metadata_csum covers, in an
// image whose big/ has an htree index and whose frag.bin has an extent
// tree of depth 1: a strict reader fails with the one line naming the
// structure and the path being read; a lenient one logs that line and
// reads on. With only the stored checksums damaged, the lenient reader
// reads the whole tree exactly as the source.
func TestChecksums(t *testing.T) {
	src := tree(t)
	img := mkfs(t, src, "64M", "-t", "ext4")
	out, err := exec.Command("e2fsck", "-fyD", img).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 1 {
		err = nil
	}
	require.NoError(t, err, "e2fsck: %s", out)
	base, err := os.ReadFile(img)
	require.NoError(t, err)
	f, err := Open(bytes.NewReader(base), int64(len(base)))
	require.NoError(t, err)
	require.True(t, f.csum, "mke2fs makes metadata_csum filesystems")
	le := binary.LittleEndian
	inodeAt := func(name string) (uint64, int64) {
		n := node(t, f, name)
		return n.ino, int64(f.tables[(n.ino-1)/f.inodesPerGroup])*f.blockSize + int64((n.ino-1)%f.inodesPerGroup)*f.inodeSize
	}
	blockOf := func(name string, lblk uint64) uint64 {
		r, err := f.mapBlock(node(t, f, name), lblk)
		require.NoError(t, err)
		return r.phys
	}
	sshIno, sshOff := inodeAt("usr/lib/systemd/system/ssh.service")
	wants := blockOf("etc/systemd/system/multi-user.target.wants", 0)
	bigRoot := blockOf("big", 0)
	frag := node(t, f, "var/lib/frag.bin")
	require.Equal(t, 1, extentDepth(t, frag))
	fragIdx := uint64(le.Uint16(frag.block[12+8:]))<<32 | uint64(le.Uint32(frag.block[12+4:]))
	require.True(t, node(t, f, "big").flags&flagIndex != 0)
	bs := f.blockSize
	gd := int64(f.firstDataBlock+1) * bs

	for _, tc := range []struct {
		name string
		// at is the byte a meaningful flip damages; sum is where the
		// structure stores its checksum.
		at, sum int64
		want    string // the error's line
		op      func(*FS) error
	}{
		{"superblock", 1024 + 0x100, 1024 + 0x3FC, "ext4: superblock fails its checksum", nil},
		{"group descriptor", gd + 0x10, gd + 0x1E, fmt.Sprintf("ext4: group descriptor 0 in block %d fails its checksum", gd/bs), nil},
		{"inode", sshOff + 0x10, sshOff + 0x7C,
			fmt.Sprintf("ext4: inode %d in block %d (/usr/lib/systemd/system/ssh.service) fails its checksum", sshIno, sshOff/bs),
			func(f *FS) error { _, err := f.Lstat("usr/lib/systemd/system/ssh.service"); return err }},
		{"directory leaf block", int64(wants)*bs + 20, int64(wants+1)*bs - 4,
			fmt.Sprintf("ext4: directory block %d (/etc/systemd/system/multi-user.target.wants) fails its checksum", wants),
			func(f *FS) error { _, err := f.ReadDir("etc/systemd/system/multi-user.target.wants"); return err }},
		{"htree node", int64(bigRoot)*bs + 40, -1,
			fmt.Sprintf("ext4: htree node block %d (/big) fails its checksum", bigRoot),
			func(f *FS) error { _, err := f.ReadDir("big"); return err }},
		{"extent block", int64(fragIdx)*bs + 16, int64(fragIdx)*bs + 12 + 12*int64(le.Uint16(base[int64(fragIdx)*bs+4:])),
			fmt.Sprintf("ext4: extent block %d (/var/lib/frag.bin) fails its checksum", fragIdx),
			func(f *FS) error { _, err := f.ReadFile("var/lib/frag.bin"); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(base)
			b[tc.at] ^= 0x40
			g, err := Open(bytes.NewReader(b), int64(len(b)))
			if tc.op != nil {
				require.NoError(t, err)
				err = tc.op(g)
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, integrity.ErrChecksum)
			assert.ErrorIs(t, err, ErrCorrupt)
			m, ok := integrity.As(err)
			require.True(t, ok)
			assert.Equal(t, tc.want, m.Error())

			// Lenient: the same line is logged, and reading goes on.
			var log integrity.Log
			g, err = OpenWith(bytes.NewReader(b), int64(len(b)), integrity.Lenient(&log))
			require.NoError(t, err)
			if tc.op != nil {
				_ = tc.op(g) // what it reads may be wrong; it is read
			}
			assert.Equal(t, []string{tc.want}, log.Lines())
		})
	}

	t.Run("lenient reads the tree when only the sums are damaged", func(t *testing.T) {
		b := bytes.Clone(base)
		for _, at := range []int64{1024 + 0x3FC, gd + 0x1E, sshOff + 0x7C, int64(wants+1)*bs - 4,
			int64(fragIdx)*bs + 12 + 12*int64(le.Uint16(base[int64(fragIdx)*bs+4:]))} {
			b[at] ^= 0xFF
		}
		var log integrity.Log
		g, err := OpenWith(bytes.NewReader(b), int64(len(b)), integrity.Lenient(&log))
		require.NoError(t, err)
		imagetest.Compare(t, src, g, imagetest.CompareOptions{ModTimes: true, Perms: true, Extra: []string{"lost+found"}})
		assert.Len(t, log.Lines(), 5, "%q", log.Lines())
		_, err = Open(bytes.NewReader(b), int64(len(b)))
		assert.ErrorIs(t, err, integrity.ErrChecksum)
	})
}

// TestGroupDescCRC16 checks the older CRC16 of group descriptors
// (uninit_bg without metadata_csum).
func TestGroupDescCRC16(t *testing.T) {
	img := mkfs(t, tree(t), "32M", "-t", "ext4", "-O", "^metadata_csum,uninit_bg,^has_journal")
	b, err := os.ReadFile(img)
	require.NoError(t, err)
	f, err := Open(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	require.False(t, f.csum)
	gd := int64(f.firstDataBlock+1) * f.blockSize
	b[gd+0x1E] ^= 1
	_, err = Open(bytes.NewReader(b), int64(len(b)))
	assert.EqualError(t, err, fmt.Sprintf("open ext4: ext4: group descriptor 0 in block %d fails its checksum", gd/f.blockSize))
}

// TestSymlinkWithNUL: a target with a NUL byte in it is corrupt, as e2fsck
// says, not a shorter target.
func TestSymlinkWithNUL(t *testing.T) {
	img := mkfs(t, tree(t), "64M", "-t", "ext4", "-O", "^metadata_csum")
	b, err := os.ReadFile(img)
	require.NoError(t, err)
	f, err := Open(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	r, err := f.mapBlock(node(t, f, "etc/slow-link"), 0)
	require.NoError(t, err)
	b[int64(r.phys)*f.blockSize+5] = 0
	f, err = Open(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	_, err = f.ReadLink("etc/slow-link")
	assert.ErrorIs(t, err, ErrCorrupt)
}

// TestJournalChecksums damages the checksummed (v3) journal of an image
// that needs recovery: its superblock, a descriptor block, a logged
// block and a commit block each fail the open, as they fail the kernel's
// recovery; a lenient reader logs each and opens.
func TestJournalChecksums(t *testing.T) {
	_, img, _ := dirtyJournalImage(t, "jo -c")
	base, err := os.ReadFile(img)
	require.NoError(t, err)
	f := openImage(t, img)
	jino := uint64(binary.LittleEndian.Uint32(base[1024+0xE0:]))
	j, err := f.inode(jino)
	require.NoError(t, err)
	be := binary.BigEndian
	phys := func(i uint64) int64 {
		r, err := f.mapBlock(j, i)
		require.NoError(t, err)
		return int64(r.phys) * f.blockSize
	}
	var desc, commit int64 = -1, -1
	var descIdx uint64
	for i := uint64(1); i < uint64(j.size/f.blockSize) && (desc < 0 || commit < 0); i++ {
		b := base[phys(i):]
		if be.Uint32(b) != jbdMagic {
			continue
		}
		switch be.Uint32(b[4:]) {
		case jbdDescriptor:
			if desc < 0 {
				desc, descIdx = phys(i), i
			}
		case jbdCommit:
			commit = phys(i)
		}
	}
	require.True(t, desc >= 0 && commit >= 0, "the journal holds a descriptor and a commit block")
	data := phys(descIdx + 1)
	for _, tc := range []struct {
		name string
		at   int64
		want string
	}{
		{"journal superblock", phys(0) + 0x40, "ext4: journal superblock fails its checksum"},
		{"descriptor block", desc + 16, fmt.Sprintf("ext4: journal descriptor block %d fails its checksum", descIdx)},
		{"logged block", data + 3, fmt.Sprintf("ext4: journal block %d (the copy of block", descIdx+1)},
		{"commit block", commit + 0x20, "ext4: journal commit block"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(base)
			b[tc.at] ^= 0x10
			_, err := Open(bytes.NewReader(b), int64(len(b)))
			require.ErrorIs(t, err, integrity.ErrChecksum)
			m, _ := integrity.As(err)
			assert.True(t, strings.HasPrefix(m.Error(), tc.want), "%s", m)
			var log integrity.Log
			_, err = OpenWith(bytes.NewReader(b), int64(len(b)), integrity.Lenient(&log))
			require.NoError(t, err)
			require.Len(t, log.Lines(), 1)
			assert.True(t, strings.HasPrefix(log.Lines()[0], tc.want), "%s", log.Lines()[0])
		})
	}
}

// gatedReader holds a read of the block at hold until one of the block at
// first has begun (or 10 s have passed, recorded as late).
type gatedReader struct {
	r           *bytes.Reader
	hold, first int64 // byte offsets of filesystem blocks
	bs          int64
	once        sync.Once
	begun       chan struct{}
	late        atomic.Bool
}

func (g *gatedReader) ReadAt(p []byte, off int64) (int, error) {
	overlaps := func(blk int64) bool { return off < blk+g.bs && off+int64(len(p)) > blk }
	if overlaps(g.first) {
		g.once.Do(func() { close(g.begun) })
	}
	if overlaps(g.hold) {
		select {
		case <-g.begun:
		case <-time.After(10 * time.Second):
			g.late.Store(true)
		}
	}
	return g.r.ReadAt(p, off)
}

// TestCleanJournalBesideRoot: a clean journal's superblock is verified
// beside the reading of the root directory (on a remote disk, one round
// trip instead of two), and its failure is still Open's error.
func TestCleanJournalBesideRoot(t *testing.T) {
	img := mkfs(t, tree(t), "32M", "-t", "ext4")
	base, err := os.ReadFile(img)
	require.NoError(t, err)
	f := openImage(t, img)
	require.Nil(t, f.journal, "clean")
	firstBlock := func(ino uint64) int64 {
		n, err := f.inode(ino)
		require.NoError(t, err)
		r, err := f.mapBlock(n, 0)
		require.NoError(t, err)
		return int64(r.phys) * f.blockSize
	}
	jsb, root := firstBlock(uint64(binary.LittleEndian.Uint32(base[1024+0xE0:]))), firstBlock(rootIno)

	g := &gatedReader{r: bytes.NewReader(base), hold: jsb, first: root, bs: f.blockSize, begun: make(chan struct{})}
	_, err = Open(g, int64(len(base)))
	require.NoError(t, err)
	assert.False(t, g.late.Load(), "the root directory was read only after the journal superblock")

	bad := bytes.Clone(base)
	bad[jsb] ^= 0xFF // the journal superblock's magic
	_, err = Open(bytes.NewReader(bad), int64(len(bad)))
	require.ErrorIs(t, err, ErrCorrupt)
	assert.ErrorContains(t, err, "open ext4: replay journal: journal superblock magic")
}

// hintLog records in order the reads of a device and the ranges it is
// told of (readahead.Source).
type hintLog struct {
	r      io.ReaderAt
	mu     sync.Mutex
	events []hintEvent
}

type hintEvent struct {
	hint   bool
	off, n int64
}

func (h *hintLog) add(e hintEvent) {
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

func (h *hintLog) ReadAt(p []byte, off int64) (int, error) {
	h.add(hintEvent{off: off, n: int64(len(p))})
	return h.r.ReadAt(p, off)
}

func (h *hintLog) Prefetch(off, n int64) { h.add(hintEvent{hint: true, off: off, n: n}) }

// take returns the events so far and forgets them.
func (h *hintLog) take() []hintEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.events
	h.events = nil
	return e
}

// hinted returns the index of the first hint in events that covers off,
// or -1.
func hinted(events []hintEvent, off int64) int {
	for i, e := range events {
		if e.hint && off >= e.off && off < e.off+e.n {
			return i
		}
	}
	return -1
}

// TestHintsForRemoteDevices: on a device that fetches what it is told of
// (a remote disk), Open tells of the inode tables in use, every inode of
// the tree among them, and a directory's blocks are told of before the
// first of them is read. The notices pass through a partition's
// io.SectionReader.
func TestHintsForRemoteDevices(t *testing.T) {
	img := mkfs(t, tree(t), "64M", "-t", "ext4")
	file, err := os.Open(img)
	require.NoError(t, err)
	defer file.Close()
	fi, err := file.Stat()
	require.NoError(t, err)
	log := &hintLog{r: file}
	f, err := Open(io.NewSectionReader(log, 0, fi.Size()), fi.Size())
	require.NoError(t, err)
	require.True(t, f.hints)
	assert.False(t, openImage(t, img).hints, "a local file takes no notices: none are worked out")
	atOpen := log.take()
	told := int64(0)
	for _, e := range atOpen {
		if e.hint {
			told += e.n
		}
	}
	assert.LessOrEqual(t, told, int64(maxHintTables))
	n := 0
	require.NoError(t, fs.WalkDir(f, ".", func(name string, _ fs.DirEntry, err error) error {
		require.NoError(t, err)
		ino := node(t, f, name).ino
		table, err := f.inodeTable((ino - 1) / f.inodesPerGroup)
		require.NoError(t, err)
		off := int64(table)*f.blockSize + int64((ino-1)%f.inodesPerGroup)*f.inodeSize
		assert.GreaterOrEqual(t, hinted(atOpen, off), 0, "inode %d of %s not told of at Open", ino, name)
		n++
		return nil
	}))
	require.Greater(t, n, 5000)

	f, err = Open(log, fi.Size()) // nothing cached
	require.NoError(t, err)
	log.take()
	_, err = f.ReadDir("big")
	require.NoError(t, err)
	events := log.take()
	big := node(t, f, "big")
	nblocks := uint64(big.size / f.blockSize)
	require.Greater(t, nblocks, uint64(2), "a directory of several blocks")
	for lblk := range nblocks {
		r, err := f.mapBlock(big, lblk)
		require.NoError(t, err)
		off := int64(r.phys) * f.blockSize
		h := hinted(events, off)
		require.GreaterOrEqual(t, h, 0, "block %d of big/ not told of", lblk)
		for i, e := range events {
			if !e.hint && off >= e.off && off < e.off+e.n {
				assert.Less(t, h, i, "block %d of big/ read before it was told of", lblk)
				break
			}
		}
	}
}
