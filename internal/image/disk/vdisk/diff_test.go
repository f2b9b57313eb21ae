package vdisk_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/disk/vdisk"
	"github.com/amilint/amilint/internal/image/disktest"
)

// damaged copies the raw image src and overwrites, in the copy, whole
// blocks and scattered single sectors, so that a differencing child must
// restore both full and partial blocks.
func damaged(t *testing.T, src string) string {
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	for i := 0; i < 3<<20 && i < len(b); i++ { // whole blocks at the start
		b[i] = 0
	}
	for off := 5 << 20; off+512 <= len(b) && off < 12<<20; off += 7 * 512 { // every 7th sector
		for i := range 512 {
			b[off+i] = 0xee
		}
	}
	p := filepath.Join(t.TempDir(), "parent.raw")
	require.NoError(t, os.WriteFile(p, b, 0o644))
	return p
}

// TestDifferencing reads VHD and VHDX differencing disks over their
// parents: the guest bytes equal the final image, as libvhdi (an
// independent reader) also finds; alone, each is refused naming its
// parent; over the wrong parent, refused too.
func TestDifferencing(t *testing.T) {
	final := disktest.Ext4(t, disktest.Tree(t), "16M")
	want, size := disktest.FileSHA256(t, final)
	parentRaw := damaged(t, final)
	for _, tt := range []struct {
		format string
		grain  int
		name   string // the parent, as the child's locators name it
	}{
		{"vpc", 1, `.\parent.vhd`},
		{"vpc", 8, `.\parent.vhd`},
		{"vhdx", 1, `.\parent.vhdx`},
	} {
		t.Run(fmt.Sprintf("%s grain %d", tt.format, tt.grain), func(t *testing.T) {
			child, parentPath := disktest.Differencing(t, tt.format, parentRaw, final, disktest.DiffOptions{Grain: tt.grain})
			if tt.format == "vhdx" || tt.grain == 8 { // see disktest.Differencing on libvhdi's VHD bitmaps
				assert.Equal(t, want, disktest.LibvhdiSHA256(t, child, parentPath, size), "libvhdi reads the child as the final image")
			}

			_, _, _, err := openFile(t, child, vdisk.Options{})
			require.ErrorIs(t, err, vdisk.ErrBacking)
			assert.ErrorContains(t, err, tt.name)

			parent, _, _, err := openFile(t, parentPath, vdisk.Options{})
			require.NoError(t, err)
			d, _, _, err := openFile(t, child, vdisk.Options{Backing: parent})
			require.NoError(t, err)
			assert.Equal(t, want, disktest.SHA256(t, d, size))

			// Its own parent's bytes differ from the child's view.
			assert.NotEqual(t, want, disktest.SHA256(t, parent, size))

			// Another disk of the same format is not its parent.
			other := disktest.Convert(t, parentRaw, tt.format)
			wrong, _, _, err := openFile(t, other, vdisk.Options{})
			require.NoError(t, err)
			_, _, _, err = openFile(t, child, vdisk.Options{Backing: wrong})
			require.ErrorIs(t, err, vdisk.ErrBacking)
			assert.ErrorContains(t, err, "not this disk's parent")
		})
	}
}
