package ext4

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/disk/vdisk"
	"github.com/amilint/amilint/internal/image/fs/inodefs"
)

// dirImage returns an ext2 image of size bytes in 4 KiB blocks whose
// directory "d" is made of the given blocks, through its block map, each
// filled with 341 entries naming the file d/x.
func dirImage(t *testing.T, size string, blocks func(f *FS, dirBlk uint32) []uint32) []byte {
	t.Helper()
	src := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(src, "d"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src, "d/x"), []byte("x"), 0o644))
	img := mkfs(t, src, size, "-t", "ext2", "-O", "^resize_inode", "-b", "4096")
	b, err := os.ReadFile(img)
	require.NoError(t, err)
	f, err := Open(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	dir, x := node(t, f, "d"), node(t, f, "d/x")
	le := binary.LittleEndian
	list := blocks(f, le.Uint32(dir.block[:]))

	entries := make([]byte, 4096)
	for i := range 341 {
		e := entries[12*i:]
		le.PutUint32(e, uint32(x.ino))
		le.PutUint16(e[4:], 12)
		e[6], e[7] = 3, 1
		copy(e[8:], fmt.Sprintf("%03d", i))
	}
	le.PutUint16(entries[12*340+4:], 4096-12*340)
	for _, blk := range list {
		copy(b[int64(blk)*4096:], entries)
	}

	// The block map: 12 direct pointers, then a single indirect block and
	// a double indirect one, taken from the filesystem's last blocks.
	require.LessOrEqual(t, len(list), 12+1024+1024*1024)
	free := uint32(f.blocksCount)
	alloc := func() []byte {
		free--
		return b[int64(free)*4096:][:4096]
	}
	var ptrs [15]uint32
	var ind, dind []byte
	for i, blk := range list {
		switch {
		case i < 12:
			ptrs[i] = blk
		case i < 12+1024:
			if ind == nil {
				ind, ptrs[12] = alloc(), free
			}
			le.PutUint32(ind[4*(i-12):], blk)
		default:
			j := i - 12 - 1024
			if dind == nil {
				dind, ptrs[13] = alloc(), free
			}
			if j%1024 == 0 {
				ind = alloc()
				le.PutUint32(dind[4*(j/1024):], free)
			}
			le.PutUint32(ind[4*(j%1024):], blk)
		}
	}
	table, err := f.inodeTable((dir.ino - 1) / f.inodesPerGroup)
	require.NoError(t, err)
	raw := b[int64(table)*4096+int64((dir.ino-1)%f.inodesPerGroup)*f.inodeSize:]
	for i, p := range ptrs {
		le.PutUint32(raw[0x28+4*i:], p)
	}
	le.PutUint32(raw[0x4:], uint32(len(list)*4096))
	return b
}

// TestDirectoryBlockMappedTwice: a directory's block map may name one
// block many times (here every pointer of a double indirect map names the
// same directory block: 12 KiB of metadata for a 64 MiB "directory"). A
// directory's blocks belong to it once (e2fsck: multiply-claimed blocks);
// reading the same block again and again multiplied one block's entries
// by the device's size, and an image of a few KiB of data on a sparse or
// qcow2 disk of a few GiB ran out of memory listing it.
func TestDirectoryBlockMappedTwice(t *testing.T) {
	b := dirImage(t, "64M", func(f *FS, dirBlk uint32) []uint32 {
		list := make([]uint32, f.blocksCount-64)
		for i := range list {
			list[i] = dirBlk
		}
		return list
	})
	c := vdisk.NewCounter(bytes.NewReader(b))
	f, err := Open(c, int64(len(b)))
	require.NoError(t, err)
	before := c.Bytes()
	_, err = f.ReadDir("d")
	t.Logf("listing a directory of one 4 KiB block read %d bytes", c.Bytes()-before)
	require.ErrorIs(t, err, ErrCorrupt)
}

// TestDirectoryEntriesBounded: the blocks of a directory may be distinct
// in the filesystem yet one cluster of the container (a qcow2 image maps
// any number of guest clusters to one host cluster), so the entries one
// listing holds in memory are bounded (inodefs.MaxDirents), not only its
// blocks.
func TestDirectoryEntriesBounded(t *testing.T) {
	n := inodefs.MaxDirents/341 + 1
	b := dirImage(t, "64M", func(f *FS, _ uint32) []uint32 {
		list := make([]uint32, n)
		for i := range list {
			list[i] = uint32(f.blocksCount) - 16 - uint32(n) + uint32(i)
		}
		return list
	})
	f, err := Open(bytes.NewReader(b), int64(len(b)))
	require.NoError(t, err)
	_, err = f.ReadDir("d")
	require.ErrorIs(t, err, ErrUnsupported)
}

// TestDirectorySizeBounded: blocks of deleted entries count toward no
// entry bound, so a directory's size is bounded itself (maxDirBytes, made
// small here): read up to it, refused past it before a block is read.
func TestDirectorySizeBounded(t *testing.T) {
	defer func(m int64) { maxDirBytes = m }(maxDirBytes)
	maxDirBytes = 40 * 4096
	for _, c := range []struct {
		blocks int
		err    error
	}{{40, nil}, {41, ErrUnsupported}} {
		b := dirImage(t, "64M", func(f *FS, _ uint32) []uint32 {
			list := make([]uint32, c.blocks)
			for i := range list {
				list[i] = uint32(f.blocksCount) - 16 - uint32(c.blocks) + uint32(i)
			}
			return list
		})
		cnt := vdisk.NewCounter(bytes.NewReader(b))
		f, err := Open(cnt, int64(len(b)))
		require.NoError(t, err)
		before := cnt.Bytes()
		ents, err := f.ReadDir("d")
		if c.err == nil {
			require.NoError(t, err, "%d blocks", c.blocks)
			require.Len(t, ents, 341) // every block names the same 341 entries
			continue
		}
		require.ErrorIs(t, err, c.err, "%d blocks", c.blocks)
		require.Less(t, cnt.Bytes()-before, int64(4096), "%d blocks: read before refusing", c.blocks)
	}
}
