package disktest

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"unicode/utf16"

	"github.com/stretchr/testify/require"
)

// qemu-img cannot create VHD or VHDX differencing disks ("Backing file not
// supported for file format 'vpc'" / "'vhdx'"), and no Debian package
// writes them, so Differencing writes the child to Microsoft's
// specifications (Virtual Hard Disk Image Format Specification; [MS-VHDX]
// v4.0) over a parent that qemu-img makes. python3-libvhdi (libyal's
// reader, in Debian) checks the result independently: see LibvhdiSHA256.

// Differencing makes a differencing disk in format ("vpc" or "vhdx") over
// a parent that qemu-img converts from the raw image parentRaw, such that
// the child with its parent reads as the raw image final (parentRaw and
// final have the same size). The child holds, sector by sector, where
// final differs from parentRaw: its bitmaps mark exactly those sectors and
// every other sector of an allocated block holds garbage, so a reader that
// ignores the bitmaps reads wrong bytes. It returns the child's and the
// parent's paths; the parent is named "parent.vhd" or "parent.vhdx" next
// to the child, as the child's locators record it.
func Differencing(t testing.TB, format, parentRaw, final string, opt DiffOptions) (child, parent string) {
	t.Helper()
	dir := t.TempDir()
	ext := map[string]string{"vpc": "vhd", "vhdx": "vhdx"}[format]
	require.NotEmpty(t, ext, "format %s", format)
	parent = filepath.Join(dir, "parent."+ext)
	child = filepath.Join(dir, "child."+ext)
	Run(t, "qemu-img", "convert", "-f", "raw", "-O", format, parentRaw, parent)
	var info struct {
		VirtualSize int64 `json:"virtual-size"`
	}
	grain := max(int64(opt.Grain), 1)
	require.NoError(t, json.Unmarshal([]byte(Run(t, "qemu-img", "info", "--output=json", "-f", format, parent)), &info))
	size := info.VirtualSize
	old, err := os.ReadFile(parentRaw)
	require.NoError(t, err)
	want, err := os.ReadFile(final)
	require.NoError(t, err)
	require.Equal(t, len(old), len(want), "parent and final raw images differ in size")
	require.LessOrEqual(t, int64(len(old)), size)
	pad := func(b []byte) []byte { return append(b, make([]byte, size-int64(len(b)))...) }
	old, want = pad(old), pad(want)
	pb, err := os.ReadFile(parent)
	require.NoError(t, err)
	var out []byte
	if format == "vpc" {
		bs := opt.VHDBlockSize
		if bs == 0 {
			bs = 2 << 20
		}
		out = vhdChild(t, pb, old, want, size, bs, grain)
	} else {
		out = vhdxChild(t, pb, old, want, size, grain)
	}
	require.NoError(t, os.WriteFile(child, out, 0o644))
	return child, parent
}

// DiffOptions shape a differencing disk.
type DiffOptions struct {
	// Grain is how many sectors are marked together (0 or 1: each sector
	// alone). libvhdi 20210425 misreads VHD bitmap bytes that mix set and
	// clear bits (it shifts without masking: every sector after the first
	// set bit of a byte counts as present), so comparisons with it use a
	// grain of 8.
	Grain int
	// VHDBlockSize is a VHD child's block size (0: 2 MiB, the default of
	// Microsoft's tools); small blocks make small fuzz seeds.
	VHDBlockSize int64
}

// changed lists, per block of bs bytes, which sectors of sector bytes
// differ between old and want, in runs of grain sectors marked together.
func changed(old, want []byte, bs, sector, grain int64) map[int64][]bool {
	out := map[int64][]bool{}
	g := sector * grain
	for off := int64(0); off < int64(len(want)); off += g {
		if bytes.Equal(old[off:off+g], want[off:off+g]) {
			continue
		}
		blk := off / bs
		if out[blk] == nil {
			out[blk] = make([]bool, bs/sector)
		}
		for s := range grain {
			out[blk][off%bs/sector+s] = true
		}
	}
	return out
}

func utf16le(s string) []byte {
	var b []byte
	for _, c := range utf16.Encode([]rune(s)) {
		b = binary.LittleEndian.AppendUint16(b, c)
	}
	return b
}

func vhdSum(b []byte) uint32 {
	var s uint32
	for _, c := range b {
		s += uint32(c)
	}
	return ^s
}

// vhdChild writes a VHD differencing disk (disk type 4) with blocks of bs
// bytes (a one-sector bitmap each).
func vhdChild(t testing.TB, parent, old, want []byte, size, bs, grain int64) []byte {
	be := binary.BigEndian
	const sector = 512
	require.True(t, bs >= 4096 && bs <= 2<<20 && bs&(bs-1) == 0, "VHD block size %d", bs)
	pfoot := parent[len(parent)-512:]
	require.Equal(t, "conectix", string(pfoot[:8]))
	blocks := (size + bs - 1) / bs
	batLen := (blocks*4 + 511) / 512 * 512
	diff := changed(old, want, bs, sector, grain)

	foot := make([]byte, 512)
	copy(foot, "conectix")
	be.PutUint32(foot[8:], 2)
	be.PutUint32(foot[12:], 0x00010000)
	be.PutUint64(foot[16:], 512)
	be.PutUint32(foot[24:], be.Uint32(pfoot[24:])+1)
	copy(foot[28:], "amlt")
	be.PutUint32(foot[32:], 0x00010000)
	copy(foot[36:], "Wi2k")
	be.PutUint64(foot[40:], uint64(size))
	be.PutUint64(foot[48:], uint64(size))
	copy(foot[56:60], pfoot[56:60]) // geometry
	be.PutUint32(foot[60:], 4)      // differencing
	copy(foot[68:84], "amilint-child-id")
	be.PutUint32(foot[64:], vhdSum(foot))

	rel, abs := utf16le(`.\parent.vhd`), utf16le(`C:\images\parent.vhd`)
	locOff := int64(1536) + batLen
	hdr := make([]byte, 1024)
	copy(hdr, "cxsparse")
	be.PutUint64(hdr[8:], ^uint64(0))
	be.PutUint64(hdr[16:], 1536)
	be.PutUint32(hdr[24:], 0x00010000)
	be.PutUint32(hdr[28:], uint32(blocks))
	be.PutUint32(hdr[32:], uint32(bs))
	copy(hdr[40:56], pfoot[68:84]) // parent's unique id
	copy(hdr[56:60], pfoot[24:28]) // parent's time stamp
	for i, c := range utf16.Encode([]rune("parent.vhd")) {
		be.PutUint16(hdr[64+2*i:], c)
	}
	for i, l := range []struct {
		code string
		data []byte
	}{{"W2ru", rel}, {"W2ku", abs}} {
		e := hdr[576+24*i:]
		copy(e, l.code)
		be.PutUint32(e[4:], 1) // sectors of data space
		be.PutUint32(e[8:], uint32(len(l.data)))
		be.PutUint64(e[16:], uint64(locOff+int64(i)*512))
	}
	be.PutUint32(hdr[36:], vhdSum(hdr))

	img := append([]byte{}, foot...)
	img = append(img, hdr...)
	bat := make([]byte, batLen)
	for i := range bat {
		bat[i] = 0xff
	}
	img = append(img, bat...)
	loc := make([]byte, 1024)
	copy(loc, rel)
	copy(loc[512:], abs)
	img = append(img, loc...)
	for blk := range blocks {
		marks := diff[blk]
		if marks == nil {
			continue
		}
		be.PutUint32(img[1536+4*blk:], uint32(len(img)/512))
		bitmap := make([]byte, 512)
		data := bytes.Repeat([]byte{0xcc}, int(bs))
		for s, m := range marks {
			if m {
				bitmap[s/8] |= 0x80 >> (s % 8)
				copy(data[s*sector:], want[blk*bs+int64(s)*sector:blk*bs+int64(s+1)*sector])
			}
		}
		img = append(img, bitmap...)
		img = append(img, data...)
	}
	return append(img, foot...)
}

// vhdxGUIDBytes is the on-disk form of a textual GUID.
func vhdxGUIDBytes(s string) []byte {
	var raw []byte
	for i := 0; i < len(s); i++ {
		if s[i] == '-' {
			continue
		}
		var v byte
		fmt.Sscanf(s[i:i+2], "%02x", &v)
		raw = append(raw, v)
		i++
	}
	return []byte{raw[3], raw[2], raw[1], raw[0], raw[5], raw[4], raw[7], raw[6],
		raw[8], raw[9], raw[10], raw[11], raw[12], raw[13], raw[14], raw[15]}
}

// vhdxGUIDString is the textual form of an on-disk GUID, in braces.
func vhdxGUIDString(b []byte) string {
	le := binary.LittleEndian
	return fmt.Sprintf("{%08x-%04x-%04x-%x-%x}", le.Uint32(b), le.Uint16(b[4:]), le.Uint16(b[6:]), b[8:10], b[10:16])
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// vhdxChild writes a VHDX differencing disk with 1 MiB blocks and 512 byte
// sectors: changed blocks are partially present (fully present when every
// sector changed), the others not present.
func vhdxChild(t testing.TB, parent, old, want []byte, size, grain int64) []byte {
	le := binary.LittleEndian
	const bs, sector, mib = 1 << 20, 512, 1 << 20
	// The parent's current header: the valid one with the higher sequence.
	var dataWrite []byte
	var seq uint64
	for _, off := range []int{64 << 10, 128 << 10} {
		h := parent[off : off+4096]
		if string(h[:4]) == "head" && (dataWrite == nil || le.Uint64(h[8:]) > seq) {
			dataWrite, seq = h[32:48], le.Uint64(h[8:])
		}
	}
	require.NotNil(t, dataWrite, "parent has no VHDX header")
	blocks := (size + bs - 1) / bs
	ratio := int64(1<<23) * sector / bs
	chunks := (blocks + ratio - 1) / ratio
	entries := chunks * (ratio + 1)
	batLen := (entries*8 + mib - 1) / mib * mib
	diff := changed(old, want, bs, sector, grain)

	img := make([]byte, 3*mib+batLen)
	copy(img, "vhdxfile")
	copy(img[8:], utf16le("amilint imagetest"))
	for i, off := range []int{64 << 10, 128 << 10} {
		h := img[off : off+4096]
		copy(h, "head")
		le.PutUint64(h[8:], uint64(i+1))
		copy(h[16:32], "amilint-filewrit")
		copy(h[32:48], "amilint-datawrit")
		le.PutUint16(h[66:], 1)
		le.PutUint32(h[68:], mib)
		le.PutUint64(h[72:], mib)
		le.PutUint32(h[4:], crc32.Checksum(h, castagnoli))
	}
	for _, off := range []int{192 << 10, 256 << 10} {
		r := img[off : off+64<<10]
		copy(r, "regi")
		le.PutUint32(r[8:], 2)
		copy(r[16:], vhdxGUIDBytes("2DC27766-F623-4200-9D64-115E9BFD4A08")) // BAT
		le.PutUint64(r[32:], 3*mib)
		le.PutUint32(r[40:], uint32(batLen))
		le.PutUint32(r[44:], 1)
		copy(r[48:], vhdxGUIDBytes("8B7CA206-4790-4B9A-B8FE-575F050F886E")) // metadata
		le.PutUint64(r[64:], 2*mib)
		le.PutUint32(r[72:], mib)
		le.PutUint32(r[76:], 1)
		le.PutUint32(r[4:], crc32.Checksum(r, castagnoli))
	}

	// The parent locator: header, entries, then UTF-16LE keys and values.
	kv := [][2]string{
		{"parent_linkage", vhdxGUIDString(dataWrite)},
		{"relative_path", `.\parent.vhdx`},
		{"absolute_win32_path", `C:\images\parent.vhdx`},
	}
	loc := make([]byte, 20+12*len(kv))
	copy(loc, vhdxGUIDBytes("B04AEFB7-D19E-4A81-B789-25B8E9445913"))
	le.PutUint16(loc[18:], uint16(len(kv)))
	for i, p := range kv {
		k, v := utf16le(p[0]), utf16le(p[1])
		e := loc[20+12*i:]
		le.PutUint32(e, uint32(len(loc)))
		le.PutUint16(e[8:], uint16(len(k)))
		loc = append(loc, k...)
		e = loc[20+12*i:]
		le.PutUint32(e[4:], uint32(len(loc)))
		le.PutUint16(e[10:], uint16(len(v)))
		loc = append(loc, v...)
	}
	u32 := func(v uint32) []byte { return le.AppendUint32(nil, v) }
	items := []struct {
		id    string
		data  []byte
		flags uint32 // IsUser 1, IsVirtualDisk 2, IsRequired 4
	}{
		{"CAA16737-FA36-4D43-B3B6-33F0AA44E76B", append(u32(bs), u32(2)...), 4}, // file parameters, HasParent
		{"2FA54224-CD1B-4876-B211-5DBED83BF4B8", le.AppendUint64(nil, uint64(size)), 6},
		{"BECA12AB-B2E6-4523-93EF-C309E000C746", []byte("amilint-vdisk-id"), 6},
		{"8141BF1D-A96F-4709-BA47-F233A8FAAB5F", u32(sector), 6},
		{"CDA348C7-445D-4471-9CC9-E9885251C556", u32(sector), 6},
		{"A8D35F2D-B30B-454D-ABF7-D3D84834AB0C", loc, 4},
	}
	meta := img[2*mib : 3*mib]
	copy(meta, "metadata")
	le.PutUint16(meta[10:], uint16(len(items)))
	at := 64 << 10
	for i, it := range items {
		e := meta[32+32*i:]
		copy(e, vhdxGUIDBytes(it.id))
		le.PutUint32(e[16:], uint32(at))
		le.PutUint32(e[20:], uint32(len(it.data)))
		le.PutUint32(e[24:], it.flags)
		copy(meta[at:], it.data)
		at += (len(it.data) + 7) / 8 * 8
	}

	bat := make([]byte, batLen) // copied in at the end: img grows
	// One sector bitmap block per chunk, then the payload blocks.
	bitmaps := make([][]byte, chunks)
	for c := range chunks {
		bitmaps[c] = make([]byte, mib)
	}
	for blk := range blocks {
		marks := diff[blk]
		if marks == nil {
			continue
		}
		off := int64(len(img))
		data := bytes.Repeat([]byte{0xcc}, bs)
		all := true
		bm := bitmaps[blk/ratio][blk%ratio*(bs/sector/8):]
		for s, m := range marks {
			all = all && m
			if m {
				bm[s/8] |= 1 << (s % 8)
				copy(data[s*sector:], want[blk*bs+int64(s)*sector:blk*bs+int64(s+1)*sector])
			}
		}
		state := uint64(7) // partially present
		if all {
			state = 6
		}
		le.PutUint64(bat[(blk+blk/ratio)*8:], uint64(off)|state)
		img = append(img, data...)
	}
	for c := range chunks {
		off := int64(len(img))
		le.PutUint64(bat[(c*(ratio+1)+ratio)*8:], uint64(off)|6) // SB_BLOCK_PRESENT
		img = append(img, bitmaps[c]...)
	}
	copy(img[3*mib:], bat)
	return img
}

// LibvhdiSHA256 reads the guest disk of a VHD or VHDX child over its parent
// with libyal's libvhdi (python3-libvhdi), an implementation independent of
// amilint's, and returns the hex sha256 of its first n bytes.
func LibvhdiSHA256(t testing.TB, child, parent string, n int64) string {
	t.Helper()
	script := `
import hashlib, sys, pyvhdi
p = pyvhdi.file(); p.open(sys.argv[2])
c = pyvhdi.file(); c.open(sys.argv[1]); c.set_parent(p)
n = int(sys.argv[3]); h = hashlib.sha256(); off = 0
while off < n:
    b = c.read_buffer_at_offset(min(1 << 20, n - off), off)
    if not b: raise SystemExit("short read at %d" % off)
    h.update(b); off += len(b)
print(h.hexdigest())
`
	out := Run(t, "/usr/bin/python3", "-c", script, child, parent, fmt.Sprint(n))
	return string(bytes.TrimSpace([]byte(out)))
}
