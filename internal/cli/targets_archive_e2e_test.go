package cli_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/target"
)

// runIn runs a command in dir under a timeout and fails the test with its
// output if it fails.
func runIn(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, out)
}

// ovf is an OVF descriptor naming disks (file name → compression).
func ovf(disks ...[2]string) string {
	var files, section strings.Builder
	for i, d := range disks {
		comp := ""
		if d[1] != "" {
			comp = fmt.Sprintf(` ovf:compression="%s"`, d[1])
		}
		fmt.Fprintf(&files, `    <File ovf:id="file%d" ovf:href="%s"%s/>`+"\n", i, d[0], comp)
		fmt.Fprintf(&section, `    <Disk ovf:capacity="33554432" ovf:diskId="vmdisk%d" ovf:fileRef="file%d" ovf:format="http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized"/>`+"\n", i, i)
	}
	return `<?xml version="1.0" encoding="UTF-8"?>
<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1" xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1">
  <References>
` + files.String() + `  </References>
  <DiskSection>
    <Info>Virtual disk information</Info>
` + section.String() + `  </DiskSection>
  <VirtualSystem ovf:id="golden"><Info>A golden image</Info></VirtualSystem>
</Envelope>
`
}

// TestDiskArchivesMatchTheDisk is the acceptance check of disk archives: a
// GCE-style disk.raw in a .tar.gz (GNU tar, sparse, as GCE documents it),
// in a plain tar (read in place), a sparse plain tar and a zstd tar, and
// OVAs made with qemu-img and tar (one disk, two disks the first of which
// holds no root, a gzip-compressed disk file) all give the units and scan
// of the disk image itself.
func TestDiskArchivesMatchTheDisk(t *testing.T) {
	testenv.Tool(t, "tar", "tar")
	testenv.Tool(t, "qemu-img", "qemu-utils")
	testenv.Tool(t, "gzip", "gzip")
	dir := filepath.Join(t.TempDir(), "root")
	require.NoError(t, fixtures.Materialize(fixtures.Default, dir))
	gpt := disktest.GPTRoot(t, disktest.Ext4(t, dir, "24M"))
	want, stderr, code := units(t, gpt)
	require.Equal(t, 0, code, stderr)
	wantScan, wantCode := scan(t, gpt)
	data := filepath.Join(t.TempDir(), "data")
	require.NoError(t, os.MkdirAll(data, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(data, "README"), []byte("a data disk\n"), 0o644))
	dataDisk := disktest.Ext4(t, data, "8M")

	work := t.TempDir()
	raw := filepath.Join(work, "disk.raw")
	runIn(t, work, "cp", "--sparse=always", gpt, raw)
	vmdk := disktest.Convert(t, gpt, "vmdk", "-o", "subformat=streamOptimized")
	runIn(t, work, "cp", vmdk, filepath.Join(work, "golden-disk1.vmdk"))
	runIn(t, work, "cp", disktest.Convert(t, dataDisk, "vmdk", "-o", "subformat=streamOptimized"), filepath.Join(work, "golden-disk0.vmdk"))
	runIn(t, work, "cp", filepath.Join(work, "golden-disk1.vmdk"), filepath.Join(work, "golden-gz.vmdk"))
	runIn(t, work, "gzip", "-n", filepath.Join(work, "golden-gz.vmdk"))
	runIn(t, work, "mv", "golden-gz.vmdk.gz", "golden-gz.vmdk")
	for name, body := range map[string]string{
		"one.ovf": ovf([2]string{"golden-disk1.vmdk", ""}),
		"two.ovf": ovf([2]string{"golden-disk0.vmdk", ""}, [2]string{"golden-disk1.vmdk", ""}),
		"gz.ovf":  ovf([2]string{"golden-gz.vmdk", "gzip"}),
	} {
		require.NoError(t, os.WriteFile(filepath.Join(work, name), []byte(body), 0o644))
	}
	out := t.TempDir()
	for _, tc := range []struct {
		name   string
		file   string
		tar    []string
		detail string
	}{
		{"GCE disk.raw in a sparse tar.gz", "image.tar.gz", []string{"--format=oldgnu", "-Sczf"}, "through a sparse scratch file"},
		{"disk.raw in a plain tar", "image.tar", []string{"-cf"}, "read in place"},
		{"disk.raw in a sparse plain tar", "sparse.tar", []string{"--format=oldgnu", "-Scf"}, "through a sparse scratch file"},
		{"disk.raw in a zstd tar", "image.tar.zst", []string{"--zstd", "-Scf"}, "through a sparse scratch file"},
		{"OVA", "golden.ova", []string{"-cf", "one.ovf", "golden-disk1.vmdk"}, "ova (tar) member golden-disk1.vmdk, read in place"},
		{"OVA with a data disk first", "two.ova", []string{"-cf", "two.ovf", "golden-disk0.vmdk", "golden-disk1.vmdk"}, "member golden-disk1.vmdk"},
		{"OVA with a gzip disk file", "gz.ova", []string{"-cf", "gz.ovf", "golden-gz.vmdk"}, "through a sparse scratch file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			archive := filepath.Join(out, tc.file)
			args := append([]string{}, tc.tar[0], archive)
			if strings.HasSuffix(tc.file, ".ova") {
				args = append(args, tc.tar[1:]...)
			} else {
				args = append(tc.tar[:len(tc.tar)-1:len(tc.tar)-1], tc.tar[len(tc.tar)-1], archive, "disk.raw")
			}
			runIn(t, work, "tar", args...)
			got, stderr, code := units(t, archive)
			require.Equal(t, 0, code, stderr)
			assert.Equal(t, want, got)
			gotScan, gotCode := scan(t, archive)
			assert.Equal(t, wantCode, gotCode)
			assert.Equal(t, wantScan, gotScan)
			im, err := target.Open(context.Background(), archive, target.Options{})
			require.NoError(t, err)
			defer im.Close()
			assert.Contains(t, im.Detail, tc.detail)
			fi, err := os.Stat(archive)
			require.NoError(t, err)
			if strings.Contains(tc.detail, "in place") {
				assert.Less(t, im.BytesRead(), fi.Size()/2, "read in place: only what the readers need")
			}
			t.Logf("%s: %s; read %d of %d bytes", tc.name, im.Detail, im.BytesRead(), fi.Size())
		})
	}
	// The partition choice reaches the disk in an archive.
	got, stderr, code := run("units", filepath.Join(out, "image.tar.gz"), "--partition", "2", "-o", "tsv")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, want, got)
}

// TestDiskArchiveErrors checks that a disk archive that is not what it
// claims is exit 2 with one clear line.
func TestDiskArchiveErrors(t *testing.T) {
	testenv.Tool(t, "tar", "tar")
	work := t.TempDir()
	for name, body := range map[string]string{
		"disk.raw":    strings.Repeat("\x00", 1<<20),
		"other.raw":   strings.Repeat("\x00", 1<<20),
		"missing.ovf": ovf([2]string{"nowhere.vmdk", ""}),
		"bad.ovf":     "<Envelope><References><File",
		"nodisk.ovf":  `<Envelope><References/><DiskSection/></Envelope>`,
		"chunked.ovf": strings.Replace(ovf([2]string{"disk.raw", ""}), `ovf:href="disk.raw"`, `ovf:href="disk.raw" ovf:chunkSize="1000"`, 1),
	} {
		require.NoError(t, os.WriteFile(filepath.Join(work, name), []byte(body), 0o644))
	}
	runIn(t, work, "tar", "-czf", "good.tar.gz", "disk.raw")
	b, err := os.ReadFile(filepath.Join(work, "good.tar.gz"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(work, "cut.tar.gz"), b[:len(b)*2/3], 0o644))
	for _, tc := range []struct {
		name, file string
		members    []string
		msg        string
	}{
		{"two disk images", "two.tar", []string{"disk.raw", "other.raw"}, "2 disk images (disk.raw, other.raw)"},
		{"an OVF naming a missing disk", "missing.ova", []string{"missing.ovf", "disk.raw"}, "names nowhere.vmdk, which the archive does not hold"},
		{"an OVF that is not XML", "bad.ova", []string{"bad.ovf", "disk.raw"}, "OVF descriptor"},
		{"an OVF with no disk", "nodisk.ova", []string{"nodisk.ovf", "disk.raw"}, "declares no disk"},
		{"a chunked OVA", "chunked.ova", []string{"chunked.ovf", "disk.raw"}, "chunked"},
		{"a disk with no filesystem", "blank.tar", []string{"disk.raw"}, "no root filesystem found"},
		{"a truncated tar.gz", "cut.tar.gz", nil, "corrupt"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.members != nil {
				runIn(t, work, "tar", append([]string{"-cf", tc.file}, tc.members...)...)
			}
			out, stderr, code := units(t, filepath.Join(work, tc.file))
			assert.Equal(t, 2, code, out)
			assert.Contains(t, stderr, tc.msg)
			assert.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %s", stderr)
		})
	}
}
