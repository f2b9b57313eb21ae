package vdisk_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/disk/vdisk"
	"github.com/amilint/amilint/internal/image/disktest"
)

// bigTree is disktest.Tree with 3 MiB more of incompressible data, so
// that allocated blocks (compressed grains too) fill most of an image file
// and cutting it at a fraction of its size cuts data.
func bigTree(t testing.TB) string {
	dir := disktest.Tree(t)
	blob := make([]byte, 3<<20)
	x := uint64(88172645463325252)
	for i := range blob {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		blob[i] = byte(x)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "usr/share/blob/more"), blob, 0o644))
	return dir
}

// lastData is the end of the last data block that `qemu-img map` places
// in the file, 0 when the format's map gives no host offsets (vhdx,
// compressed clusters).
func lastData(t testing.TB, img string) int64 {
	var m []struct {
		Length int64  `json:"length"`
		Data   bool   `json:"data"`
		Offset *int64 `json:"offset"`
	}
	require.NoError(t, json.Unmarshal([]byte(disktest.Run(t, "qemu-img", "map", "--output=json", img)), &m))
	var end int64
	for _, e := range m {
		if e.Data && e.Offset != nil {
			end = max(end, *e.Offset+e.Length)
		}
	}
	return end
}

// cutPoint names where a test truncates the image img whose content is
// b. A cut inside a structure (a block qemu-img map places there, the
// footer) loses that structure even where its bytes are zero; other cuts
// must lose non-zero bytes for the test to mean anything.
type cutPoint struct {
	name       string
	at         func(t testing.TB, img string, b []byte) int64
	structural bool
}

var (
	cutFraction = func(num, den int64) cutPoint {
		return cutPoint{fmt.Sprintf("%d/%d", num, den), func(_ testing.TB, _ string, b []byte) int64 { return int64(len(b)) * num / den }, false}
	}
	// cutLastData cuts the last byte of the last allocated data block.
	cutLastData = cutPoint{"just before the end of the last allocated block", func(t testing.TB, img string, _ []byte) int64 {
		end := lastData(t, img)
		require.Positive(t, end, "qemu-img map gives host offsets")
		return end - 1
	}, true}
	// cutLastNonZero cuts the file's last non-zero byte and what follows.
	cutLastNonZero = cutPoint{"at the last non-zero byte", func(_ testing.TB, _ string, b []byte) int64 {
		return int64(len(bytes.TrimRight(b, "\x00")) - 1)
	}, false}
	// cutFromEnd cuts the last n bytes, where the format says a structure
	// ends the file.
	cutFromEnd = func(name string, n int64) cutPoint {
		return cutPoint{name, func(_ testing.TB, _ string, b []byte) int64 { return int64(len(b)) - n }, true}
	}
)

// TestTruncated builds real images with qemu-img, cuts them at several
// points, and checks that each cut image fails at Open (which is all the
// CLI relies on: a scan reads only the blocks it needs) with ErrCorrupt
// naming the problem, while the whole image opens and reads back equal to
// the raw disk.
func TestTruncated(t *testing.T) {
	raw := disktest.Ext4(t, bigTree(t), "24M")
	want, size := disktest.FileSHA256(t, raw)
	for _, tt := range []struct {
		name   string
		format string
		args   []string
		cuts   []cutPoint
	}{
		{"vhd dynamic", "vpc", []string{"-o", "subformat=dynamic"}, []cutPoint{cutFraction(2, 3), cutFraction(3, 4), cutLastData,
			cutFromEnd("mid-footer", 256), cutFromEnd("without its footer", 512)}},
		{"vhdx", "vhdx", nil, []cutPoint{cutFraction(2, 3), cutFraction(3, 4), cutLastNonZero}},
		{"vhdx 1M blocks", "vhdx", []string{"-o", "block_size=1M"}, []cutPoint{cutFraction(2, 3), cutFraction(3, 4), cutLastNonZero}},
		{"vmdk monolithicSparse", "vmdk", []string{"-o", "subformat=monolithicSparse"}, []cutPoint{cutFraction(2, 3), cutFraction(3, 4),
			cutLastData, cutFromEnd("mid-last-grain", 256)}},
		{"vmdk streamOptimized", "vmdk", []string{"-o", "subformat=streamOptimized"}, []cutPoint{cutFraction(2, 3), cutFraction(3, 4),
			cutLastNonZero}},
		{"qcow2", "qcow2", nil, []cutPoint{cutFraction(2, 3), cutFraction(3, 4), cutLastData}},
		{"qcow2 compressed", "qcow2", []string{"-c"}, []cutPoint{cutFraction(2, 3), cutFraction(3, 4), cutLastNonZero}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			img := disktest.Convert(t, raw, tt.format, tt.args...)
			d, _, _, err := openFile(t, img, vdisk.Options{})
			require.NoError(t, err)
			assert.Equal(t, want, disktest.SHA256(t, d, size), "the whole image reads back")
			b, err := os.ReadFile(img)
			require.NoError(t, err)
			for _, c := range tt.cuts {
				t.Run(c.name, func(t *testing.T) {
					at := c.at(t, img, b)
					require.Less(t, at, int64(len(b)))
					if !c.structural {
						require.NotEmpty(t, bytes.Trim(b[at:], "\x00"), "the cut at %d of %d loses data", at, len(b))
					}
					p := filepath.Join(t.TempDir(), "cut-"+filepath.Base(img))
					require.NoError(t, os.WriteFile(p, b[:at], 0o644))
					_, _, _, err := openFile(t, p, vdisk.Options{})
					require.ErrorIs(t, err, vdisk.ErrCorrupt, "cut at %d of %d", at, len(b))
					assert.Regexp(t, `truncated image|past the end`, err.Error())
				})
			}
		})
	}
}
