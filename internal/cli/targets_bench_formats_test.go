package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/target"
)

// BenchmarkOpenFormats measures opening the 4 GiB bench disk (see images)
// converted to the other container formats and finding its root: the open
// checks every allocation table entry against the file's size (and reads
// every VMDK grain table), so this is where that cost shows.
func BenchmarkOpenFormats(b *testing.B) {
	_, raw, _, _ := images(b)
	for _, tc := range []struct {
		name, format string
		args         []string
	}{
		{"vmdk", "vmdk", []string{"-o", "subformat=monolithicSparse"}},
		{"vmdk-stream", "vmdk", []string{"-o", "subformat=streamOptimized"}},
		{"vhd", "vpc", []string{"-o", "subformat=dynamic"}},
		{"vhdx", "vhdx", nil},
	} {
		b.Run(tc.name, func(b *testing.B) {
			img := convertOnce(b, raw, tc.name+"."+tc.format, tc.format, tc.args...)
			var read int64
			for b.Loop() {
				im, err := target.Open(context.Background(), img, target.Options{})
				require.NoError(b, err)
				_, err = im.FS.ReadFile("etc/os-release")
				require.NoError(b, err)
				read = im.BytesRead()
				im.Close()
			}
			report(b, img, read)
		})
	}
}

// convertOnce converts raw with qemu-img into name beside it, unless an
// earlier run did.
func convertOnce(b *testing.B, raw, name, format string, args ...string) string {
	p := filepath.Join(filepath.Dir(raw), name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	disktest.Run(b, "qemu-img", append(append([]string{"convert", "-f", "raw", "-O", format}, args...), raw, p+".tmp")...)
	require.NoError(b, os.Rename(p+".tmp", p))
	return p
}
