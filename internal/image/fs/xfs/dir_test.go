package xfs

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDirectoryBlockMappedTwice: the extent records of a directory may map
// every one of its logical blocks to one data block, which then passes
// all its checks each time (its header names the block it is read from
// and its owner). A directory's blocks are its own, each once
// (xfs_repair: a block claimed twice); reading one again and again
// multiplied its entries by the records a bmap btree leaf holds (250 in a
// 4 KiB block), leaf after leaf.
func TestDirectoryBlockMappedTwice(t *testing.T) {
	src := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(src, "etc/big"), 0o755))
	for i := range 3000 {
		require.NoError(t, os.WriteFile(filepath.Join(src, "etc/big", fmt.Sprintf("%s%05d", strings.Repeat("n", 40), i)), nil, 0o644))
	}
	c := newCompactReader(compact(t, mkfs(t, src, "300M")))
	ok, err := Open(c, compactSize)
	require.NoError(t, err)
	big := node(t, ok, "etc/big")
	require.Equal(t, uint8(fmtBtree), big.format)
	want, err := ok.ReadDir("etc/big")
	require.NoError(t, err)

	// Point every data record of every leaf of big/'s bmap btree at the
	// directory's first data block, one directory block each.
	be := binary.BigEndian
	maxrecs := (len(big.fork) - 4) / 16
	require.Equal(t, uint16(1), be.Uint16(big.fork), "a root of level 1")
	first := uint64(0)
	records := 0
	for i := range int(be.Uint16(big.fork[2:])) {
		d, err := ok.daddr(be.Uint64(big.fork[4+8*maxrecs+8*i:]))
		require.NoError(t, err)
		blk := int64(d) << ok.blockLog
		b := make([]byte, ok.blockSize)
		_, err = c.ReadAt(b, blk)
		require.NoError(t, err)
		for j := range int(be.Uint16(b[6:])) {
			rec := b[bmbtHdrSize+16*j:]
			e := decodeExtent(rec)
			if e.off<<ok.blockLog >= uint64(leafOffset) {
				continue
			}
			if first == 0 {
				first = e.fsb
			}
			l0 := e.off<<9 | first>>43
			l1 := (first&(1<<43-1))<<21 | uint64(1)<<ok.dirBlkLog
			c.Patch(blk+bmbtHdrSize+16*int64(j), be.AppendUint64(be.AppendUint64(nil, l0), l1))
			records++
		}
		sealCRC(c, blk, ok.blockSize, bmbtCRCOff)
	}
	require.Greater(t, records, 1)

	f, err := Open(c, compactSize)
	require.NoError(t, err)
	got, err := f.ReadDir("etc/big")
	t.Logf("%d entries before, %d after %d records were pointed at one block", len(want), len(got), records)
	require.ErrorIs(t, err, ErrCorrupt)
}
