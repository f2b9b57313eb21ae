package lvm_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/disk/lvm"
	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/integrity"
)

// pv builds a 64 MiB LVM2 PV with the real lvm2 tools (see disktest.LVM).
func pv(t testing.TB) (string, []disktest.LVSegment) {
	path := disktest.Blank(t, 64<<20)
	return path, disktest.LVM(t, path, 0, 64<<20)
}

func open(t *testing.T, path string) (*lvm.VG, error) {
	f, err := os.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	require.NoError(t, err)
	return lvm.Open(f, fi.Size())
}

func TestLinearLV(t *testing.T) {
	path, segs := pv(t)
	fsImg := disktest.Ext4(t, disktest.Tree(t), "24M")
	disktest.FillLV(t, path, 0, segs, fsImg)
	want, size := disktest.FileSHA256(t, fsImg)

	vg, err := open(t, path)
	require.NoError(t, err)
	require.Len(t, vg.LVs, 2)
	assert.Equal(t, "root", vg.LVs[0].Name)
	assert.Equal(t, "swap", vg.LVs[1].Name)
	assert.Equal(t, int64(3<<20), vg.LVs[1].Size())
	root := vg.LVs[0]
	require.NoError(t, root.Err())
	assert.Equal(t, size, root.Size())
	assert.Equal(t, want, disktest.SHA256(t, root, size))
}

// lvmCRC is LVM's checksum, computed independently of the package's.
func lvmCRC(b []byte) uint32 {
	c := uint32(0xf597a6cf)
	for _, x := range b {
		c ^= uint32(x)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ 0xedb88320
			} else {
				c >>= 1
			}
		}
	}
	return c
}

// rewrite replaces the metadata text of the first metadata area and fixes
// its checksums, so only the new content can be at fault.
func rewrite(t testing.TB, b []byte, edit func(string) string) []byte {
	le := binary.LittleEndian
	mda := int64(4096) // lvm2's default first metadata area
	require.Equal(t, " LVM2 x[5A%r0N*>", string(b[mda+4:mda+20]))
	loc := b[mda+40:]
	off, n := int64(le.Uint64(loc)), int64(le.Uint64(loc[8:]))
	text := edit(string(b[mda+off : mda+off+n]))
	copy(b[mda+off:], text)
	le.PutUint64(loc[8:], uint64(len(text)))
	le.PutUint32(loc[16:], lvmCRC([]byte(text)))
	le.PutUint32(b[mda:], lvmCRC(b[mda+4:mda+512]))
	return b
}

func TestCorrupt(t *testing.T) {
	path, _ := pv(t)
	orig, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, crc32.ChecksumIEEE(nil), uint32(0)) // keep hash/crc32 honest
	for _, tt := range []struct {
		name   string
		damage func([]byte) []byte
		lvErr  error // when set, Open succeeds and root fails with it
	}{
		{"label checksum", func(b []byte) []byte { b[512+40]++; return b }, nil},
		{"metadata header", func(b []byte) []byte { b[4096+30]++; return b }, nil},
		{"metadata text checksum", func(b []byte) []byte {
			off := binary.LittleEndian.Uint64(b[4096+40:])
			b[4096+off+20]++ // inside the current text
			return b
		}, nil},
		{"truncated", func(b []byte) []byte { return b[:4096+300] }, nil},
		{"segment past the end", func(b []byte) []byte {
			return rewrite(t, b, func(s string) string {
				return strings.Replace(s, `"pv0", 0`, `"pv0", 900000`, 1)
			})
		}, lvm.ErrCorrupt},
		{"pe_start wraps to the PV's start", func(b []byte) []byte {
			return rewrite(t, b, func(s string) string {
				require.Contains(t, s, "pe_start = 2048")
				// 2^55 sectors of 512 bytes wrap to byte 0.
				return strings.Replace(s, "pe_start = 2048", "pe_start = 36028797018963968", 1)
			})
		}, nil},
		{"segment's PV extent wraps to the PV's start", func(b []byte) []byte {
			return rewrite(t, b, func(s string) string {
				require.Contains(t, s, "extent_size = 2048")
				// 2^23 extents of 2^32 sectors wrap to byte 0.
				s = strings.Replace(s, "extent_size = 2048", "extent_size = 4294967296", 1)
				return strings.Replace(s, `"pv0", 0`, `"pv0", 8388608`, 1)
			})
		}, nil},
		{"unbalanced braces", func(b []byte) []byte {
			return rewrite(t, b, func(s string) string { return strings.Replace(s, "}", "", 1) })
		}, nil},
		{"striped without its stripe size", func(b []byte) []byte {
			return rewrite(t, b, func(s string) string { return strings.Replace(s, "stripe_count = 1", "stripe_count = 2", 1) })
		}, nil},
		{"stripes fewer than stripe_count", func(b []byte) []byte {
			return rewrite(t, b, func(s string) string {
				return strings.Replace(s, "stripe_count = 1", "stripe_count = 2\nstripe_size = 128", 1)
			})
		}, nil},
		{"stripe on a PV missing from the image", func(b []byte) []byte {
			return rewrite(t, b, func(s string) string {
				return strings.Replace(s, "stripe_count = 1\n\nstripes = [\n\"pv0\", 0\n]",
					"stripe_count = 2\nstripe_size = 128\n\nstripes = [\n\"pv0\", 0,\n\"pv7\", 0\n]", 1)
			})
		}, lvm.ErrUnsupported},
		{"a section given twice", func(b []byte) []byte {
			// Each name listed loaded the section of that name again:
			// 14 KB of "swap{}" before a swap of 4096 segments made
			// 2002 LVs and allocated 1.7 GB; a 1 MiB metadata area
			// holds 80,000 of them.
			return rewrite(t, b, func(s string) string {
				return strings.Replace(s, "\nswap {", strings.Repeat("\nswap {}", 3)+"\nswap {", 1)
			})
		}, nil},
		{"thin", func(b []byte) []byte {
			return rewrite(t, b, func(s string) string { return strings.Replace(s, `type = "striped"`, `type = "thin"`, 1) })
		}, lvm.ErrUnsupported},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "bad.raw")
			require.NoError(t, os.WriteFile(p, tt.damage(bytes.Clone(orig)), 0o644))
			vg, err := open(t, p)
			if tt.lvErr == nil {
				require.ErrorIs(t, err, lvm.ErrCorrupt)
				return
			}
			require.NoError(t, err)
			_, err = vg.LVs[0].ReadAt(make([]byte, 4096), 0)
			require.ErrorIs(t, err, tt.lvErr)
		})
	}
}

// TestChecksums damages each structure LVM checksums: a strict read fails
// with the line naming it; a lenient one logs the line and reads the PV as
// stored, the same volume group when only the stored checksum is damaged.
func TestChecksums(t *testing.T) {
	path, _ := pv(t)
	orig, err := os.ReadFile(path)
	require.NoError(t, err)
	want, err := lvm.Open(bytes.NewReader(orig), int64(len(orig)))
	require.NoError(t, err)
	le := binary.LittleEndian
	textOff := 4096 + int64(le.Uint64(orig[4096+40:]))
	comment := bytes.Index(orig[textOff:], []byte("# Generated by LVM2"))
	require.Positive(t, comment)
	for _, tc := range []struct {
		name string
		at   int64 // a byte whose damage changes nothing else
		want string
	}{
		{"label", 512 + 16, "lvm: label in sector 1 fails its checksum"},
		{"metadata area header", 4096, "lvm: metadata area header at byte 4096 fails its checksum"},
		{"metadata text", textOff + int64(comment) + 3, fmt.Sprintf("lvm: metadata text at byte %d fails its checksum", textOff)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(orig)
			b[tc.at] ^= 0x55
			_, err := lvm.ReadPVWith(bytes.NewReader(b), int64(len(b)), integrity.Strict(""))
			require.ErrorIs(t, err, integrity.ErrChecksum)
			require.ErrorIs(t, err, lvm.ErrCorrupt)
			m, ok := integrity.As(err)
			require.True(t, ok)
			assert.Equal(t, tc.want, m.Error())

			var log integrity.Log
			pv, err := lvm.ReadPVWith(bytes.NewReader(b), int64(len(b)), integrity.Lenient(&log))
			require.NoError(t, err)
			assert.Equal(t, []string{tc.want}, log.Lines())
			vg, err := lvm.Assemble([]*lvm.PV{pv})
			require.NoError(t, err)
			assert.Equal(t, want.Name, vg.Name)
			require.Len(t, vg.LVs, len(want.LVs))
			for i := range vg.LVs {
				assert.Equal(t, want.LVs[i].Size(), vg.LVs[i].Size())
			}
		})
	}
}

// patchPV applies fuzzed offset and value pairs to a copy of base,
// most of them in the first 64 KiB (label, metadata area header, text).
func patchPV(base, patch []byte) []byte {
	data := bytes.Clone(base)
	for i := 0; i+5 <= len(patch) && i < 5*64; i += 5 {
		off := int64(binary.LittleEndian.Uint32(patch[i:]))
		if off&1 == 0 {
			off %= min(int64(len(data)), 64<<10)
		} else {
			off %= int64(len(data))
		}
		data[off] = patch[i+4]
	}
	return data
}

// FuzzOpen runs the label, metadata area and text parsers over a real PV
// changed by the fuzzed bytes: the first MiB of a PV the lvm2 tools made
// (label and metadata), built here once per process, not carried as a
// seed; the seeds are a few bytes each. The PV is read strictly, then
// leniently, which takes a metadata area whose checksum fails as stored
// and so reaches the checks behind the checksums.
func FuzzOpen(f *testing.F) {
	path, _ := pv(f)
	b, err := os.ReadFile(path)
	require.NoError(f, err)
	base := b[:1<<20]
	f.Add([]byte{})
	f.Add([]byte{0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x12, 0x00, 0x00, 0x7b})
	f.Add([]byte{0x40, 0x12, 0x00, 0x00, 0x30})
	f.Fuzz(func(t *testing.T, patch []byte) {
		data := patchPV(base, patch)
		var log integrity.Log
		_, _ = lvm.ReadPVWith(bytes.NewReader(data), int64(len(data)), integrity.Lenient(&log))
		vg, err := lvm.Open(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return
		}
		for _, lv := range vg.LVs {
			_, _ = lv.ReadAt(make([]byte, 512), lv.Size()/2)
		}
	})
}

// TestLenientMetadataLength: a metadata area header whose text length
// has its top bit set fails its checksum; read leniently, as stored, it
// is a corrupt area, not a slice of negative length.
func TestLenientMetadataLength(t *testing.T) {
	path, _ := pv(t)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	binary.LittleEndian.PutUint64(b[4096+40+8:], 1<<63|0x10)
	var log integrity.Log
	_, err = lvm.ReadPVWith(bytes.NewReader(b), int64(len(b)), integrity.Lenient(&log))
	require.ErrorIs(t, err, lvm.ErrCorrupt)
	assert.Contains(t, err.Error(), "outside its area")
	assert.Equal(t, []string{"lvm: metadata area header at byte 4096 fails its checksum"}, log.Lines())
}

// TestMetadataRingWraps moves the current metadata text so that it runs
// off the end of the metadata area and continues after its header, as lvm2
// writes it once the ring fills up.
func TestMetadataRingWraps(t *testing.T) {
	path, _ := pv(t)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	want, err := open(t, path)
	require.NoError(t, err)

	le := binary.LittleEndian
	mda := int64(4096)
	size := int64(le.Uint64(b[mda+32:]))
	loc := b[mda+40:]
	off, n := int64(le.Uint64(loc)), int64(le.Uint64(loc[8:]))
	text := bytes.Clone(b[mda+off : mda+off+n])
	clear(b[mda+512 : mda+size])
	newOff := size - 100
	copy(b[mda+newOff:mda+size], text[:100])
	copy(b[mda+512:], text[100:])
	le.PutUint64(loc, uint64(newOff))
	le.PutUint32(b[mda:], lvmCRC(b[mda+4:mda+512]))
	p := filepath.Join(t.TempDir(), "wrapped.raw")
	require.NoError(t, os.WriteFile(p, b, 0o644))

	got, err := open(t, p)
	require.NoError(t, err)
	assert.Equal(t, want.Name, got.Name)
	require.Len(t, got.LVs, len(want.LVs))
	for i := range want.LVs {
		assert.Equal(t, want.LVs[i].Name, got.LVs[i].Name)
		assert.Equal(t, want.LVs[i].Size(), got.LVs[i].Size())
	}
}

// TestStripedLV reads a root LV striped over two PVs, built with the real
// lvm2 tools: assembled from both PVs, its bytes equal the filesystem
// image's; from one PV alone, it reports the missing PV.
func TestStripedLV(t *testing.T) {
	fsImg := disktest.Ext4(t, disktest.Tree(t), "24M")
	want, size := disktest.FileSHA256(t, fsImg)
	disk := disktest.StripedLVMDisk(t, fsImg)
	f, err := os.Open(disk)
	require.NoError(t, err)
	defer f.Close()
	var pvs []*lvm.PV
	for _, off := range []int64{1 << 20, 45 << 20} {
		r := io.NewSectionReader(f, off, 44<<20)
		require.True(t, lvm.Probe(r, 44<<20))
		pv, err := lvm.ReadPV(r, 44<<20)
		require.NoError(t, err)
		pvs = append(pvs, pv)
	}
	assert.Equal(t, pvs[0].VGID(), pvs[1].VGID())
	vg, err := lvm.Assemble(pvs)
	require.NoError(t, err)
	require.Len(t, vg.LVs, 2)
	root := vg.LVs[0]
	require.Equal(t, "root", root.Name)
	require.NoError(t, root.Err())
	assert.Equal(t, int64(24<<20), root.Size())
	assert.Equal(t, want, disktest.SHA256(t, root, size))
	// Unaligned reads that cross chunk and segment boundaries.
	full := make([]byte, size)
	_, err = root.ReadAt(full, 0)
	require.NoError(t, err)
	for _, off := range []int64{1, 65535, 12<<20 - 7, 3 << 20} {
		b := make([]byte, 200<<10)
		_, err := root.ReadAt(b, off)
		require.NoError(t, err)
		assert.Equal(t, full[off:off+int64(len(b))], b, "at %d", off)
	}

	alone, err := lvm.Assemble(pvs[:1])
	require.NoError(t, err)
	require.ErrorIs(t, alone.LVs[0].Err(), lvm.ErrUnsupported)
	assert.ErrorContains(t, alone.LVs[0].Err(), "not in this image")
	require.NoError(t, alone.LVs[1].Err(), "swap is on the first PV alone")
}

// FuzzAssemble reads the two PVs of a real striped volume group (made by
// the lvm2 tools once per process: the first MiB of each, label and
// metadata) changed by the fuzzed bytes, and assembles them; the seeds
// are a few bytes each.
func FuzzAssemble(f *testing.F) {
	testenv.Root(f, "the lvm2 tools make the striped volume group on loop devices")
	disk := disktest.StripedLVMDisk(f, disktest.Ext4(f, disktest.Tree(f), "24M"))
	b, err := os.ReadFile(disk)
	require.NoError(f, err)
	pvs := [2][]byte{bytes.Clone(b[1<<20 : 2<<20]), bytes.Clone(b[45<<20 : 46<<20])}
	f.Add([]byte{}, []byte{})
	f.Add([]byte{0x00, 0x02, 0x00, 0x00, 0x00}, []byte{0x40, 0x12, 0x00, 0x00, 0x31})
	f.Fuzz(func(t *testing.T, p0, p1 []byte) {
		var got []*lvm.PV
		for i, patch := range [][]byte{p0, p1} {
			data := patchPV(pvs[i], patch)
			pv, err := lvm.ReadPV(bytes.NewReader(data), int64(len(data)))
			if err != nil {
				return
			}
			got = append(got, pv)
		}
		vg, err := lvm.Assemble(got)
		if err != nil {
			return
		}
		for _, lv := range vg.LVs {
			_, _ = lv.ReadAt(make([]byte, 70<<10), lv.Size()/3)
		}
	})
}
