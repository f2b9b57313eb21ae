package xfs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/fs/inodefs"
	"github.com/amilint/amilint/internal/image/imagetest"
	"github.com/amilint/amilint/internal/image/integrity"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// scratch holds the shared source tree and the benchmark image.
var scratch = &imagetest.Scratch{Prefix: "xfs-", Options: imagetest.Options{BigDir: 5000}}

// tree returns the shared source tree, built once per test binary.
func tree(t testing.TB) string { return scratch.Tree(t) }

func TestMain(m *testing.M) { os.Exit(scratch.Run(m)) }

// mkfs builds an XFS image of src with mkfs.xfs -p and returns its path,
// its remote symlinks fixed (see fixRemoteSymlinks).
func mkfs(t testing.TB, src, size string, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	proto := filepath.Join(dir, "proto")
	imagetest.ProtoFile(t, src, proto)
	img := filepath.Join(dir, "fs.img")
	require.NoError(t, os.WriteFile(img, nil, 0o644))
	require.NoError(t, exec.Command("truncate", "-s", size, img).Run())
	out, err := exec.Command("mkfs.xfs", append(append([]string{"-q", "-f", "-p", proto}, args...), img)...).CombinedOutput()
	require.NoError(t, err, "mkfs.xfs %v: %s", args, out)
	fixRemoteSymlinks(t, img, src)
	return img
}

// fixRemoteSymlinks works around mkfs.xfs 6.1, whose proto file code writes
// a remote symlink's target without the v5 block header ("XSLM", owner,
// CRC) that the kernel and xfs_repair require: it rewrites each such block
// as the kernel would have written it.
func fixRemoteSymlinks(t testing.TB, img, src string) {
	t.Helper()
	fh, err := os.OpenFile(img, os.O_RDWR, 0)
	require.NoError(t, err)
	defer fh.Close()
	fi, err := fh.Stat()
	require.NoError(t, err)
	f, err := Open(fh, fi.Size())
	require.NoError(t, err)
	sb := make([]byte, 512)
	_, err = fh.ReadAt(sb, 0)
	require.NoError(t, err)
	uuid := sb[0x20:0x30]
	if f.incompat&incompatMetaUUID != 0 {
		uuid = sb[0xF8:0x108]
	}
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type() != fs.ModeSymlink {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		n, err := inodefs.Lookup(f.inodes, "fix", filepath.ToSlash(rel))
		if err != nil || n.format == fmtLocal {
			return err
		}
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		require.LessOrEqual(t, int64(len(target)+symlinkHdrSize), f.blockSize, "target fits one block")
		r, err := f.mapBlock(n, 0)
		require.NoError(t, err)
		b := make([]byte, f.blockSize)
		copy(b, "XSLM")
		binary.BigEndian.PutUint32(b[4:], 0)
		binary.BigEndian.PutUint32(b[8:], uint32(len(target)))
		copy(b[16:32], uuid)
		binary.BigEndian.PutUint64(b[32:], n.ino)
		binary.BigEndian.PutUint64(b[40:], r.disk<<(f.blockLog-9)) // in 512-byte sectors
		copy(b[symlinkHdrSize:], target)
		binary.LittleEndian.PutUint32(b[12:], crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
		_, err = fh.WriteAt(b, int64(r.disk)<<f.blockLog)
		return err
	})
	require.NoError(t, err)
}

// openImage opens an image file with the reader.
func openImage(t testing.TB, img string) *FS { return imagetest.OpenImage(t, img, Probe, Open) }

func node(t *testing.T, f *FS, name string) *inode {
	t.Helper()
	n, err := inodefs.Lookup(f.inodes, "test", name)
	require.NoError(t, err)
	return n
}

// dirForm names an XFS directory's form from its inode and blocks.
func dirForm(t *testing.T, f *FS, n *inode) string {
	t.Helper()
	if n.format == fmtLocal {
		return "shortform"
	}
	if n.size == f.dirBlkSize {
		return "block"
	}
	// Node directories have free-index blocks at 64 GiB.
	r, err := f.mapBlock(n, uint64(2*leafOffset)>>f.blockLog)
	require.NoError(t, err)
	if r.zero {
		return "leaf"
	}
	return "node"
}

func TestImagesMatchTheirSourceTree(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       []string
		bigFormat  uint8 // big/'s data fork
		remoteLink bool  // etc/remote-link's 500 bytes do not fit the inode
	}{
		{name: "4k blocks", bigFormat: fmtBtree, remoteLink: true},
		{name: "1k blocks", args: []string{"-b", "size=1024"}, bigFormat: fmtBtree, remoteLink: true},
		{name: "8k directory blocks, 1k inodes", args: []string{"-n", "size=8192", "-i", "size=1024"}, bigFormat: fmtExtents},
		{name: "nrext64 reflink rmapbt", args: []string{"-i", "nrext64=1", "-m", "reflink=1,rmapbt=1"}, bigFormat: fmtBtree, remoteLink: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tree(t)
			img := mkfs(t, src, "320M", tc.args...)
			out, err := exec.Command("xfs_repair", "-n", img).CombinedOutput()
			require.NoError(t, err, "xfs_repair -n: %s", out)
			f := openImage(t, img)
			n := imagetest.Compare(t, src, f, imagetest.CompareOptions{Perms: true})
			assert.Greater(t, n, 5000)

			assert.Equal(t, "shortform", dirForm(t, f, node(t, f, "sizes/d5")))
			assert.Equal(t, "block", dirForm(t, f, node(t, f, "sizes/d100")))
			assert.Equal(t, "leaf", dirForm(t, f, node(t, f, "sizes/d400")))
			assert.Equal(t, "node", dirForm(t, f, node(t, f, "big")))
			assert.Equal(t, tc.bigFormat, node(t, f, "big").format, "big/'s data fork format")
			assert.Equal(t, uint8(fmtLocal), node(t, f, "etc/slow-link").format, "a 75-byte target is local")
			assert.Equal(t, tc.remoteLink, node(t, f, "etc/remote-link").format != fmtLocal, "a 500-byte target is remote")

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

func TestUnwrittenExtentsReadAsZeros(t *testing.T) {
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "data"), bytes.Repeat([]byte("x"), 10000), 0o644))
	img := mkfs(t, src, "300M")
	out, err := exec.Command("xfs_db", "-x", "-c", "path /data", "-c", "write u3.bmx[0].extentflag 1", img).CombinedOutput()
	require.NoError(t, err, "xfs_db: %s", out)
	f := openImage(t, img)
	fl, err := f.Open("data")
	require.NoError(t, err)
	b, err := io.ReadAll(fl)
	require.NoError(t, err)
	assert.Equal(t, make([]byte, 10000), b)
}

func TestSourceSemantics(t *testing.T) {
	f := openImage(t, mkfs(t, tree(t), "320M"))
	_, err := f.Open("etc/fast-link")
	assert.ErrorIs(t, err, fs.ErrInvalid, "a Source never follows a link")
	_, err = f.ReadLink("etc/os-release")
	assert.ErrorIs(t, err, fs.ErrInvalid)
	_, err = f.Lstat("etc/os-release/x")
	assert.ErrorIs(t, err, rootfs.ErrNotDir)
	_, err = f.Lstat("etc/missing")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	fi, err := f.Lstat("var/fifo")
	require.NoError(t, err)
	assert.Equal(t, fs.ModeNamedPipe, fi.Mode().Type())

	fl, err := f.Open("var/lib/big.img")
	require.NoError(t, err)
	want, err := os.ReadFile(filepath.Join(tree(t), "var/lib/big.img"))
	require.NoError(t, err)
	buf := make([]byte, 9000)
	n, err := fl.(io.ReaderAt).ReadAt(buf, 10<<20-100)
	require.NoError(t, err)
	assert.Equal(t, want[10<<20-100:10<<20-100+n], buf[:n])
}

func TestFSTestConformance(t *testing.T) {
	src := t.TempDir()
	imagetest.BuildTree(t, src, imagetest.Options{BigDir: 300, NoSymlinks: true, NoBigFile: true})
	f := openImage(t, mkfs(t, src, "300M"))
	require.NoError(t, fstest.TestFS(imagetest.NoLinks{Source: f}, "etc/os-release", "big/entry-00299.conf", "sizes/d400/file-0399"))
}

// compactSize is the device size of the compact images: mkfs.xfs makes
// 300 MB at least, of which a tiny tree uses a few dozen KiB.
const compactSize = 300 << 20

// compact turns an image file into a compact image, leaving out the log.
func compact(t testing.TB, img string) []byte {
	t.Helper()
	fh, err := os.Open(img)
	require.NoError(t, err)
	defer fh.Close()
	fi, err := fh.Stat()
	require.NoError(t, err)
	require.Equal(t, int64(compactSize), fi.Size())
	f, err := Open(fh, fi.Size())
	require.NoError(t, err)
	sb := make([]byte, 512)
	_, err = fh.ReadAt(sb, 0)
	require.NoError(t, err)
	logDisk, err := f.daddr(binary.BigEndian.Uint64(sb[0x30:]))
	require.NoError(t, err)
	logFrom := int64(logDisk) << f.blockLog
	logTo := logFrom + int64(binary.BigEndian.Uint32(sb[0x60:]))<<f.blockLog
	return imagetest.Compact(t, fh, fi.Size(), func(off int64) bool { return off >= logFrom && off < logTo })
}

func newCompactReader(b []byte) *imagetest.CompactReader {
	return imagetest.NewCompactReader(b, compactSize)
}

// smallImages builds tiny trees as compact images for corruption and
// fuzz tests: short-form and block directories, local and remote links.
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
	for i := range 40 {
		require.NoError(t, os.WriteFile(filepath.Join(src, "usr/lib/systemd/system", strings.Repeat("u", i%20+1)+string(rune('a'+i%26))), nil, 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(src, "etc/systemd/system/multi-user.target.wants"), 0o755))
	require.NoError(t, os.Symlink("/usr/lib/systemd/system/ssh.service", filepath.Join(src, "etc/systemd/system/multi-user.target.wants/ssh.service")))
	require.NoError(t, os.Symlink(strings.Repeat("remote/", 70), filepath.Join(src, "etc/remote")))
	imgs := map[string][]byte{}
	for name, args := range map[string][]string{
		"1k": {"-b", "size=1024", "-d", "agcount=2"},
	} {
		imgs[name] = compact(t, mkfs(t, src, "300M", args...))
	}
	return imgs
}

func TestCompactImagesReadBack(t *testing.T) {
	for name, b := range smallImages(t) {
		f, err := Open(newCompactReader(b), compactSize)
		require.NoError(t, err, name)
		n, err := imagetest.Walk(f, 1000)
		require.NoError(t, err, name)
		assert.Greater(t, n, 40)
		target, err := f.ReadLink("etc/remote")
		require.NoError(t, err)
		assert.Equal(t, strings.Repeat("remote/", 70), target)
		assert.Less(t, len(b), 200<<10, "compact seed size")
	}
}

func TestCorruptImages(t *testing.T) {
	src := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(src, "etc/big"), 0o755))
	for i := range 3000 {
		require.NoError(t, os.WriteFile(filepath.Join(src, "etc/big", fmt.Sprintf("%s%05d", strings.Repeat("n", 40), i)), nil, 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(src, "etc/file"), bytes.Repeat([]byte("z"), 20000), 0o644))
	base := newCompactReader(compact(t, mkfs(t, src, "300M")))
	ok, err := Open(base, compactSize)
	require.NoError(t, err)
	inodeOff := func(ino uint64) int64 {
		ag := ino >> (ok.agBlkLog + ok.inoPBLog)
		agb := (ino >> ok.inoPBLog) & (1<<ok.agBlkLog - 1)
		return int64(ag*ok.agBlocks+agb)<<ok.blockLog + int64(ino&(1<<ok.inoPBLog-1))*ok.inodeSize
	}
	big := node(t, ok, "etc/big")
	require.Equal(t, uint8(fmtBtree), big.format)
	bigOff := inodeOff(big.ino)
	file := node(t, ok, "etc/file")
	fileOff := inodeOff(file.ino)
	rootOff := inodeOff(ok.rootIno)
	u64 := func(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
	u32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	u16 := func(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }
	// The mutations test the structural checks behind the CRCs: they
	// seal what they change, as a tool writing the structure would
	// (TestChecksums tests the CRCs).
	seal := func(c *imagetest.CompactReader) {
		sealCRC(c, 0, ok.sectSize, sbCRCOff)
		for _, off := range []int64{rootOff, bigOff, fileOff} {
			sealCRC(c, off, ok.inodeSize, inodeCRCOff)
		}
	}

	for _, tc := range []struct {
		name    string
		mutate  func(c *imagetest.CompactReader)
		size    int64
		openErr error
		walkErr error
	}{
		{name: "bad magic", mutate: func(c *imagetest.CompactReader) { c.Patch(0, []byte("YFSB")) }, openErr: ErrCorrupt},
		{name: "v4", mutate: func(c *imagetest.CompactReader) { c.Patch(0x64, u16(0xb4a4)) }, openErr: ErrUnsupported},
		{name: "truncated", size: compactSize / 2, openErr: ErrCorrupt},
		{name: "unknown incompat feature", mutate: func(c *imagetest.CompactReader) { c.Patch(0xD8, u32(0x80000001)) }, openErr: ErrUnsupported},
		{name: "root inode number mismatch", mutate: func(c *imagetest.CompactReader) { c.Patch(rootOff+0x98, u64(ok.rootIno+1)) }, openErr: ErrCorrupt},
		{name: "bmap btree block points at itself", mutate: func(c *imagetest.CompactReader) {
			// Make the first child of big/'s root a level-1 node pointing
			// at itself: a child of the root must be at level 0.
			maxrecs := (len(big.fork) - 4) / 16
			ptr := binary.BigEndian.Uint64(big.fork[4+8*maxrecs:])
			d, err := ok.daddr(ptr)
			require.NoError(t, err)
			blk := int64(d) << ok.blockLog
			c.Patch(blk+4, u16(1))
			c.Patch(blk+6, u16(1))
			c.Patch(blk+bmbtHdrSize, u64(0))
			c.Patch(blk+bmbtHdrSize+8*((ok.blockSize-bmbtHdrSize)/16), u64(ptr))
			sealCRC(c, blk, ok.blockSize, bmbtCRCOff)
		}, walkErr: ErrCorrupt},
		{name: "bmap btree root deeper than allowed", mutate: func(c *imagetest.CompactReader) {
			c.Patch(bigOff+coreSize, u16(maxBmbtLevel+1))
		}, walkErr: ErrCorrupt},
		{name: "extent past the filesystem", mutate: func(c *imagetest.CompactReader) {
			rec := bytes.Clone(file.fork[:16])
			rec[7] |= 0x1F // startblock's high bits: far outside every AG
			c.Patch(fileOff+coreSize, rec)
		}, walkErr: ErrCorrupt},
		{name: "too many extents for the fork", mutate: func(c *imagetest.CompactReader) {
			c.Patch(fileOff+0x4C, u32(1000))
		}, walkErr: ErrCorrupt},
		{name: "directory data block magic", mutate: func(c *imagetest.CompactReader) {
			r, err := ok.mapBlock(big, 0)
			require.NoError(t, err)
			c.Patch(int64(r.disk)<<ok.blockLog, []byte("JUNK"))
			sealCRC(c, int64(r.disk)<<ok.blockLog, ok.dirBlkSize, dirCRCOff)
		}, walkErr: ErrCorrupt},
		{name: "directory size beyond the filesystem", mutate: func(c *imagetest.CompactReader) {
			c.Patch(bigOff+0x38, u64(1<<62))
		}, walkErr: ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base.Clone()
			if tc.mutate != nil {
				tc.mutate(c)
				seal(c)
			}
			size := int64(compactSize)
			if tc.size != 0 {
				size = tc.size
			}
			f, err := Open(c, size)
			if tc.openErr != nil {
				require.ErrorIs(t, err, tc.openErr)
				return
			}
			require.NoError(t, err)
			_, err = imagetest.Walk(f, 10000)
			require.ErrorIs(t, err, tc.walkErr)
		})
	}
}

// sealCRC rewrites the CRC at crcOff of the n-byte structure at off.
func sealCRC(c *imagetest.CompactReader, off, n int64, crcOff int) {
	b := make([]byte, n)
	_, _ = c.ReadAt(b, off)
	clear(b[crcOff : crcOff+4])
	c.Patch(off+int64(crcOff), binary.LittleEndian.AppendUint32(nil, integrity.CRC32C(b)))
}

func TestProbe(t *testing.T) {
	assert.False(t, Probe(bytes.NewReader(make([]byte, 4096))))
	assert.False(t, Probe(bytes.NewReader(nil)))
	for _, b := range smallImages(t) {
		assert.True(t, Probe(newCompactReader(b)))
	}
}

// FuzzXFS reads real XFS images built once per process corrupted by the
// fuzzed patches (offset and value pairs, half of them in the first
// 64 KiB: superblock, AG headers, the root inode's chunk): the seeds are
// a few bytes, not the images.
func FuzzXFS(f *testing.F) {
	built := smallImages(f)
	var images [][]byte
	for _, name := range slices.Sorted(maps.Keys(built)) {
		images = append(images, built[name])
	}
	for i := range images {
		f.Add(uint8(i), []byte{})
		f.Add(uint8(i), []byte{0x20, 0x00, 0x00, 0x00, 0x00, 0x60, 0x00, 0x00, 0x00, 0xff})
		f.Add(uint8(i), []byte{0x04, 0x20, 0x00, 0x00, 0x41})
	}
	f.Fuzz(func(t *testing.T, which uint8, patch []byte) {
		// Strictly, and leniently: a lenient reader goes past CRC
		// mismatches into the structures behind them.
		for _, check := range []*integrity.Checker{nil, integrity.Lenient(&integrity.Log{})} {
			r := imagetest.NewPatched(newCompactReader(images[int(which)%len(images)]), compactSize, 64<<10, patch)
			fsys, err := OpenWith(r, compactSize, check)
			if err != nil {
				continue
			}
			_, _ = imagetest.Walk(fsys, 2000)
			_, _ = fsys.ReadLink("etc/remote")
			_, _ = rootfs.New(fsys).ReadFile("etc/systemd/system/multi-user.target.wants/ssh.service")
		}
	})
}

// TestConcurrentWalks walks one FS from several goroutines: the caches
// are shared, so run it with -race after changing them.
func TestConcurrentWalks(t *testing.T) {
	f := openImage(t, mkfs(t, tree(t), "320M"))
	imagetest.ConcurrentWalks(t, f)
}

// TestChecksums damages each kind of v5 structure the reader reads: a
// strict reader fails with the one line naming the structure and the path
// being read; a lenient one logs that line and reads on, the tree intact
// when only the stored CRCs are damaged.
func TestChecksums(t *testing.T) {
	src := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(src, "etc/big"), 0o755))
	for i := range 3000 {
		require.NoError(t, os.WriteFile(filepath.Join(src, "etc/big", fmt.Sprintf("%s%05d", strings.Repeat("n", 40), i)), nil, 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(src, "usr/lib/systemd/system"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "usr/lib/systemd/system/ssh.service"), []byte("[Unit]\n"), 0o644))
	require.NoError(t, os.Symlink(strings.Repeat("d123456789/", 45)+"end", filepath.Join(src, "etc/remote-link")))
	img := mkfs(t, src, "300M")
	base := newCompactReader(compact(t, img))
	f, err := Open(base, compactSize)
	require.NoError(t, err)
	inodeOff := func(ino uint64) int64 {
		ag := ino >> (f.agBlkLog + f.inoPBLog)
		agb := (ino >> f.inoPBLog) & (1<<f.agBlkLog - 1)
		return int64(ag*f.agBlocks+agb)<<f.blockLog + int64(ino&(1<<f.inoPBLog-1))*f.inodeSize
	}
	ssh := node(t, f, "usr/lib/systemd/system/ssh.service")
	sshOff := inodeOff(ssh.ino)
	big := node(t, f, "etc/big")
	require.Equal(t, uint8(fmtBtree), big.format)
	maxrecs := (len(big.fork) - 4) / 16
	bmbt, err := f.daddr(binary.BigEndian.Uint64(big.fork[4+8*maxrecs:]))
	require.NoError(t, err)
	dirBlk, err := f.mapBlock(big, 0)
	require.NoError(t, err)
	link := node(t, f, "etc/remote-link")
	require.Equal(t, uint8(fmtExtents), link.format)
	linkBlk, err := f.mapBlock(link, 0)
	require.NoError(t, err)
	ag1 := int64(f.agBlocks) << f.blockLog
	sect := f.sectSize
	bs := f.blockSize
	readDir := func(g *FS) error { _, err := g.ReadDir("etc/big"); return err }

	for _, tc := range []struct {
		name    string
		at, sum int64
		want    string
		op      func(*FS) error
	}{
		{"superblock", 0x80, sbCRCOff, "xfs: superblock fails its checksum", nil},
		{"AGF", ag1 + sect + 0x30, ag1 + sect + agfCRCOff, fmt.Sprintf("xfs: AGF of AG 1 (sector %d) fails its checksum", (ag1+sect)/512), nil},
		{"AGI", ag1 + 2*sect + 0x30, ag1 + 2*sect + agiCRCOff, fmt.Sprintf("xfs: AGI of AG 1 (sector %d) fails its checksum", (ag1+2*sect)/512), nil},
		{"AGFL", ag1 + 3*sect + 0x40, ag1 + 3*sect + agflCRCOff, fmt.Sprintf("xfs: AGFL of AG 1 (sector %d) fails its checksum", (ag1+3*sect)/512), nil},
		{"inode", sshOff + 0x30, sshOff + inodeCRCOff,
			fmt.Sprintf("xfs: inode %d (AG %d block %d) (/usr/lib/systemd/system/ssh.service) fails its checksum",
				ssh.ino, ssh.ino>>(f.agBlkLog+f.inoPBLog), (ssh.ino>>f.inoPBLog)&(1<<f.agBlkLog-1)),
			func(g *FS) error { _, err := g.Lstat("usr/lib/systemd/system/ssh.service"); return err }},
		{"bmap btree block", int64(bmbt)*bs + bmbtHdrSize + 3, int64(bmbt)*bs + bmbtCRCOff,
			fmt.Sprintf("xfs: bmap btree block %d (/etc/big) fails its checksum", bmbt), readDir},
		{"directory data block", int64(dirBlk.disk)*bs + 100, int64(dirBlk.disk)*bs + dirCRCOff,
			fmt.Sprintf("xfs: directory block %d (/etc/big) fails its checksum", dirBlk.disk), readDir},
		{"remote symlink block", int64(linkBlk.disk)*bs + 60, int64(linkBlk.disk)*bs + symlinkCRCOff,
			fmt.Sprintf("xfs: symlink block %d (/etc/remote-link) fails its checksum", linkBlk.disk),
			func(g *FS) error { _, err := g.ReadLink("etc/remote-link"); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base.Clone()
			flip(c, tc.at)
			g, err := Open(c, compactSize)
			if tc.op != nil {
				require.NoError(t, err)
				err = tc.op(g)
			}
			require.ErrorIs(t, err, integrity.ErrChecksum)
			assert.ErrorIs(t, err, ErrCorrupt)
			m, ok := integrity.As(err)
			require.True(t, ok)
			assert.Equal(t, tc.want, m.Error())

			var log integrity.Log
			g, err = OpenWith(c, compactSize, integrity.Lenient(&log))
			require.NoError(t, err)
			if tc.op != nil {
				_ = tc.op(g)
			}
			assert.Equal(t, []string{tc.want}, log.Lines())

			// Only the stored CRC damaged: the lenient reader reads it all.
			c = base.Clone()
			flip(c, tc.sum)
			log = integrity.Log{}
			g, err = OpenWith(c, compactSize, integrity.Lenient(&log))
			require.NoError(t, err)
			if tc.op != nil {
				require.NoError(t, tc.op(g))
			}
			assert.Equal(t, []string{tc.want}, log.Lines())
		})
	}
}

// flip inverts the byte at off of c.
func flip(c *imagetest.CompactReader, off int64) {
	var b [1]byte
	_, _ = c.ReadAt(b[:], off)
	c.Patch(off, []byte{^b[0]})
}
