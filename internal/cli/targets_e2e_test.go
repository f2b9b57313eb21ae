package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/cli"
	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/target"
)

func units(t *testing.T, target string) (string, string, int) {
	var out, errb bytes.Buffer
	code := cli.Run(context.Background(), []string{"units", target, "-o", "tsv"}, &out, &errb)
	return out.String(), errb.String(), code
}

// scan returns `amilint scan TARGET -o json` without the target's name and
// kind, which differ between an image and its tree by design.
func scan(t *testing.T, target string) (map[string]any, int) {
	var out, errb bytes.Buffer
	code := cli.Run(context.Background(), []string{"scan", target, "-o", "json", "--fail-on", "critical"}, &out, &errb)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &doc), "scan %s: %s", target, errb.String())
	delete(doc, "target")
	return doc, code
}

// securityJSON returns `amilint security TARGET -o json` without the
// target's name.
func securityJSON(t *testing.T, target string) map[string]any {
	var out, errb bytes.Buffer
	code := cli.Run(context.Background(), []string{"security", target, "-o", "json"}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	var doc map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &doc), "security %s: %s", target, errb.String())
	delete(doc, "target")
	return doc
}

// TestUnitsOfImagesMatchTheirTree is the acceptance check: for each
// format, `amilint units IMAGE -o tsv` equals `amilint units DIR -o tsv`
// of the tree the image was built from with Debian's own tools, and `scan`
// gives the same report.
func TestUnitsOfImagesMatchTheirTree(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	require.NoError(t, fixtures.Materialize(fixtures.Default, dir))
	want, stderr, code := units(t, dir)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, want, "ecs.service\tenabled")
	wantScan, wantCode := scan(t, dir)
	require.NotEmpty(t, wantScan["findings"], "the DLAMI fixture has findings")
	wantSecurity := securityJSON(t, dir)
	require.NotEmpty(t, wantSecurity["units"], "the DLAMI fixture has services")

	fsImg := disktest.Ext4(t, dir, "24M")
	gpt := disktest.GPTRoot(t, fsImg)
	mbr := disktest.MBRLogical(t, fsImg)
	xfsImg := disktest.XFS(t, dir, "300M")
	btrfsImg := disktest.Btrfs(t, dir, "128M")
	fedora := disktest.GPTBig(t, disktest.BtrfsFedora(t, dir, "256M"), 280<<20)
	tarball := filepath.Join(t.TempDir(), "root.tar.zst")
	disktest.Run(t, "tar", "--zstd", "-cf", tarball, "-C", dir, ".")
	for _, tc := range []struct {
		name string
		img  func(t *testing.T) string
	}{
		{"tar.zst", func(*testing.T) string { return tarball }},
		{"raw ext4", func(*testing.T) string { return fsImg }},
		{"raw gpt", func(*testing.T) string { return gpt }},
		{"qcow2 compressed gpt", func(t *testing.T) string { return disktest.Convert(t, gpt, "qcow2", "-c") }},
		{"qcow2 v2 mbr logical", func(t *testing.T) string { return disktest.Convert(t, mbr, "qcow2", "-o", "compat=0.10") }},
		{"vmdk sparse", func(t *testing.T) string {
			return disktest.Convert(t, mbr, "vmdk", "-o", "subformat=monolithicSparse")
		}},
		{"vmdk streamOptimized", func(t *testing.T) string {
			return disktest.Convert(t, gpt, "vmdk", "-o", "subformat=streamOptimized")
		}},
		{"vhd dynamic", func(t *testing.T) string { return disktest.Convert(t, gpt, "vpc", "-o", "subformat=dynamic") }},
		{"vhd fixed", func(t *testing.T) string { return disktest.Convert(t, mbr, "vpc", "-o", "subformat=fixed") }},
		{"vhdx", func(t *testing.T) string { return disktest.Convert(t, gpt, "vhdx") }},
		{"lvm in qcow2", func(t *testing.T) string { return disktest.Convert(t, disktest.LVMDisk(t, fsImg), "qcow2") }},
		{"lvm striped over two PVs, raw", func(t *testing.T) string { return disktest.StripedLVMDisk(t, fsImg) }},
		{"lvm striped over two PVs in vmdk", func(t *testing.T) string {
			return disktest.Convert(t, disktest.StripedLVMDisk(t, fsImg), "vmdk", "-o", "subformat=streamOptimized")
		}},
		{"xfs raw", func(*testing.T) string { return xfsImg }},
		{"xfs gpt vmdk", func(t *testing.T) string {
			return disktest.Convert(t, disktest.GPTBig(t, xfsImg, 320<<20), "vmdk", "-o", "subformat=monolithicSparse")
		}},
		{"btrfs raw", func(*testing.T) string { return btrfsImg }},
		{"btrfs fedora layout gpt raw", func(*testing.T) string { return fedora }},
		{"btrfs fedora layout gpt qcow2", func(t *testing.T) string { return disktest.Convert(t, fedora, "qcow2") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := tc.img(t)
			got, stderr, code := units(t, img)
			require.Equal(t, 0, code, stderr)
			assert.Equal(t, want, got)
			gotScan, gotCode := scan(t, img)
			assert.Equal(t, wantCode, gotCode)
			assert.Equal(t, wantScan, gotScan)
			assert.Equal(t, wantSecurity, securityJSON(t, img))
		})
	}
}

// TestBrokenImagesExit2 checks the CLI contract: a corrupt image is a clear
// error on stderr and exit code 2, never a result.
func TestBrokenImagesExit2(t *testing.T) {
	fsImg := disktest.Ext4(t, disktest.Tree(t), "24M")
	qcow := disktest.Convert(t, disktest.GPTRoot(t, fsImg), "qcow2")
	b, err := os.ReadFile(qcow)
	require.NoError(t, err)
	write := func(b []byte) string {
		p := filepath.Join(t.TempDir(), "bad")
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}
	for _, tc := range []struct {
		name, path, msg string
	}{
		{"truncated qcow2", write(b[:len(b)/3]), "corrupt"},
		{"wrong magic", write(append([]byte("QFI\xfb\x00\x00\x00\x07"), b[8:]...)), "qcow2 version 7"},
		{"no filesystem", write(make([]byte, 1<<20)), "no root filesystem found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := units(t, tc.path)
			assert.Equal(t, 2, code)
			assert.Empty(t, out)
			assert.Contains(t, stderr, tc.msg)
		})
	}
}

// TestPartitionChoice checks automatic root finding and --partition on a
// disk with two filesystems, only one of them an OS root.
func TestPartitionChoice(t *testing.T) {
	rootImg := disktest.Ext4(t, disktest.Tree(t), "24M")
	data := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.MkdirAll(data, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(data, "marker"), []byte("data partition\n"), 0o644))
	dataImg := disktest.Ext4(t, data, "8M")
	disk := disktest.MBRLogical(t, rootImg)
	disktest.Place(t, dataImg, disk, 2048*512) // partition 1

	for _, tc := range []struct {
		part   int
		file   string
		detail string
	}{
		{0, "etc/hostname", "partition 5"},
		{5, "etc/hostname", "partition 5"},
		{1, "marker", "partition 1"},
	} {
		im, err := target.Open(context.Background(), disk, target.Options{Partition: tc.part})
		require.NoError(t, err)
		_, err = im.FS.ReadFile(tc.file)
		assert.NoError(t, err)
		assert.Contains(t, im.Detail, tc.detail)
		im.Close()
	}
	_, err := target.Open(context.Background(), disk, target.Options{Partition: 6})
	assert.ErrorContains(t, err, "partition 6: no known filesystem")
}

// TestBackingFile opens a qcow2 overlay: refused alone (exit 2 via the
// CLI), read through when its backing file is given.
func TestBackingFile(t *testing.T) {
	fsImg := disktest.Ext4(t, disktest.Tree(t), "24M")
	base := disktest.Convert(t, disktest.GPTRoot(t, fsImg), "qcow2")
	child := filepath.Join(t.TempDir(), "child.qcow2")
	disktest.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", "qcow2", child)

	_, stderr, code := units(t, child)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "backing file")

	im, err := target.Open(context.Background(), child, target.Options{Backing: base})
	require.NoError(t, err)
	b, err := im.FS.ReadFile("etc/hostname")
	require.NoError(t, err)
	assert.Equal(t, "image\n", string(b))
	require.NoError(t, im.Close())
}

// TestBlockDevice reads an attached volume (a loop device over a GPT disk
// image) as a raw disk, without mounting it.
func TestBlockDevice(t *testing.T) {
	testenv.Root(t, "a loop device")
	dir := disktest.Tree(t)
	want, stderr, code := units(t, dir)
	require.Equal(t, 0, code, stderr)
	disk := disktest.GPTRoot(t, disktest.Ext4(t, dir, "24M"))
	loop := strings.TrimSpace(disktest.Run(t, "losetup", "-f", "--show", "-r", disk))
	defer disktest.Run(t, "losetup", "-d", loop)
	got, stderr, code := units(t, loop)
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, want, got)
}

// TestStripedLVPartition chooses a striped root LV by either of its PVs'
// partitions: the other PV is still assembled.
func TestStripedLVPartition(t *testing.T) {
	dir := disktest.Tree(t)
	want, stderr, code := units(t, dir)
	require.Equal(t, 0, code, stderr)
	disk := disktest.StripedLVMDisk(t, disktest.Ext4(t, dir, "24M"))
	for _, part := range []int{1, 2} {
		im, err := target.Open(context.Background(), disk, target.Options{Partition: part})
		require.NoError(t, err)
		assert.Contains(t, im.Detail, "LV ")
		assert.Contains(t, im.Detail, "/root in partition 1 and partition 2")
		im.Close()
	}
	var out, errb bytes.Buffer
	code = cli.Run(context.Background(), []string{"units", disk, "--partition", "2", "-o", "tsv"}, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	assert.Equal(t, want, out.String())
}
