package vdisk_test

import (
	"bytes"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/disk/vdisk"
	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/integrity"
)

// seeds converts a small patterned raw disk with qemu-img once per
// conversion and adds the results to f's corpus, each whole and truncated
// (at 2/3, at 3/4, and less its last 256 bytes).
func seeds(f *testing.F, convs ...[]string) {
	raw := filepath.Join(f.TempDir(), "seed.raw")
	b := make([]byte, 128<<10)
	for i := 0; i < len(b); i += 4096 {
		copy(b[i:], "amilint seed block")
		b[i+100] = byte(i >> 12)
	}
	require.NoError(f, os.WriteFile(raw, b, 0o644))
	for _, c := range convs {
		img, err := os.ReadFile(disktest.Convert(f, raw, c[0], c[1:]...))
		require.NoError(f, err)
		addTruncated(f, img)
	}
}

// addTruncated adds img and cut copies of it to f's corpus.
func addTruncated(f *testing.F, img []byte) {
	f.Add(img)
	n := len(img)
	for _, cut := range []int{n * 2 / 3, n * 3 / 4, n - 256} {
		if cut > 0 {
			f.Add(img[:cut])
		}
	}
}

// fuzzDisk runs open on arbitrary bytes and reads a spread of blocks:
// errors are fine, panics and hangs are not.
func fuzzDisk(f *testing.F, open func(r io.ReaderAt, size int64) (vdisk.Disk, error)) {
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := open(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		buf := make([]byte, 4096)
		for i := range int64(32) {
			_, _ = d.ReadAt(buf, d.Size()/32*i)
		}
	})
}

// The seeds are tiny real images made by qemu-img when the test runs; each
// format has its own target so one format's large seeds (VHD and VHDX
// allocate whole megabyte blocks) do not slow the others' fuzzing.

func FuzzOpen(f *testing.F) {
	f.Add([]byte("QFI\xfb\x00\x00\x00\x03"))
	f.Add([]byte("KDMV\x01\x00\x00\x00"))
	f.Add(append(make([]byte, 512), "conectix"...))
	f.Add(make([]byte, 4096))
	fuzzDisk(f, func(r io.ReaderAt, size int64) (vdisk.Disk, error) {
		d, _, err := vdisk.Open(r, size, vdisk.Options{})
		return d, err
	})
}

func FuzzQCOW2(f *testing.F) {
	fuzzPatched(f, func(r io.ReaderAt, size int64) (vdisk.Disk, error) { return vdisk.OpenQCOW2(r, size, nil) },
		[]string{"qcow2", "-o", "cluster_size=512"},
		[]string{"qcow2", "-c", "-o", "cluster_size=4096,compat=0.10"},
		[]string{"qcow2", "-c", "-o", "cluster_size=4096,compression_type=zstd"})
}

func FuzzVMDK(f *testing.F) {
	fuzzPatched(f, vdisk.OpenVMDK, []string{"vmdk", "-o", "subformat=monolithicSparse"}, []string{"vmdk", "-o", "subformat=streamOptimized"})
}

// fuzzPatched fuzzes images qemu-img makes once per process from a
// 128 KiB disk (convs are its arguments): the fuzzed input is which image,
// how much of its end to cut and which bytes to change (offset and value
// pairs, half of them in the first 64 KiB: headers and tables), so the
// seeds are a few bytes and every execution starts from a real image.
func fuzzPatched(f *testing.F, open func(r io.ReaderAt, size int64) (vdisk.Disk, error), convs ...[]string) {
	raw := filepath.Join(f.TempDir(), "seed.raw")
	b := make([]byte, 128<<10)
	for i := 0; i < len(b); i += 4096 {
		copy(b[i:], "amilint seed block")
		b[i+100] = byte(i >> 12)
	}
	require.NoError(f, os.WriteFile(raw, b, 0o644))
	var images [][]byte
	for _, c := range convs {
		img, err := os.ReadFile(disktest.Convert(f, raw, c[0], c[1:]...))
		require.NoError(f, err)
		images = append(images, img)
	}
	for i, img := range images {
		f.Add(uint8(i), uint32(0), []byte{})
		f.Add(uint8(i), uint32(0), []byte{0x10, 0x00, 0x00, 0x00, 0xff, 0x30, 0x00, 0x00, 0x00, 0x01})
		f.Add(uint8(i), uint32(len(img)/3), []byte{})
		f.Add(uint8(i), uint32(256), []byte{0x00, 0x02, 0x00, 0x00, 0x80})
	}
	f.Fuzz(func(t *testing.T, which uint8, cut uint32, patch []byte) {
		base := images[int(which)%len(images)]
		size := int64(len(base)) - int64(cut)%int64(len(base))
		data := bytes.Clone(base[:size])
		for i := 0; i+5 <= len(patch) && i < 5*64; i += 5 {
			off := int64(binary.LittleEndian.Uint32(patch[i:]))
			if off&1 == 0 {
				off %= min(size, 64<<10)
			} else {
				off %= size
			}
			data[off] = patch[i+4]
		}
		d, err := open(bytes.NewReader(data), size)
		if err != nil {
			return
		}
		buf := make([]byte, 4096)
		for i := range int64(32) {
			_, _ = d.ReadAt(buf, d.Size()/32*i)
		}
	})
}

func FuzzVHD(f *testing.F) {
	seeds(f, []string{"vpc", "-o", "subformat=dynamic"}, []string{"vpc", "-o", "subformat=fixed"})
	diffSeed(f, "vpc")
	fuzzDisk(f, func(r io.ReaderAt, size int64) (vdisk.Disk, error) { return vdisk.OpenVHD(r, size, zeroDisk{}) })
}

// FuzzVHDX fuzzes VHDX images too big to be seeds (a VHDX file is
// megabytes however small its disk): a plain and a differencing one are
// built once per process, and the fuzzed input is which one, how much of
// its end to cut and which bytes to change (offset and value pairs, most
// in the headers, region tables, log and metadata at the start).
func FuzzVHDX(f *testing.F) {
	raw := filepath.Join(f.TempDir(), "seed.raw")
	b := make([]byte, 128<<10)
	for i := 0; i < len(b); i += 4096 {
		copy(b[i:], "amilint seed block")
	}
	require.NoError(f, os.WriteFile(raw, b, 0o644))
	var images [][]byte
	img, err := os.ReadFile(disktest.Convert(f, raw, "vhdx", "-o", "block_size=1M"))
	require.NoError(f, err)
	images = append(images, img)
	dir := f.TempDir()
	final, parent := filepath.Join(dir, "final.raw"), filepath.Join(dir, "parent.raw")
	require.NoError(f, os.WriteFile(final, b, 0o644))
	require.NoError(f, os.WriteFile(parent, make([]byte, len(b)), 0o644))
	child, _ := disktest.Differencing(f, "vhdx", parent, final, disktest.DiffOptions{VHDBlockSize: 4096})
	img, err = os.ReadFile(child)
	require.NoError(f, err)
	images = append(images, img)
	for i := range images {
		f.Add(uint8(i), uint32(0), []byte{})
		f.Add(uint8(i), uint32(0), []byte{0x00, 0x00, 0x01, 0x00, 0x55}) // the first header
		f.Add(uint8(i), uint32(256), []byte{0x10, 0x00, 0x03, 0x00, 0x01, 0x00, 0x00, 0x10, 0x00, 0xff})
		f.Add(uint8(i), uint32(len(images[i])/3), []byte{})
	}
	f.Fuzz(func(t *testing.T, which uint8, cut uint32, patch []byte) {
		base := images[int(which)%len(images)]
		size := int64(len(base)) - int64(cut)%int64(len(base))
		data := bytes.Clone(base[:size])
		for i := 0; i+5 <= len(patch) && i < 5*64; i += 5 {
			off := int64(binary.LittleEndian.Uint32(patch[i:]))
			if off&1 == 0 {
				off %= min(size, 4<<20) // headers, log, metadata
			} else {
				off %= size
			}
			data[off] = patch[i+4]
		}
		// Strictly, then leniently: a lenient read takes a header, log
		// or table whose checksum fails as stored, and so reaches the
		// checks behind the checksums.
		buf := make([]byte, 4096)
		if d, err := vdisk.OpenVHDX(bytes.NewReader(data), size, zeroDisk{}); err == nil {
			for i := range int64(32) {
				_, _ = d.ReadAt(buf, d.Size()/32*i)
			}
		}
		var log integrity.Log
		if d, _, err := vdisk.Open(bytes.NewReader(data), size, vdisk.Options{Backing: zeroDisk{}, Check: integrity.Lenient(&log)}); err == nil {
			for i := range int64(32) {
				_, _ = d.ReadAt(buf, d.Size()/32*i)
			}
		}
	})
}

// zeroDisk is a parent of any size that reads as zeros, so fuzzing reaches
// a differencing disk's bitmaps.
type zeroDisk struct{}

func (zeroDisk) Size() int64 { return 1 << 50 }
func (zeroDisk) ReadAt(p []byte, _ int64) (int, error) {
	clear(p)
	return len(p), nil
}

// diffSeed adds a differencing disk (see disktest.Differencing) whose
// parent is a zeroed 128 KiB disk to f's corpus.
func diffSeed(f *testing.F, format string) {
	dir := f.TempDir()
	final, parent := filepath.Join(dir, "final.raw"), filepath.Join(dir, "parent.raw")
	b := make([]byte, 128<<10)
	for i := 0; i < len(b); i += 1536 {
		copy(b[i:], "amilint differencing seed")
	}
	require.NoError(f, os.WriteFile(final, b, 0o644))
	require.NoError(f, os.WriteFile(parent, make([]byte, len(b)), 0o644))
	child, _ := disktest.Differencing(f, format, parent, final, disktest.DiffOptions{VHDBlockSize: 4096})
	img, err := os.ReadFile(child)
	require.NoError(f, err)
	addTruncated(f, img)
}
