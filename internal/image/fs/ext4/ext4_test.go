package ext4

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/fs/inodefs"
	"github.com/amilint/amilint/internal/image/imagetest"
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
	dirOff := inodeOff(ok, node(t, ok, "usr/lib/systemd/system").ino)
	le := binary.LittleEndian

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
		r := imagetest.NewPatched(imagetest.NewCompactReader(im.b, im.size), im.size, 64<<10, patch)
		fsys, err := Open(r, im.size)
		if err != nil {
			return
		}
		_, _ = imagetest.Walk(fsys, 2000)
		_, _ = fsys.ReadLink("etc/slow")
		_, _ = rootfs.New(fsys).ReadFile("etc/systemd/system/multi-user.target.wants/ssh.service")
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
