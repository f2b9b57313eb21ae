//go:build !amilint_guest

package target

import (
	"encoding/binary"
	"io"
	"io/fs"
	"os"
	"testing"

	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// patched is a ReaderAt over base with some bytes replaced: a corrupted
// image without copying it for each input.
type patched struct {
	base    io.ReaderAt
	patches map[int64]byte
}

func (p patched) ReadAt(b []byte, off int64) (int, error) {
	n, err := p.base.ReadAt(b, off)
	for o, v := range p.patches {
		if o >= off && o < off+int64(n) {
			b[o-off] = v
		}
	}
	return n, err
}

// FuzzDiskPipeline runs the whole disk pipeline — container format →
// partition table → LVM → filesystem → the image view — over real images
// built once per process (ext4 on GPT as raw, qcow2, VHDX, VMDK and VHD;
// ext4 in an LVM volume on MBR), corrupted by the fuzzed patches. The seeds
// are a few bytes (which image, then offset and value triples); the
// images, megabytes, are built here, not carried in the corpus. Opening
// either fails or gives a view whose every file reads or fails, never a
// panic or a hang.
func FuzzDiskPipeline(f *testing.F) {
	tree := disktest.Tree(f)
	ext4 := disktest.Ext4(f, tree, "8M")
	gpt := disktest.GPTRoot(f, ext4)
	images := []string{
		gpt,
		disktest.Convert(f, gpt, "qcow2", "-o", "cluster_size=65536"),
		disktest.Convert(f, gpt, "vhdx"),
		disktest.Convert(f, gpt, "vmdk", "-o", "subformat=streamOptimized"),
		disktest.Convert(f, gpt, "vpc"),
	}
	if os.Geteuid() == 0 {
		images = append(images, disktest.LVMDisk(f, ext4))
	}
	files := make([]*os.File, len(images))
	sizes := make([]int64, len(images))
	for i, p := range images {
		fh, err := os.Open(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { fh.Close() })
		fi, err := fh.Stat()
		if err != nil {
			f.Fatal(err)
		}
		files[i], sizes[i] = fh, fi.Size()
		// Each image as it is opens.
		im, err := OpenDisk(p, fh, fi.Size(), Options{})
		if err != nil {
			f.Fatalf("%s: %v", p, err)
		}
		im.Close()
	}
	for i := range images {
		f.Add(uint8(i), []byte{})
		f.Add(uint8(i), []byte{0, 0, 0, 0x10, 0xff, 0x10, 2, 0, 0x80, 0x00})                // near the start: headers, tables
		f.Add(uint8(i), []byte{0x38, 0x04, 0x20, 0x00, 0x01, 0x00, 0x00, 0x21, 0x00, 0x7f}) // in the partition
	}
	f.Fuzz(func(t *testing.T, which uint8, patch []byte) {
		k := int(which) % len(images)
		size := sizes[k]
		p := patched{base: files[k], patches: map[int64]byte{}}
		for i := 0; i+5 <= len(patch) && i < 5*64; i += 5 {
			off := int64(binary.LittleEndian.Uint32(patch[i:]))
			// Half the patches land in the first 2 MiB (container and
			// partition headers), the rest anywhere.
			if off&1 == 0 {
				off %= min(size, 2<<20)
			} else {
				off %= size
			}
			p.patches[off] = patch[i+4]
		}
		im, err := OpenDisk("fuzz", p, size, Options{})
		if err != nil {
			return
		}
		defer im.Close()
		walk(im.FS)
	})
}

// walk reads every entry of the view, at most a few hundred, as an audit
// would: lstat, readlink, resolve, read.
func walk(v *rootfs.FS) {
	n := 0
	_ = fs.WalkDir(v, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if n++; n > 400 {
			return fs.SkipAll
		}
		if d.Type()&fs.ModeSymlink != 0 {
			_, _ = v.Resolve(p)
			return nil
		}
		if d.Type().IsRegular() {
			_, _ = v.ReadFile(p)
		}
		return nil
	})
}
