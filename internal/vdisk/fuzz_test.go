package vdisk_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/vdisk"
	"github.com/amilint/amilint/internal/vdisk/imagetest"
)

// FuzzOpen feeds arbitrary bytes to every container reader (chosen by the
// magic, as Open does) and reads a spread of blocks: errors are fine,
// panics and hangs are not. The seeds are tiny real images of each format,
// made by qemu-img when the test runs.
func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	raw := filepath.Join(dir, "seed.raw")
	b := make([]byte, 256<<10)
	for i := 0; i < len(b); i += 4096 {
		copy(b[i:], "amilint seed block")
		b[i+100] = byte(i >> 12)
	}
	require.NoError(f, os.WriteFile(raw, b, 0o644))
	f.Add(b[:4096])
	for _, c := range []struct {
		format string
		args   []string
	}{
		{"qcow2", []string{"-o", "cluster_size=512"}},
		{"qcow2", []string{"-c", "-o", "cluster_size=4096,compat=0.10"}},
		{"qcow2", []string{"-c", "-o", "cluster_size=4096,compression_type=zstd"}},
		{"vmdk", []string{"-o", "subformat=monolithicSparse"}},
		{"vmdk", []string{"-o", "subformat=streamOptimized"}},
		{"vpc", []string{"-o", "subformat=dynamic"}},
		{"vpc", []string{"-o", "subformat=fixed"}},
		{"vhdx", []string{"-o", "block_size=1M"}},
	} {
		img, err := os.ReadFile(imagetest.Convert(f, raw, c.format, c.args...))
		require.NoError(f, err)
		f.Add(img)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, _, err := vdisk.Open(bytes.NewReader(data), int64(len(data)), vdisk.Options{})
		if err != nil {
			return
		}
		buf := make([]byte, 4096)
		for i := range int64(32) {
			_, _ = d.ReadAt(buf, d.Size()/32*i)
		}
	})
}
