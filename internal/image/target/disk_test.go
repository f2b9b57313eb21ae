//go:build !amilint_guest

package target

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/disk/lvm"
	"github.com/amilint/amilint/internal/image/disk/partition"
	"github.com/amilint/amilint/internal/image/disk/vdisk"
	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/fs/ext4"
	"github.com/amilint/amilint/internal/image/fs/tarfs"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// fsVolume opens an image file like OpenDisk does and returns the volumes
// that hold an ext4 filesystem (by its magic).
func fsVolumes(t *testing.T, img string, want int) []volume {
	f, err := os.Open(img)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	require.NoError(t, err)
	disk, _, err := vdisk.Open(f, fi.Size(), vdisk.Options{})
	require.NoError(t, err)
	tab, err := partition.Read(disk, disk.Size())
	require.NoError(t, err)
	vols, err := volumes(disk, tab, want, nil)
	require.NoError(t, err)
	var out []volume
	for _, v := range vols {
		if filesystems()[0].probe(v.r, v.size) {
			out = append(out, v)
		}
	}
	return out
}

// TestReaderChains builds real images in every container and layout and
// checks that the chain (container, table, LVM) finds exactly one ext4
// volume, the right one, whose bytes equal the filesystem image's.
func TestReaderChains(t *testing.T) {
	fsImg := disktest.Ext4(t, disktest.Tree(t), "24M")
	want, size := disktest.FileSHA256(t, fsImg)
	layouts := []struct {
		name string
		make func(testing.TB, string) string
		desc string
	}{
		{"bare", func(_ testing.TB, p string) string { return p }, "whole disk"},
		{"mbr logical", disktest.MBRLogical, "partition 5"},
		{"gpt", disktest.GPTRoot, "partition 2"},
		{"lvm", disktest.LVMDisk, "LV "},
	}
	formats := []struct {
		format string
		args   []string
	}{
		{"raw", nil},
		{"qcow2", []string{"-c"}},
		{"vmdk", []string{"-o", "subformat=streamOptimized"}},
		{"vpc", []string{"-o", "subformat=dynamic"}},
		{"vhdx", nil},
	}
	for _, l := range layouts {
		raw := l.make(t, fsImg)
		for _, f := range formats {
			if l.name != "bare" && l.name != "gpt" && f.format != "raw" && f.format != "qcow2" {
				continue // every container is covered by bare and gpt
			}
			t.Run(l.name+" "+f.format, func(t *testing.T) {
				img := raw
				if f.format != "raw" {
					img = disktest.Convert(t, raw, f.format, f.args...)
				}
				vols := fsVolumes(t, img, 0)
				require.Len(t, vols, 1)
				assert.Contains(t, vols[0].desc, l.desc)
				assert.Equal(t, want, disktest.SHA256(t, vols[0].r, size))
			})
		}
	}
}

func TestPartitionOption(t *testing.T) {
	fsImg := disktest.Ext4(t, disktest.Tree(t), "24M")
	img := disktest.MBRLogical(t, fsImg)
	assert.Len(t, fsVolumes(t, img, 5), 1)
	assert.Empty(t, fsVolumes(t, img, 6))

	f, err := os.Open(img)
	require.NoError(t, err)
	defer f.Close()
	tab, err := partition.Read(f, 96<<20)
	require.NoError(t, err)
	_, err = volumes(vdisk.NewRaw(f, 96<<20), tab, 9, nil)
	require.ErrorContains(t, err, "partition 9 not found (the mbr table has 1, 5, 6)")
}

func TestOpenTarball(t *testing.T) {
	dir := disktest.Tree(t)
	for _, ext := range []string{".tar", ".tar.gz", ".tar.zst"} {
		t.Run(ext, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "root"+ext)
			disktest.Run(t, "tar", "-caf", p, "-C", dir, ".")
			im, err := Open(context.Background(), p, Options{})
			require.NoError(t, err)
			defer im.Close()
			assert.Equal(t, "tar", im.Kind)
			b, err := im.FS.ReadFile("etc/os-release")
			require.NoError(t, err)
			assert.Equal(t, "ID=debian\nVERSION_ID=12\n", string(b))
			assert.Positive(t, im.BytesRead())
		})
	}
}

// TestOpenErrors checks that broken inputs fail with the reader's own
// sentinel, so the CLI reports a clear cause (and exits 2).
func TestOpenErrors(t *testing.T) {
	fsImg := disktest.Ext4(t, disktest.Tree(t), "24M")
	qcow := disktest.Convert(t, fsImg, "qcow2")
	write := func(b []byte) string {
		p := filepath.Join(t.TempDir(), "bad.img")
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}
	qb, err := os.ReadFile(qcow)
	require.NoError(t, err)
	child := filepath.Join(t.TempDir(), "child.qcow2")
	disktest.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-b", qcow, "-F", "qcow2", child)
	gpt := disktest.GPTRoot(t, fsImg)
	gb, err := os.ReadFile(gpt)
	require.NoError(t, err)
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "etc/os-release", Size: 100, Mode: 0o644}))
	_, _ = tw.Write([]byte("ID=x\n"))
	for _, tt := range []struct {
		name string
		path string
		want error
	}{
		{"qcow2 truncated", write(qb[:300]), vdisk.ErrCorrupt},
		{"qcow2 backing file", child, vdisk.ErrBacking},
		{"gpt past the end", write(gb[:50<<20]), partition.ErrCorrupt},
		{"no filesystem", write(bytes.Repeat([]byte{0}, 1<<20)), ErrNoRoot},
		{"tar truncated", write(tb.Bytes()), tarfs.ErrCorrupt},
		{"lvm label damaged", write(damageLVM(t, disktest.LVMDisk(t, fsImg))), lvm.ErrCorrupt},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(context.Background(), tt.path, Options{})
			require.ErrorIs(t, err, tt.want)
		})
	}
}

// damageLVM breaks the LVM label's checksum in the PV at 1 MiB.
func damageLVM(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, "LABELONE", string(b[1<<20+512:1<<20+520]))
	b[1<<20+512+40]++
	return b
}

// TestOSReleaseLookup checks how the search for the root treats what it
// finds where os-release should be: a filesystem that has none, or reaches
// it through a non-directory, is "no root"; one whose directories cannot
// be read (a damaged /etc block) is reported as damaged, not as "no root".
func TestOSReleaseLookup(t *testing.T) {
	bare := func(t *testing.T) string { return t.TempDir() }
	etcFile := func(t *testing.T) string {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "etc"), []byte("not a directory\n"), 0o644))
		return dir
	}
	for _, tt := range []struct {
		name   string
		tree   func(t *testing.T) string
		damage bool
		want   error
	}{
		{"no os-release", bare, false, ErrNoRoot},
		{"etc is a file", etcFile, false, ErrNoRoot},
		{"etc directory block damaged", func(t *testing.T) string { return disktest.Tree(t) }, true, ext4.ErrCorrupt},
	} {
		t.Run(tt.name, func(t *testing.T) {
			img := disktest.Ext4(t, tt.tree(t), "8M")
			if tt.damage {
				disktest.DamageBlock(t, img, "/etc")
			}
			_, err := Open(context.Background(), img, Options{})
			require.ErrorIs(t, err, tt.want)
			if tt.want != ErrNoRoot {
				assert.NotErrorIs(t, err, ErrNoRoot)
				assert.ErrorContains(t, err, "look for etc/os-release")
			}
		})
	}
}

// gatedSource holds a lookup under etc until one under usr has begun,
// and records the names asked for.
type gatedSource struct {
	fstest.MapFS
	usr   chan struct{}
	once  sync.Once
	mu    sync.Mutex
	asked []string
}

func (g *gatedSource) Lstat(name string) (fs.FileInfo, error) {
	g.mu.Lock()
	g.asked = append(g.asked, name)
	g.mu.Unlock()
	switch {
	case strings.HasPrefix(name, "usr"):
		g.once.Do(func() { close(g.usr) })
	case strings.HasPrefix(name, "etc"):
		select {
		case <-g.usr:
		case <-time.After(10 * time.Second):
			return nil, errors.New("usr/lib/os-release was not looked up beside etc/os-release")
		}
	}
	return g.MapFS.Lstat(name)
}

// TestOSReleaseNamesAtOnce: the search for the root looks usr/lib up
// beside etc/os-release (on a remote disk, each directory on the way is a
// round trip),
// except for a lenient Checker, which records damage in the order it is
// found: then it stops at the first name that answers.
func TestOSReleaseNamesAtOnce(t *testing.T) {
	tree := func() *gatedSource {
		return &gatedSource{usr: make(chan struct{}), MapFS: fstest.MapFS{
			"etc/os-release":     {Data: []byte("ID=debian\n")},
			"usr/lib/os-release": {Data: []byte("ID=debian\n")},
		}}
	}
	src := tree()
	ok, err := hasOSRelease(rootfs.New(src), false)
	require.NoError(t, err)
	assert.True(t, ok)

	src = tree()
	close(src.usr) // nothing waits: the lookup is in order
	ok, err = hasOSRelease(rootfs.New(src), true)
	require.NoError(t, err)
	assert.True(t, ok)
	for _, name := range src.asked {
		assert.False(t, strings.HasPrefix(name, "usr"), "lenient: %s asked after etc/os-release answered", name)
	}
}

// TestOSReleaseLookupReadsNoMore: with etc/os-release a regular file, the
// search for the root never looks at usr/lib/os-release, as every reader
// of os-release does: damage there is none of the image's audit's
// business and must not be met (and kept, rootfs.Damaged) at Open.
func TestOSReleaseLookupReadsNoMore(t *testing.T) {
	dir := disktest.Tree(t)
	require.NoError(t, os.Remove(filepath.Join(dir, "etc/os-release")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/os-release"), []byte("ID=debian\nVERSION_ID=12\n"), 0o644))
	img := disktest.Ext4(t, dir, "8M")
	disktest.DamageInode(t, img, "/usr/lib/os-release")
	im, err := Open(context.Background(), img, Options{})
	require.NoError(t, err)
	defer im.Close()
	assert.NoError(t, rootfs.Damaged(im.FS), "Open read usr/lib/os-release")
	_, err = im.FS.Stat("usr/lib/os-release")
	require.ErrorIs(t, err, ext4.ErrCorrupt, "the inode was damaged")
}
