package vdisk_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/disk/vdisk"
	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/integrity"
)

func openFile(t *testing.T, path string, opt vdisk.Options) (vdisk.Disk, vdisk.Format, *vdisk.Counter, error) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	require.NoError(t, err)
	c := vdisk.NewCounter(f)
	d, format, err := vdisk.Open(c, fi.Size(), opt)
	return d, format, c, err
}

// TestFormats converts one real ext4 image to every container format with
// qemu-img and checks that the guest bytes read back equal the original.
func TestFormats(t *testing.T) {
	raw := disktest.Ext4(t, disktest.Tree(t), "64M")
	want, size := disktest.FileSHA256(t, raw)
	tests := []struct {
		name   string
		format string
		args   []string
		want   vdisk.Format
	}{
		{"raw", "raw", nil, vdisk.Raw},
		{"qcow2 v2", "qcow2", []string{"-o", "compat=0.10"}, vdisk.QCOW2},
		{"qcow2 v3", "qcow2", []string{"-o", "compat=1.1"}, vdisk.QCOW2},
		{"qcow2 v3 4k clusters", "qcow2", []string{"-o", "cluster_size=4096"}, vdisk.QCOW2},
		{"qcow2 v3 2M clusters", "qcow2", []string{"-o", "cluster_size=2M"}, vdisk.QCOW2},
		{"qcow2 compressed zlib", "qcow2", []string{"-c"}, vdisk.QCOW2},
		{"qcow2 v2 compressed", "qcow2", []string{"-c", "-o", "compat=0.10"}, vdisk.QCOW2},
		{"qcow2 compressed zstd", "qcow2", []string{"-c", "-o", "compression_type=zstd"}, vdisk.QCOW2},
		{"vmdk monolithicSparse", "vmdk", []string{"-o", "subformat=monolithicSparse"}, vdisk.VMDK},
		{"vmdk streamOptimized", "vmdk", []string{"-o", "subformat=streamOptimized"}, vdisk.VMDK},
		{"vhd dynamic", "vpc", []string{"-o", "subformat=dynamic"}, vdisk.VHD},
		{"vhd fixed", "vpc", []string{"-o", "subformat=fixed"}, vdisk.VHD},
		{"vhdx dynamic", "vhdx", nil, vdisk.VHDX},
		{"vhdx 1M blocks", "vhdx", []string{"-o", "block_size=1M"}, vdisk.VHDX},
		{"vhdx fixed", "vhdx", []string{"-o", "subformat=fixed"}, vdisk.VHDX},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := raw
			if tt.format != "raw" {
				img = disktest.Convert(t, raw, tt.format, tt.args...)
			}
			d, format, _, err := openFile(t, img, vdisk.Options{})
			require.NoError(t, err)
			assert.Equal(t, tt.want, format)
			require.GreaterOrEqual(t, d.Size(), size)
			assert.Equal(t, want, disktest.SHA256(t, d, size))
			// The ext4 superblock magic, read through the container.
			var m [2]byte
			_, err = d.ReadAt(m[:], 1080)
			require.NoError(t, err)
			assert.Equal(t, []byte{0x53, 0xef}, m[:])
			// Reads past the end are short with io.EOF, as io.ReaderAt says.
			n, err := d.ReadAt(make([]byte, 10), d.Size()-4)
			assert.Equal(t, 4, n)
			assert.ErrorIs(t, err, io.EOF)
		})
	}
}

func TestBackingFile(t *testing.T) {
	raw := disktest.Ext4(t, disktest.Tree(t), "16M")
	want, size := disktest.FileSHA256(t, raw)
	base := disktest.Convert(t, raw, "qcow2")
	child := filepath.Join(t.TempDir(), "child.qcow2")
	disktest.Run(t, "qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", "qcow2", child)

	_, _, _, err := openFile(t, child, vdisk.Options{})
	require.ErrorIs(t, err, vdisk.ErrBacking)
	assert.Contains(t, err.Error(), base)

	parent, _, _, err := openFile(t, base, vdisk.Options{})
	require.NoError(t, err)
	d, _, _, err := openFile(t, child, vdisk.Options{Backing: parent})
	require.NoError(t, err)
	assert.Equal(t, want, disktest.SHA256(t, d, size))

	// A backing file given for an image that names none is refused, not
	// ignored.
	for _, img := range []string{base, raw, disktest.Convert(t, raw, "vpc", "-o", "subformat=dynamic"), disktest.Convert(t, raw, "vhdx")} {
		_, _, _, err = openFile(t, img, vdisk.Options{Backing: parent})
		require.ErrorIs(t, err, vdisk.ErrNoBacking, img)
	}
}

// TestCounter shows that reading one block of a big sparse image reads a
// tiny fraction of the file.
func TestCounter(t *testing.T) {
	raw := disktest.Ext4(t, disktest.Tree(t), "64M")
	img := disktest.Convert(t, raw, "qcow2")
	d, _, c, err := openFile(t, img, vdisk.Options{})
	require.NoError(t, err)
	_, err = d.ReadAt(make([]byte, 4096), 4096)
	require.NoError(t, err)
	assert.Less(t, c.Bytes(), int64(256<<10))
	assert.Positive(t, c.Reads())
}

// mutate copies an image, lets f damage the copy and returns its path.
func mutate(t *testing.T, src string, f func(b []byte) []byte) string {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	dst := filepath.Join(t.TempDir(), "bad-"+filepath.Base(src))
	require.NoError(t, os.WriteFile(dst, f(b), 0o644))
	return dst
}

// readAll reads the whole guest disk, returning the first error.
func readAll(d vdisk.Disk) error {
	_, err := io.Copy(io.Discard, io.NewSectionReader(d, 0, d.Size()))
	return err
}

func TestCorrupt(t *testing.T) {
	raw := disktest.Ext4(t, disktest.Tree(t), "16M")
	qcow := disktest.Convert(t, raw, "qcow2")
	vmdk := disktest.Convert(t, raw, "vmdk", "-o", "subformat=monolithicSparse")
	stream := disktest.Convert(t, raw, "vmdk", "-o", "subformat=streamOptimized")
	vhd := disktest.Convert(t, raw, "vpc", "-o", "subformat=dynamic")
	vhdx := disktest.Convert(t, raw, "vhdx")
	be, le := binary.BigEndian, binary.LittleEndian
	l1 := func(b []byte) int64 { return int64(be.Uint64(b[40:])) }
	gd := func(b []byte) int64 { return int64(le.Uint64(b[56:])) * 512 }

	tests := []struct {
		name    string
		src     string
		damage  func(b []byte) []byte
		atOpen  bool  // the error shows at Open, not at a read
		wantErr error // default ErrCorrupt
	}{
		{"qcow2 truncated header", qcow, func(b []byte) []byte { return b[:40] }, true, nil},
		{"qcow2 truncated data", qcow, func(b []byte) []byte { return b[:len(b)/2] }, true, nil},
		{"qcow2 L1 points at itself", qcow, func(b []byte) []byte {
			be.PutUint64(b[l1(b):], uint64(l1(b))|1<<63)
			return b
		}, true, nil},
		{"qcow2 L1 past EOF", qcow, func(b []byte) []byte {
			be.PutUint64(b[l1(b):], uint64(len(b)+1<<20))
			return b
		}, true, nil},
		{"qcow2 L1 table offset past EOF", qcow, func(b []byte) []byte {
			be.PutUint64(b[40:], 1<<40)
			return b
		}, true, nil},
		{"qcow2 L1 too small", qcow, func(b []byte) []byte { be.PutUint32(b[36:], 0); return b }, true, nil},
		{"qcow2 bad cluster bits", qcow, func(b []byte) []byte { be.PutUint32(b[20:], 40); return b }, true, nil},
		{"qcow2 encrypted", qcow, func(b []byte) []byte { be.PutUint32(b[32:], 1); return b }, true, vdisk.ErrUnsupported},
		{"vmdk grain table points at the directory", vmdk, func(b []byte) []byte {
			le.PutUint32(b[gd(b):], uint32(gd(b)/512))
			return b
		}, true, nil},
		{"vmdk grain directory past EOF", vmdk, func(b []byte) []byte {
			le.PutUint64(b[56:], 1<<30)
			return b
		}, true, nil},
		{"vmdk stream truncated", stream, func(b []byte) []byte { return b[:len(b)/2] }, true, nil},
		{"vmdk stream footer missing", stream, func(b []byte) []byte {
			le.PutUint64(b[56:], 0xffffffffffffffff)
			return b[:len(b)-1024]
		}, true, nil},
		{"vmdk stream grain garbage", stream, func(b []byte) []byte {
			// Zero the compressed payload of every grain after the first.
			for i := 64 << 10; i < len(b)-4096; i++ {
				b[i] = 0xAA
			}
			return b
		}, true, nil},
		{"vhd footer checksum", vhd, func(b []byte) []byte { b[len(b)-512+48]++; b[48]++; return b }, true, nil},
		{"vhd BAT past EOF", vhd, func(b []byte) []byte {
			hdr := int64(be.Uint64(b[16:]))
			bat := be.Uint64(b[hdr+16:])
			for i := range 8 {
				be.PutUint32(b[bat+uint64(4*i):], 0x7ffffff0)
			}
			return b
		}, true, nil},
		{"vhdx headers", vhdx, func(b []byte) []byte { b[64<<10+20]++; b[128<<10+20]++; return b }, true, nil},
		{"vhdx region tables", vhdx, func(b []byte) []byte { b[192<<10+20]++; b[256<<10+20]++; return b }, true, nil},
		{"vhdx truncated", vhdx, func(b []byte) []byte { return b[:200<<10] }, true, nil},
		{"wrong magic qcow2", qcow, func(b []byte) []byte { return append([]byte("QFI\xfb\x00\x00\x00\x09"), make([]byte, 100)...) }, true, vdisk.ErrUnsupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.wantErr
			if want == nil {
				want = vdisk.ErrCorrupt
			}
			d, _, _, err := openFile(t, mutate(t, tt.src, tt.damage), vdisk.Options{})
			if tt.atOpen {
				require.ErrorIs(t, err, want)
				return
			}
			require.NoError(t, err)
			err = readAll(d)
			require.ErrorIs(t, err, want)
		})
	}
}

// TestVMDKFooter reads a streamOptimized VMDK whose header defers the
// grain directory to the footer, as streaming writers (VMware's) do.
func TestVMDKFooter(t *testing.T) {
	raw := disktest.Ext4(t, disktest.Tree(t), "16M")
	want, size := disktest.FileSHA256(t, raw)
	stream := disktest.Convert(t, raw, "vmdk", "-o", "subformat=streamOptimized")
	img := mutate(t, stream, func(b []byte) []byte {
		// Append a footer marker, the footer (the header with the real
		// grain directory offset) and the end-of-stream marker, then
		// point the header at the footer.
		marker := make([]byte, 512)
		binary.LittleEndian.PutUint64(marker, 1)
		binary.LittleEndian.PutUint32(marker[12:], 3)
		b = append(b, marker...)
		b = append(b, b[:512]...)
		b = append(b, make([]byte, 512)...)
		binary.LittleEndian.PutUint64(b[56:], 0xffffffffffffffff)
		return b
	})
	d, _, _, err := openFile(t, img, vdisk.Options{})
	require.NoError(t, err)
	assert.Equal(t, want, disktest.SHA256(t, d, size))
}

// TestVMDKDescriptor checks that a text descriptor (monolithicFlat) is
// refused with the extent to open instead, and that the flat extent reads
// as the raw disk it is.
func TestVMDKDescriptor(t *testing.T) {
	raw := disktest.Ext4(t, disktest.Tree(t), "16M")
	want, size := disktest.FileSHA256(t, raw)
	dir := t.TempDir()
	desc := filepath.Join(dir, "disk.vmdk")
	disktest.Run(t, "qemu-img", "convert", "-f", "raw", "-O", "vmdk", "-o", "subformat=monolithicFlat", raw, desc)
	_, format, _, err := openFile(t, desc, vdisk.Options{})
	require.ErrorIs(t, err, vdisk.ErrUnsupported)
	assert.Equal(t, vdisk.VMDK, format)
	assert.ErrorContains(t, err, "disk-flat.vmdk")
	d, format, _, err := openFile(t, filepath.Join(dir, "disk-flat.vmdk"), vdisk.Options{})
	require.NoError(t, err)
	assert.Equal(t, vdisk.Raw, format)
	assert.Equal(t, want, disktest.SHA256(t, d, size))
}

func TestDetect(t *testing.T) {
	for _, tt := range []struct {
		head []byte
		want vdisk.Format
	}{
		{[]byte("QFI\xfb\x00\x00\x00\x03"), vdisk.QCOW2},
		{[]byte("KDMV\x03\x00\x00\x00"), vdisk.VMDK},
		{[]byte("vhdxfile"), vdisk.VHDX},
		{[]byte("conectix"), vdisk.VHD},
		{[]byte("\x00\x00\x00\x00\x00\x00\x00\x00"), vdisk.Raw},
		{[]byte("ab"), vdisk.Raw},
	} {
		b := append(tt.head, make([]byte, 1024)...)
		assert.Equal(t, tt.want, vdisk.Detect(bytes.NewReader(b), int64(len(b))), "%q", tt.head)
	}
}

// TestConcurrentReads reads one image from several goroutines at once: the
// table and cluster caches are shared (run with -race to check them).
func TestConcurrentReads(t *testing.T) {
	raw := disktest.Ext4(t, disktest.Tree(t), "16M")
	want, size := disktest.FileSHA256(t, raw)
	for _, img := range []string{
		disktest.Convert(t, raw, "qcow2", "-c", "-o", "cluster_size=4096"),
		disktest.Convert(t, raw, "vmdk", "-o", "subformat=streamOptimized"),
	} {
		d, _, _, err := openFile(t, img, vdisk.Options{})
		require.NoError(t, err)
		got := make(chan string, 4)
		for range 4 {
			go func() {
				h := disktest.SHA256(t, d, size)
				got <- h
			}()
		}
		for range 4 {
			assert.Equal(t, want, <-got)
		}
	}
}

// failingAt reads "vhdxfile" at offset 0 and fails every other read, as a
// remote disk whose blocks cannot be fetched would.
type failingAt struct{ err error }

func (f failingAt) ReadAt(p []byte, off int64) (int, error) {
	if off == 0 {
		return copy(p, "vhdxfile"), nil
	}
	return 0, f.err
}

func TestVHDXKeepsReadErrors(t *testing.T) {
	boom := errors.New("block fetch failed")
	_, err := vdisk.OpenVHDX(failingAt{boom}, 4<<20, nil)
	require.Error(t, err)
	assert.ErrorIs(t, err, boom, "an I/O error is reported as itself")
	assert.NotErrorIs(t, err, vdisk.ErrCorrupt, "not as a corrupt image")
}

// TestVHDXChecksums damages the copies of the VHDX headers and region
// tables: one copy failing is read from the other, with a warning; both
// failing is the mismatch line, or, leniently, logged and the first copy
// read as stored. Payload blocks pointing into the BAT or at one another
// are refused.
func TestVHDXChecksums(t *testing.T) {
	raw := disktest.Ext4(t, disktest.Tree(t), "16M")
	want, err := os.ReadFile(raw)
	require.NoError(t, err)
	vhdx := disktest.Convert(t, raw, "vhdx")
	le := binary.LittleEndian
	orig, err := os.ReadFile(vhdx)
	require.NoError(t, err)
	// The BAT region, from the region table.
	var batOff int64
	for i := range int(le.Uint32(orig[192<<10+8:])) {
		e := orig[192<<10+16+32*i:]
		if le.Uint32(e) == 0x2DC27766 {
			batOff = int64(le.Uint64(e[16:]))
		}
	}
	require.NotZero(t, batOff)
	// The higher-sequence header is the current one.
	cur, other := int64(64<<10), int64(128<<10)
	if le.Uint64(orig[128<<10+8:]) > le.Uint64(orig[64<<10+8:]) {
		cur, other = other, cur
	}
	name := func(off int64) string {
		if off == 64<<10 {
			return "header 1 at 64 KiB"
		}
		return "header 2 at 128 KiB"
	}
	for _, tc := range []struct {
		name   string
		damage func(b []byte)
		warn   string // for one bad copy
		fail   string // for a mismatch in every copy
	}{
		{"current header", func(b []byte) { b[cur+40]++ }, "vhdx: " + name(cur) + " fails its checksum: " + name(other) + " was read", ""},
		{"other header", func(b []byte) { b[other+40]++ }, "vhdx: " + name(other) + " fails its checksum: " + name(cur) + " was read", ""},
		{"first region table", func(b []byte) { b[192<<10+100]++ }, "vhdx: region table 1 at 192 KiB fails its checksum: region table 2 at 256 KiB was read", ""},
		{"both headers", func(b []byte) { b[cur+40]++; b[other+40]++ }, "", "vhdx: header 1 at 64 KiB fails its checksum"},
		{"both region tables", func(b []byte) { b[192<<10+100]++; b[256<<10+100]++ }, "", "vhdx: region table 1 at 192 KiB fails its checksum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mutate(t, vhdx, func(b []byte) []byte { tc.damage(b); return b })
			d, _, _, err := openFile(t, p, vdisk.Options{})
			if tc.fail != "" {
				require.ErrorIs(t, err, integrity.ErrChecksum)
				require.ErrorIs(t, err, vdisk.ErrCorrupt)
				m, ok := integrity.As(err)
				require.True(t, ok)
				assert.Equal(t, tc.fail, m.Error())
				var log integrity.Log
				d, _, _, err = openFile(t, p, vdisk.Options{Check: integrity.Lenient(&log)})
				require.NoError(t, err)
				assert.Equal(t, []string{tc.fail}, log.Lines())
			} else {
				require.NoError(t, err)
				assert.Equal(t, []string{tc.warn}, vdisk.Warnings(d))
			}
			got := make([]byte, len(want))
			_, err = d.ReadAt(got, 0)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(want, got), "the guest disk reads the same")
		})
	}

	// A BAT entry pointing into the BAT, or at another entry's block.
	var first, second int = -1, -1
	for i := range 64 {
		if e := le.Uint64(orig[batOff+8*int64(i):]); e&7 == 6 {
			if first < 0 {
				first = i
			} else if second < 0 {
				second = i
			}
		}
	}
	require.True(t, first >= 0 && second >= 0, "two present blocks")
	for name, entry := range map[string]uint64{
		"into the BAT":       uint64(batOff)&^(1<<20-1) | 6,
		"at another's block": le.Uint64(orig[batOff+8*int64(first):]),
	} {
		t.Run(name, func(t *testing.T) {
			p := mutate(t, vhdx, func(b []byte) []byte {
				le.PutUint64(b[batOff+8*int64(second):], entry)
				return b
			})
			_, _, _, err := openFile(t, p, vdisk.Options{})
			require.ErrorIs(t, err, vdisk.ErrCorrupt)
			assert.Contains(t, err.Error(), "overlap")
		})
	}
}

// TestQCOW2Refcounts points an L2 entry of a qcow2 image made by qemu-img
// at another data cluster, and at the refcount table: the guest disk would
// read another block's bytes. qemu-img check calls both corrupt (its
// refcount check); so does the open.
func TestQCOW2Refcounts(t *testing.T) {
	raw := disktest.Ext4(t, disktest.Tree(t), "16M")
	qcow := disktest.Convert(t, raw, "qcow2")
	orig, err := os.ReadFile(qcow)
	require.NoError(t, err)
	be := binary.BigEndian
	l1 := int64(be.Uint64(orig[40:]))
	l2 := int64(be.Uint64(orig[l1:]) & 0x00fffffffffffe00)
	require.NotZero(t, l2)
	var data []int // indexes of allocated entries in the first L2 table
	for i := range 512 {
		if e := be.Uint64(orig[l2+8*int64(i):]); e&0x00fffffffffffe00 != 0 && e&(1<<62) == 0 {
			data = append(data, i)
		}
	}
	require.GreaterOrEqual(t, len(data), 2)
	refTable := be.Uint64(orig[48:])
	for name, target := range map[string]uint64{
		"another data cluster": be.Uint64(orig[l2+8*int64(data[0]):]) & 0x00fffffffffffe00,
		"the refcount table":   refTable,
	} {
		t.Run(name, func(t *testing.T) {
			p := mutate(t, qcow, func(b []byte) []byte {
				e := be.Uint64(b[l2+8*int64(data[1]):])
				be.PutUint64(b[l2+8*int64(data[1]):], e&^0x00fffffffffffe00|target)
				return b
			})
			out, err := exec.Command("qemu-img", "check", "-f", "qcow2", p).CombinedOutput()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, "qemu-img check: %s", out)
			assert.Equal(t, 2, ee.ExitCode(), "qemu-img check sees corruption: %s", out)
			_, _, _, err = openFile(t, p, vdisk.Options{})
			require.ErrorIs(t, err, vdisk.ErrCorrupt)
			assert.Contains(t, err.Error(), "refcount")
		})
	}
}

// TestVHDXLogReplay writes, to the spec, a log entry into a VHDX made by
// qemu-img, as a file not closed cleanly holds one: a data descriptor
// rewriting 4 KiB of a payload block and a zero descriptor clearing
// another 4 KiB, numbered, checksummed, the headers naming the log. The
// reader applies it in memory; qemu-img check -r all applies it for real:
// both give the same guest disk. With one byte of the entry damaged the
// checksum fails: neither applies it.
func TestVHDXLogReplay(t *testing.T) {
	raw := disktest.Ext4(t, disktest.Tree(t), "16M")
	clean, err := os.ReadFile(raw)
	require.NoError(t, err)
	img := disktest.Convert(t, raw, "vhdx")
	b, err := os.ReadFile(img)
	require.NoError(t, err)
	le := binary.LittleEndian
	// The current header, its log, the BAT.
	cur := int64(64 << 10)
	if le.Uint64(b[128<<10+8:]) > le.Uint64(b[cur+8:]) {
		cur = 128 << 10
	}
	logLen, logOff := int64(le.Uint32(b[cur+68:])), int64(le.Uint64(b[cur+72:]))
	require.NotZero(t, logLen)
	var batOff int64
	for i := range int(le.Uint32(b[192<<10+8:])) {
		if e := b[192<<10+16+32*i:]; le.Uint32(e) == 0x2DC27766 {
			batOff = int64(le.Uint64(e[16:]))
		}
	}
	var block int64
	for i := int64(0); block == 0; i += 8 {
		if e := le.Uint64(b[batOff+i:]); e&7 == 6 {
			block = int64(e>>20) << 20
		}
	}
	pattern := make([]byte, 4096)
	for i := range pattern {
		pattern[i] = byte(i*7 + 3)
	}
	const seq = 42
	guid := []byte("amilint-log-guid")
	entry := make([]byte, 8192)
	copy(entry, "loge")
	le.PutUint32(entry[8:], 8192)
	le.PutUint64(entry[16:], seq)
	le.PutUint32(entry[24:], 2)
	copy(entry[32:48], guid)
	le.PutUint64(entry[48:], uint64(len(b)))
	le.PutUint64(entry[56:], uint64(len(b)))
	d := entry[64:]
	copy(d, "desc")
	copy(d[4:8], pattern[4092:])
	copy(d[8:16], pattern[:8])
	le.PutUint64(d[16:], uint64(block+64<<10))
	le.PutUint64(d[24:], seq)
	z := entry[96:]
	copy(z, "zero")
	le.PutUint64(z[8:], 4096)
	le.PutUint64(z[16:], uint64(block+128<<10))
	le.PutUint64(z[24:], seq)
	s := entry[4096:]
	copy(s, "data")
	le.PutUint32(s[4:], seq>>32)
	copy(s[8:4092], pattern[8:4092])
	le.PutUint32(s[4092:], seq&0xffffffff)
	le.PutUint32(entry[4:], crc32.Checksum(entry, crc32.MakeTable(crc32.Castagnoli)))
	copy(b[logOff:], entry)
	for _, h := range []int64{64 << 10, 128 << 10} {
		hdr := b[h : h+4096]
		copy(hdr[48:64], guid)
		le.PutUint32(hdr[4:], 0)
		le.PutUint32(hdr[4:], crc32.Checksum(hdr, crc32.MakeTable(crc32.Castagnoli)))
	}
	guest := func(t *testing.T, p string) []byte {
		d, _, _, err := openFile(t, p, vdisk.Options{})
		require.NoError(t, err)
		g := make([]byte, d.Size())
		_, err = d.ReadAt(g, 0)
		require.NoError(t, err)
		return g
	}
	replayed := func(t *testing.T, p string) []byte {
		c := filepath.Join(t.TempDir(), "copy.vhdx")
		disktest.Run(t, "cp", p, c)
		out, err := exec.Command("qemu-img", "check", "-r", "all", "-f", "vhdx", c).CombinedOutput()
		var ee *exec.ExitError
		if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 3) {
			require.NoError(t, err, "qemu-img check -r all: %s", out)
		}
		r := filepath.Join(t.TempDir(), "replayed.raw")
		disktest.Run(t, "qemu-img", "convert", "-f", "vhdx", "-O", "raw", c, r)
		g, err := os.ReadFile(r)
		require.NoError(t, err)
		return g
	}

	dirty := filepath.Join(t.TempDir(), "dirty.vhdx")
	require.NoError(t, os.WriteFile(dirty, b, 0o644))
	got := guest(t, dirty)
	assert.False(t, bytes.Equal(clean, got), "the entry changed the guest disk")
	assert.True(t, bytes.Equal(replayed(t, dirty), got), "the reader's replay is qemu's")
	dk, _, _, err := openFile(t, dirty, vdisk.Options{})
	require.NoError(t, err)
	require.Len(t, vdisk.Warnings(dk), 1)
	assert.Contains(t, vdisk.Warnings(dk)[0], "1 entries of its log")

	// A damaged entry fails its checksum: not applied, by either.
	b[logOff+4096+100] ^= 1
	damaged := filepath.Join(t.TempDir(), "damaged.vhdx")
	require.NoError(t, os.WriteFile(damaged, b, 0o644))
	got = guest(t, damaged)
	assert.True(t, bytes.Equal(clean, got), "a damaged entry is not applied")
	assert.True(t, bytes.Equal(replayed(t, damaged), got), "nor by qemu")
}

// TestVHDXUnknownRequiredMetadata: a metadata item marked required that
// the reader does not know is refused by its GUID, as qemu and the
// specification refuse it; one not marked required is skipped.
func TestVHDXUnknownRequiredMetadata(t *testing.T) {
	raw := disktest.Ext4(t, disktest.Tree(t), "16M")
	vhdx := disktest.Convert(t, raw, "vhdx")
	le := binary.LittleEndian
	orig, err := os.ReadFile(vhdx)
	require.NoError(t, err)
	var metaOff int64
	for i := range int(le.Uint32(orig[192<<10+8:])) {
		e := orig[192<<10+16+32*i:]
		if le.Uint32(e) == 0x8B7CA206 { // the metadata region's GUID
			metaOff = int64(le.Uint64(e[16:]))
		}
	}
	require.NotZero(t, metaOff)
	// The page 83 item (BECA12AB-…): read by no one here, so only the
	// required flag decides.
	page83 := -1
	for i := range int(le.Uint16(orig[metaOff+10:])) {
		if le.Uint32(orig[metaOff+32+32*int64(i):]) == 0xBECA12AB {
			page83 = i
		}
	}
	require.GreaterOrEqual(t, page83, 0, "qemu-img writes a page 83 item")
	at := metaOff + 32 + 32*int64(page83)
	for _, required := range []bool{true, false} {
		p := mutate(t, vhdx, func(b []byte) []byte {
			b[at] ^= 0xFF // another GUID
			flags := le.Uint32(b[at+24:]) &^ 4
			if required {
				flags |= 4
			}
			le.PutUint32(b[at+24:], flags)
			return b
		})
		_, _, _, err := openFile(t, p, vdisk.Options{})
		if required {
			require.ErrorIs(t, err, vdisk.ErrUnsupported)
			assert.Contains(t, err.Error(), "vhdx required metadata item 54")
			continue
		}
		assert.NoError(t, err, "an unknown item not marked required is skipped")
	}
}
