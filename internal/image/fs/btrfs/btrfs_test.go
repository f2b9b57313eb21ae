package btrfs

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/imagetest"
	"github.com/amilint/amilint/internal/image/integrity"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// scratch holds the shared source tree.
var scratch = &imagetest.Scratch{Prefix: "btrfs-", Options: imagetest.Options{BigDir: 3000, Sparse: true}}

// tree returns the shared source tree, built once per test binary.
func srcTree(t testing.TB) string { return scratch.Tree(t) }

func TestMain(m *testing.M) { os.Exit(scratch.Run(m)) }

// mkfs builds a btrfs image of src with mkfs.btrfs --rootdir.
func mkfs(t testing.TB, src, size string, args ...string) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "fs.img")
	imagetest.MkfsBtrfs(t, img, size, src, args...)
	return img
}

func openImage(t testing.TB, img string) *FS { return imagetest.OpenImage(t, img, Probe, Open) }

// checkView reads links through the chroot view, as the audit does.
func checkView(t *testing.T, f *FS) {
	t.Helper()
	view := rootfs.New(f)
	b, err := view.ReadFile("etc/systemd/system/multi-user.target.wants/ssh.service")
	require.NoError(t, err)
	assert.Contains(t, string(b), "OpenSSH")
	b, err = view.ReadFile("lib/systemd/system/ecs.service")
	require.NoError(t, err)
	assert.Contains(t, string(b), "ECS agent")
	_, err = view.Open("etc/systemd/system/masked.service")
	assert.ErrorIs(t, err, rootfs.ErrMasked)
}

func TestImagesMatchTheirSourceTree(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		csum uint16
	}{
		{name: "default", csum: csumCRC32C},
		{name: "4k nodes (deep trees)", args: []string{"-n", "4096"}, csum: csumCRC32C},
		{name: "xxhash", args: []string{"--csum", "xxhash"}, csum: csumXXHash},
		{name: "sha256", args: []string{"--csum", "sha256"}, csum: csumSHA256},
		{name: "blake2", args: []string{"--csum", "blake2"}, csum: csumBLAKE2b},
		{name: "single metadata, holes", args: []string{"-m", "single", "-O", "^no-holes"}, csum: csumCRC32C},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := srcTree(t)
			f := openImage(t, mkfs(t, src, "256M", tc.args...))
			assert.Equal(t, tc.csum, f.csumType)
			n := imagetest.Compare(t, src, f, imagetest.CompareOptions{ModTimes: true, Perms: true})
			assert.Greater(t, n, 3000)
			checkView(t, f)
			id, name := f.Subvolume()
			assert.Equal(t, uint64(fsTreeObjectid), id)
			assert.Equal(t, "<FS_TREE>", name)
			assert.Empty(t, f.Warnings())
		})
	}
}

// TestFSTestConformance runs testing/fstest over an image.
func TestFSTestConformance(t *testing.T) {
	src := t.TempDir()
	imagetest.BuildTree(t, src, imagetest.Options{BigDir: 300, NoSymlinks: true, NoBigFile: true})
	f := openImage(t, mkfs(t, src, "128M"))
	require.NoError(t, fstest.TestFS(imagetest.NoLinks{Source: f}, "etc/os-release", "big/entry-00299.conf", "var/lib/medium.bin"))
}

// TestCompressedExtents has the kernel write the tree compressed (mkfs
// cannot): zlib, lzo and zstd, inline and regular extents, read back.
func TestCompressedExtents(t *testing.T) {
	src := t.TempDir()
	imagetest.BuildTree(t, src, imagetest.Options{BigDir: 50, Sparse: true})
	// Compressible data too: text repeated, in and over one 128 KiB extent.
	var text bytes.Buffer
	for i := range 40000 {
		text.WriteString(strings.Repeat("x", i%13) + " line\n")
	}
	require.NoError(t, os.WriteFile(filepath.Join(src, "etc/text"), text.Bytes(), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "etc/inline-text"), bytes.Repeat([]byte("inline "), 300), 0o644))
	for _, comp := range []string{"zlib", "lzo", "zstd"} {
		t.Run(comp, func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "fs.img")
			imagetest.MkfsBtrfs(t, img, "256M", "")
			imagetest.MountBtrfs(t, img, "compress-force="+comp, "cp -a "+src+"/. .")
			f := openImage(t, img)
			imagetest.Compare(t, src, f, imagetest.CompareOptions{ModTimes: true, Perms: true})
			checkView(t, f)
			// The files were stored compressed, inline and regular.
			want := map[uint8]int{}
			for _, name := range []string{"etc/text", "etc/inline-text"} {
				n, err := lookupInode(f, name)
				require.NoError(t, err)
				exts, err := f.fileExtents(n)
				require.NoError(t, err)
				for _, e := range exts {
					want[e.typ]++
					assert.Equal(t, map[string]uint8{"zlib": compZlib, "lzo": compLZO, "zstd": compZstd}[comp], e.comp, "%s extent at %d", name, e.fileOff)
				}
			}
			assert.Positive(t, want[0], "an inline extent")
			assert.Positive(t, want[1], "a regular extent")
		})
	}
}

// TestSubvolumes lays the filesystem out as Fedora Cloud does (the OS in
// subvolume root, the default the top level), with a subvolume nested in
// root, and reads it as the kernel shows the root subvolume mounted.
func TestSubvolumes(t *testing.T) {
	src := t.TempDir()
	imagetest.BuildTree(t, src, imagetest.Options{BigDir: 50})
	img := filepath.Join(t.TempDir(), "fs.img")
	imagetest.BtrfsFedora(t, img, "256M", src, "compress=zstd:1")
	imagetest.MountBtrfs(t, img, "subvol=root", "btrfs -q subvolume create var/lib/machines && echo nested > var/lib/machines/file && "+
		"btrfs -q subvolume create var/lib/machines/deeper && echo deeper > var/lib/machines/deeper/file")
	// What the kernel shows mounting subvolume root.
	want := t.TempDir()
	imagetest.MountBtrfs(t, img, "subvol=root,ro", "cp -a . "+want+"/")
	f := openImage(t, img)
	id, name := f.Subvolume()
	assert.Equal(t, "root", name)
	assert.GreaterOrEqual(t, id, uint64(firstFreeObjectid))
	imagetest.Compare(t, want, f, imagetest.CompareOptions{ModTimes: true, Perms: true})
	b, err := f.ReadFile("var/lib/machines/deeper/file")
	require.NoError(t, err)
	assert.Equal(t, "deeper\n", string(b))

	// Inodes of the subvolumes never share a number: each subvolume's
	// root directory is objectid 256 in its own tree.
	seen := map[uint64]string{}
	for _, p := range []string{".", "var/lib/machines", "var/lib/machines/deeper", "var/lib/machines/file", "var/lib/machines/deeper/file"} {
		fi, err := f.Lstat(p)
		require.NoError(t, err)
		ino, _ := fi.Sys().(uint64)
		assert.NotContains(t, seen, ino, "inode of %s", p)
		seen[ino] = p
	}

	// A default subvolume holding an OS wins; several and none the
	// default is an error naming them.
	imagetest.MountBtrfs(t, img, "", "btrfs -q subvolume snapshot root snap")
	_, err = Open(openFile(t, img))
	assert.ErrorIs(t, err, ErrUnsupported)
	assert.ErrorContains(t, err, "(root)")
	assert.ErrorContains(t, err, "(snap)")
	// The one whose fstab mounts itself at / is the root: a snapshot
	// keeps the root's fstab.
	imagetest.MountBtrfs(t, img, "", "echo 'UUID=x / btrfs subvol=root,compress=zstd:1 0 0' > root/etc/fstab && "+
		"btrfs -q subvolume delete snap && btrfs -q subvolume snapshot root snap")
	f = openImage(t, img)
	_, name = f.Subvolume()
	assert.Equal(t, "root", name)
	imagetest.MountBtrfs(t, img, "", "echo 'UUID=x / btrfs subvolid=256 0 0' > root/etc/fstab")
	f = openImage(t, img)
	id, name = f.Subvolume()
	assert.Equal(t, "root", name)
	assert.Equal(t, uint64(256), id)
	imagetest.MountBtrfs(t, img, "", "btrfs subvolume set-default snap >/dev/null && rm snap/etc/hostname")
	f = openImage(t, img)
	_, name = f.Subvolume()
	assert.Equal(t, "snap", name)
	_, err = f.Lstat("etc/hostname")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

func openFile(t testing.TB, img string) (*os.File, int64) {
	t.Helper()
	fh, err := os.Open(img)
	require.NoError(t, err)
	t.Cleanup(func() { fh.Close() })
	fi, err := fh.Stat()
	require.NoError(t, err)
	return fh, fi.Size()
}

// TestChecksums damages one byte of a tree block: strictly an error
// naming the block, leniently a recorded line and the block read as
// stored.
func TestChecksums(t *testing.T) {
	src := t.TempDir()
	imagetest.BuildTree(t, src, imagetest.Options{BigDir: 20})
	for _, args := range [][]string{nil, {"--csum", "xxhash"}, {"--csum", "sha256"}, {"--csum", "blake2"}} {
		img := mkfs(t, src, "128M", append([]string{"-m", "single"}, args...)...)
		f := openImage(t, img)
		n, err := lookupInode(f, "etc/os-release")
		require.NoError(t, err)
		// The leaf holding etc/os-release's inode item.
		leaf := f.leafOf(t, n.sub.tree, key{obj: n.obj, typ: typeInodeItem})
		at, err := f.physical(leaf, f.nodeSize)
		require.NoError(t, err)
		b, err := os.ReadFile(img)
		require.NoError(t, err)
		// A byte of the header's generation: nothing this reader checks.
		b[at+0x50] ^= 0x40
		r := bytes.NewReader(b)
		f, err = Open(r, int64(len(b)))
		if err == nil {
			_, err = f.ReadFile("etc/os-release")
		}
		var m *integrity.Mismatch
		require.True(t, errors.As(err, &m), "%v", err)
		assert.Equal(t, "btrfs", m.Format)
		assert.Contains(t, m.Structure, "tree block")
		assert.ErrorIs(t, err, ErrCorrupt)

		log := &integrity.Log{}
		f, err = OpenWith(r, int64(len(b)), integrity.Lenient(log))
		require.NoError(t, err)
		got, err := f.ReadFile("etc/os-release")
		require.NoError(t, err)
		assert.Contains(t, string(got), "ID=debian")
		assert.NotEmpty(t, f.Corruption())
	}
}

// leafOf returns the logical address of the leaf holding k.
func (f *FS) leafOf(t *testing.T, tr tree, k key) uint64 {
	t.Helper()
	l, level := tr.block, tr.level
	for level > 0 {
		b, err := f.node(tr, l, level)
		require.NoError(t, err)
		n := int(le.Uint32(b[0x60:]))
		child := le.Uint64(b[headerSize+keySize:])
		for i := range n {
			if readKey(b[headerSize+i*keyPtrSize:]).cmp(k) <= 0 {
				child = le.Uint64(b[headerSize+i*keyPtrSize+keySize:])
			}
		}
		l, level = child, level-1
	}
	return l
}

func TestProbe(t *testing.T) {
	img := mkfs(t, t.TempDir(), "128M")
	fh, _ := openFile(t, img)
	assert.True(t, Probe(fh))
	assert.False(t, Probe(bytes.NewReader(make([]byte, 1<<20))))
}

func TestConcurrentWalks(t *testing.T) {
	imagetest.ConcurrentWalks(t, openImage(t, mkfs(t, srcTree(t), "256M")))
}

// TestDUPCopy damages the first copy of a DUP tree block: it is read from
// the second, as the kernel reads it, with a warning; both damaged is a
// mismatch.
func TestDUPCopy(t *testing.T) {
	src := t.TempDir()
	imagetest.BuildTree(t, src, imagetest.Options{BigDir: 20})
	img := mkfs(t, src, "128M", "-m", "dup")
	f := openImage(t, img)
	n, err := lookupInode(f, "etc/os-release")
	require.NoError(t, err)
	leaf := f.leafOf(t, n.sub.tree, key{obj: n.obj, typ: typeInodeItem})
	at, mirror, err := f.copies(leaf, f.nodeSize)
	require.NoError(t, err)
	require.Positive(t, mirror)
	b, err := os.ReadFile(img)
	require.NoError(t, err)
	b[at+0x50] ^= 0x40
	f, err = Open(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	got, err := f.ReadFile("etc/os-release")
	require.NoError(t, err)
	assert.Contains(t, string(got), "ID=debian")
	assert.Empty(t, f.Warnings(), "no stale view")
	require.Len(t, f.Repaired(), 1)
	assert.Contains(t, f.Repaired()[0], "read from the second")

	b[mirror+0x50] ^= 0x40
	f, err = Open(bytes.NewReader(b), int64(len(b)))
	if err == nil {
		_, err = f.ReadFile("etc/os-release")
	}
	assert.ErrorIs(t, err, integrity.ErrChecksum)
}

// TestDebianRootSubset reads back a real root's etc and usr/lib/systemd,
// from mkfs.btrfs --rootdir and written zstd-compressed by the kernel.
func TestDebianRootSubset(t *testing.T) {
	root := testenv.Bookworm.Path(t)
	src := filepath.Join(t.TempDir(), "root")
	require.NoError(t, os.MkdirAll(filepath.Join(src, "usr/lib"), 0o755))
	imagetest.Sh(t, root, "cp -a etc "+src+"/ && cp -a usr/lib/systemd usr/lib/os-release "+src+"/usr/lib/")
	f := openImage(t, mkfs(t, src, "256M"))
	assert.Greater(t, imagetest.Compare(t, src, f, imagetest.CompareOptions{ModTimes: true, Perms: true}), 500)

	img := filepath.Join(t.TempDir(), "fs.img")
	imagetest.MkfsBtrfs(t, img, "256M", "")
	imagetest.MountBtrfs(t, img, "compress-force=zstd", "cp -a "+src+"/. .")
	imagetest.Compare(t, src, openImage(t, img), imagetest.CompareOptions{ModTimes: true, Perms: true})
}

// TestDataChecksums damages a byte of a file's data: strictly a mismatch
// naming the sector and the file, leniently the data as stored and a
// recorded line; a compressed extent's checksums cover it as stored.
func TestDataChecksums(t *testing.T) {
	src := t.TempDir()
	imagetest.BuildTree(t, src, imagetest.Options{BigDir: 20, NoBigFile: true})
	require.NoError(t, os.WriteFile(filepath.Join(src, "etc/text"), bytes.Repeat([]byte("compress me\n"), 20000), 0o644))
	plain := mkfs(t, src, "128M")
	packed := filepath.Join(t.TempDir(), "fs.img")
	imagetest.MkfsBtrfs(t, packed, "128M", "")
	imagetest.MountBtrfs(t, packed, "compress-force=zstd", "cp -a "+src+"/. .")
	for _, tc := range []struct{ img, name string }{{plain, "var/lib/medium.bin"}, {packed, "etc/text"}} {
		f := openImage(t, tc.img)
		want, err := f.ReadFile(tc.name)
		require.NoError(t, err)
		n, err := lookupInode(f, tc.name)
		require.NoError(t, err)
		exts, err := f.fileExtents(n)
		require.NoError(t, err)
		require.Equal(t, uint8(1), exts[0].typ)
		at, err := f.physical(exts[0].diskBytenr, 1)
		require.NoError(t, err)
		b, err := os.ReadFile(tc.img)
		require.NoError(t, err)
		b[at+100] ^= 0x01

		f, err = Open(bytes.NewReader(b), int64(len(b)))
		require.NoError(t, err)
		_, err = f.ReadFile(tc.name)
		m, ok := integrity.As(err)
		require.True(t, ok, "%v", err)
		assert.Contains(t, m.Structure, "data sector")
		assert.Equal(t, "/"+tc.name, m.Path)

		f, err = OpenWith(bytes.NewReader(b), int64(len(b)), integrity.Lenient(&integrity.Log{}))
		require.NoError(t, err)
		got, err := f.ReadFile(tc.name)
		if exts[0].comp == compNone {
			require.NoError(t, err)
			assert.NotEqual(t, want, got)
		}
		assert.NotEmpty(t, f.Corruption())
	}
}
