package archive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/imagetest"
)

func tarOf(t testing.TB, files ...[2]string) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: f[0], Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f[1]))}))
		_, err := tw.Write([]byte(f[1]))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return b.Bytes()
}

func gz(t testing.TB, b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return out.Bytes()
}

const ovfOne = `<Envelope xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1"><References><File ovf:id="f" ovf:href="d.vmdk"/></References><DiskSection><Disk ovf:fileRef="f"/></DiskSection></Envelope>`

// disk is a small "disk": data, a long run of zeros, data.
func disk() string {
	return "BOOT" + string(make([]byte, 1<<20)) + "ROOT"
}

func TestOpen(t *testing.T) {
	for _, tc := range []struct {
		name    string
		archive []byte
		kind    string
		disk    string
		detail  string
	}{
		{"plain, in place", tarOf(t, [2]string{"disk.raw", disk()}), "disk archive", "disk.raw", "read in place"},
		{"gzip, scratch", gz(t, tarOf(t, [2]string{"disk.raw", disk()})), "disk archive", "disk.raw", "scratch"},
		{"ova", tarOf(t, [2]string{"x.ovf", ovfOne}, [2]string{"d.vmdk", disk()}), "ova", "d.vmdk", "read in place"},
		{"ova gzip", gz(t, tarOf(t, [2]string{"x.ovf", ovfOne}, [2]string{"d.vmdk", disk()}, [2]string{"other.vmdk", "x"})), "ova", "d.vmdk", "scratch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, ok, err := Open(bytes.NewReader(tc.archive), int64(len(tc.archive)), Options{ScratchDir: t.TempDir()})
			require.True(t, ok)
			require.NoError(t, err)
			defer a.Close()
			assert.Equal(t, tc.kind, a.Kind)
			require.Len(t, a.Disks, 1)
			d := a.Disks[0]
			assert.Equal(t, tc.disk, d.Name)
			assert.Contains(t, d.Detail, tc.detail)
			got, err := io.ReadAll(io.NewSectionReader(d.R, 0, d.Size))
			require.NoError(t, err)
			assert.Equal(t, disk(), string(got))
		})
	}
}

func TestNotADiskArchive(t *testing.T) {
	for _, b := range [][]byte{
		tarOf(t, [2]string{"etc/os-release", "ID=x"}, [2]string{"disk.raw", "x"}),
		gz(t, tarOf(t, [2]string{"etc/os-release", "ID=x"})),
		[]byte("not a tar at all"),
	} {
		_, ok, err := Open(bytes.NewReader(b), int64(len(b)), Options{})
		assert.False(t, ok)
		assert.NoError(t, err)
	}
}

// TestScratchIsSparse checks that zero blocks take no space in the
// scratch file.
func TestScratchIsSparse(t *testing.T) {
	big := "DATA" + string(make([]byte, 64<<20)) + "DATA"
	b := gz(t, tarOf(t, [2]string{"disk.raw", big}))
	scratch := t.TempDir()
	a, ok, err := Open(bytes.NewReader(b), int64(len(b)), Options{ScratchDir: scratch})
	require.True(t, ok)
	require.NoError(t, err)
	defer a.Close()
	f := a.Disks[0].scratch
	fi, err := f.Stat()
	require.NoError(t, err)
	assert.Equal(t, int64(len(big)), fi.Size())
	assert.Less(t, allocated(fi), int64(1<<20), "the zeros are holes")
	entries, err := os.ReadDir(scratch)
	require.NoError(t, err)
	assert.Empty(t, entries, "the scratch file is unlinked")
}

func TestParseOVF(t *testing.T) {
	refs, err := ParseOVF([]byte(`<Envelope xmlns="http://schemas.dmtf.org/ovf/envelope/1" xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1">
<References><File ovf:id="a" ovf:href="a.vmdk"/><File ovf:id="b" ovf:href="b.vmdk.gz" ovf:compression="gzip"/></References>
<DiskSection><Disk ovf:diskId="1" ovf:fileRef="b"/><Disk ovf:diskId="2"/><Disk ovf:diskId="3" ovf:fileRef="a"/></DiskSection></Envelope>`))
	require.NoError(t, err)
	assert.Equal(t, []OVFDisk{{Href: "b.vmdk.gz", Gzip: true}, {Href: "a.vmdk"}}, refs)
	for _, bad := range []string{"", "<Envelope>", `<Envelope><References><File id="a" href="http://x/y.vmdk"/></References><DiskSection><Disk fileRef="a"/></DiskSection></Envelope>`} {
		_, err := ParseOVF([]byte(bad))
		assert.ErrorIs(t, err, ErrCorrupt, bad)
	}
}

func FuzzParseOVF(f *testing.F) {
	f.Add([]byte(ovfOne))
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = ParseOVF(b) })
}

// FuzzOpen opens disk archives built from fuzzed entries
// (imagetest.Tar over disk, OVF and other names, OVF descriptors plain
// and gzip-referencing, disk contents plain and gzipped) and corrupted by
// fuzzed patches: each tarball plain, gzipped, and gzipped then patched
// (a corrupt stream). Whatever opens, its disks read without a panic.
// The input is the few bytes that build and patch the tarballs, not the
// tarballs (kilobytes of headers left the engine minimizing), and the
// scratch files go to one directory on a tmpfs when there is one.
func FuzzOpen(f *testing.F) {
	names := []string{"disk.raw", "x.ovf", "d.vmdk", "b.vmdk.gz", "sub/d.vmdk", "d2.vmdk", "disk.qcow2", "readme.txt", "../disk.raw", "sub"}
	ovfGzip := `<Envelope xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1"><References><File ovf:id="a" ovf:href="d.vmdk"/><File ovf:id="b" ovf:href="b.vmdk.gz" ovf:compression="gzip"/></References><DiskSection><Disk ovf:fileRef="b"/><Disk ovf:fileRef="a"/></DiskSection></Envelope>`
	small := "BOOT" + string(make([]byte, 3*4096)) + "ROOT"
	bodies := []string{"BOOT", ovfOne, ovfGzip, small, string(gz(f, []byte(small))), "", `<Envelope>`}
	scratch := f.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "amilint-archive-fuzz-")
		require.NoError(f, err)
		f.Cleanup(func() { os.RemoveAll(dir) })
		scratch = dir
	}
	// entry: name, kind, body (see imagetest.Tar).
	entry := func(name, kind, body byte) []byte { return []byte{name, kind, body} }
	f.Add(entry(0, 0, 0), []byte{})                                                       // disk.raw
	f.Add(append(entry(1, 0, 1), entry(2, 0, 3)...), []byte{})                            // x.ovf, d.vmdk
	f.Add(append(append(entry(1, 8, 2), entry(2, 0, 3)...), entry(3, 0, 4)...), []byte{}) // OVA with a gzipped disk
	f.Add(append(entry(0, 16, 3), entry(0, 0, 0)...), []byte{0x01, 0x02, 0, 0, 0xff})     // a later disk.raw, patched
	f.Add(append(entry(1, 0, 1), entry(2, 6, 3)...), []byte{})                            // a disk cut short
	zw := gzip.NewWriter(io.Discard)
	f.Fuzz(func(t *testing.T, spec, patch []byte) {
		plain := imagetest.Tar(spec, names, bodies)
		var zb bytes.Buffer
		zw.Reset(&zb)
		_, err := zw.Write(plain)
		require.NoError(t, err)
		require.NoError(t, zw.Close())
		for _, in := range [][]byte{
			imagetest.Patch(slices.Clone(plain), 4096, patch),
			imagetest.Patch(slices.Clone(plain), 4096, nil),
			zb.Bytes(),
			imagetest.Patch(slices.Clone(zb.Bytes()), 4096, patch),
		} {
			a, ok, err := Open(bytes.NewReader(in), int64(len(in)), Options{ScratchDir: scratch})
			if ok && err == nil {
				for _, d := range a.Disks {
					_, _ = io.Copy(io.Discard, io.NewSectionReader(d.R, 0, min(d.Size, 1<<20)))
				}
				a.Close()
			}
		}
	})
}

// TestOVFParsedOnce: a compressed OVA's OVF descriptor was parsed again
// for every member with a disk image's name, referenced or not: 200 empty
// members after a 4 MB descriptor (a 435 KB .ova.gz) took 45 s to open,
// and an archive holds up to 65,536 members (4 hours). Each way an OVA is
// read parses it once.
func TestOVFParsedOnce(t *testing.T) {
	parses := 0
	t.Cleanup(func() { parseOVF = ParseOVF })
	parseOVF = func(b []byte) ([]OVFDisk, error) {
		parses++
		return ParseOVF(b)
	}
	var ovf strings.Builder
	ovf.WriteString(`<Envelope xmlns:ovf="http://schemas.dmtf.org/ovf/envelope/1"><References><File ovf:id="f" ovf:href="d.vmdk"/>`)
	for i := range 100 {
		fmt.Fprintf(&ovf, `<File ovf:id="x%d" ovf:href="x%d.raw"/>`, i, i)
	}
	ovf.WriteString(`</References><DiskSection><Disk ovf:fileRef="f"/></DiskSection></Envelope>`)
	files := [][2]string{{"x.ovf", ovf.String()}}
	for i := range 100 {
		files = append(files, [2]string{fmt.Sprintf("m%d.raw", i), ""})
	}
	tarball := tarOf(t, append(files, [2]string{"d.vmdk", disk()})...)
	for name, b := range map[string][]byte{"compressed": gz(t, tarball), "plain": tarball} {
		parses = 0
		a, _, err := Open(bytes.NewReader(b), int64(len(b)), Options{ScratchDir: t.TempDir()})
		require.NoError(t, err, name)
		a.Close()
		assert.Equal(t, 1, parses, "%s: the OVF of an OVA with 101 disk members", name)
	}
}
