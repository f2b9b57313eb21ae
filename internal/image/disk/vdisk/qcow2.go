package vdisk

import (
	"bytes"
	"cmp"
	"compress/flate"
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"github.com/klauspost/compress/zstd"
)

// qcow2 feature bits and entry masks, from QEMU's docs/interop/qcow2.txt.
const (
	qcowIncompatDirty      = 1 << 0
	qcowIncompatCorrupt    = 1 << 1
	qcowIncompatExtData    = 1 << 2
	qcowIncompatCompType   = 1 << 3
	qcowIncompatExtendedL2 = 1 << 4

	qcowOffsetMask  = 0x00fffffffffffe00
	qcowCompressed  = 1 << 62
	qcowZeroFlag    = 1 << 0
	qcowMaxTableLen = 32 << 20 // bytes of L1 table amilint agrees to load
)

// qcow2Disk is the guest disk of a qcow2 image.
type qcow2Disk struct {
	r           io.ReaderAt
	fileSize    int64
	size        int64
	clusterBits uint
	clusterSize int64
	l2Entries   int64
	l1          []uint64
	l1Off       int64
	zstd        bool
	backing     Disk
	l2Cache     *lru[[]uint64]
	compCache   *lru[[]byte]
}

// OpenQCOW2 opens a qcow2 (version 2 or 3) image. A backing file is refused
// with ErrBacking unless backing, the parent's guest disk, is given.
func OpenQCOW2(r io.ReaderAt, fileSize int64, backing Disk) (Disk, error) {
	var h [112]byte
	if err := readFull(r, fileSize, h[:72], 0, "qcow2 header"); err != nil {
		return nil, err
	}
	be := binary.BigEndian
	if string(h[:4]) != "QFI\xfb" {
		return nil, corruptf("qcow2: bad magic %q", h[:4])
	}
	version := be.Uint32(h[4:])
	if version != 2 && version != 3 {
		return nil, fmt.Errorf("qcow2 version %d: %w", version, ErrUnsupported)
	}
	d := &qcow2Disk{r: r, fileSize: fileSize}
	backingOff, backingLen := be.Uint64(h[8:]), be.Uint32(h[16:])
	d.clusterBits = uint(be.Uint32(h[20:]))
	if d.clusterBits < 9 || d.clusterBits > 21 {
		return nil, corruptf("qcow2: cluster_bits %d out of range 9..21", d.clusterBits)
	}
	d.clusterSize = 1 << d.clusterBits
	d.l2Entries = d.clusterSize / 8
	size := be.Uint64(h[24:])
	if size > 1<<56 {
		return nil, corruptf("qcow2: virtual size %d too large", size)
	}
	d.size = int64(size)
	if crypt := be.Uint32(h[32:]); crypt != 0 {
		return nil, fmt.Errorf("qcow2 encryption method %d: %w", crypt, ErrUnsupported)
	}
	l1Size := int64(be.Uint32(h[36:]))
	d.l1Off = int64(be.Uint64(h[40:]) & 0x7fffffffffffffff)
	if version == 3 {
		if err := readFull(r, fileSize, h[72:104], 72, "qcow2 v3 header"); err != nil {
			return nil, err
		}
		incompat := be.Uint64(h[72:])
		hdrLen := be.Uint32(h[100:])
		if hdrLen < 104 || hdrLen > uint32(d.clusterSize) {
			return nil, corruptf("qcow2: header_length %d", hdrLen)
		}
		switch {
		case incompat&qcowIncompatExtData != 0:
			return nil, fmt.Errorf("qcow2 external data file: %w", ErrUnsupported)
		case incompat&qcowIncompatExtendedL2 != 0:
			return nil, fmt.Errorf("qcow2 extended L2 entries: %w", ErrUnsupported)
		case incompat&^(qcowIncompatDirty|qcowIncompatCorrupt|qcowIncompatCompType) != 0:
			return nil, fmt.Errorf("qcow2 incompatible features %#x: %w", incompat, ErrUnsupported)
		}
		if incompat&qcowIncompatCompType != 0 {
			if hdrLen < 105 {
				return nil, corruptf("qcow2: compression type bit set but header_length %d", hdrLen)
			}
			if err := readFull(r, fileSize, h[104:105], 104, "qcow2 compression type"); err != nil {
				return nil, err
			}
			switch h[104] {
			case 0:
			case 1:
				d.zstd = true
			default:
				return nil, fmt.Errorf("qcow2 compression type %d: %w", h[104], ErrUnsupported)
			}
		}
	}
	if backingOff != 0 {
		if backing == nil {
			name := ""
			if backingLen > 0 && backingLen <= 1023 {
				b := make([]byte, backingLen)
				if readFull(r, fileSize, b, int64(backingOff), "qcow2 backing file name") == nil {
					name = string(b)
				}
			}
			return nil, fmt.Errorf("qcow2 backing file %q: %w (give it explicitly)", name, ErrBacking)
		}
		d.backing = backing
	}
	perL1 := d.clusterSize * d.l2Entries
	need := (d.size + perL1 - 1) / perL1
	if l1Size < need {
		return nil, corruptf("qcow2: L1 table has %d entries, %d needed for %d bytes", l1Size, need, d.size)
	}
	if l1Size*8 > qcowMaxTableLen {
		return nil, corruptf("qcow2: L1 table of %d entries too large", l1Size)
	}
	if d.l1Off%d.clusterSize != 0 || d.l1Off == 0 && need > 0 {
		return nil, corruptf("qcow2: L1 table offset %d not cluster aligned", d.l1Off)
	}
	if need*8 > fileSize {
		return nil, corruptf("qcow2: L1 table of %d entries larger than the image", need)
	}
	raw := make([]byte, need*8)
	if err := readFull(r, fileSize, raw, d.l1Off, "qcow2 L1 table"); err != nil {
		return nil, err
	}
	d.l1 = make([]uint64, need)
	for i := range d.l1 {
		d.l1[i] = be.Uint64(raw[i*8:])
	}
	d.l2Cache = newLRU[[]uint64](d.l2Cached())
	d.compCache = newLRU[[]byte](8)
	if err := d.checkTables(); err != nil {
		return nil, err
	}
	return d, nil
}

// l2Cached is how many L2 tables a disk keeps decoded: 16 MiB of them.
func (d *qcow2Disk) l2Cached() int { return max(4, int((16<<20)/d.clusterSize)) }

// checkTables reads every L2 table the L1 table names and checks that each
// table and each allocated data cluster lies inside the file, so that a
// truncated file fails at open rather than at the read of a cluster the
// scan may never ask for. An L2 table maps 512 MiB of guest disk with 64
// KiB clusters; adjacent tables are read together and the first ones stay
// cached for the scan. Tables shared by several L1 entries are read once,
// so the bytes read stay below the file's size.
func (d *qcow2Disk) checkTables() error {
	type table struct {
		off int64
		l1  int
	}
	var tabs []table
	for i, e := range d.l1 {
		off := int64(e & qcowOffsetMask)
		if off == 0 {
			continue
		}
		if err := d.checkCluster(off, "L2 table"); err != nil {
			return err
		}
		if off > d.fileSize-d.clusterSize {
			return corruptf("qcow2: L2 table %d at offset %d (+%d) lies past the end of the image (%d bytes): truncated image",
				i, off, d.clusterSize, d.fileSize)
		}
		tabs = append(tabs, table{off, i})
	}
	slices.SortFunc(tabs, func(a, b table) int { return cmp.Or(cmp.Compare(a.off, b.off), cmp.Compare(a.l1, b.l1)) })
	var last struct{ host, entry int64 } // the compressed cluster furthest into the file
	for i := 0; i < len(tabs); {
		j := i + 1
		for j < len(tabs) && tabs[j].off <= tabs[j-1].off+d.clusterSize && tabs[j].off+d.clusterSize-tabs[i].off <= qcowMaxRun {
			j++
		}
		end := tabs[j-1].off + d.clusterSize
		raw := make([]byte, end-tabs[i].off)
		if err := readFull(d.r, d.fileSize, raw, tabs[i].off, "qcow2 L2 tables"); err != nil {
			return err
		}
		for n, t := range tabs[i:j] {
			if n > 0 && t.off == tabs[i+n-1].off {
				continue // shared with the previous L1 entry: checked once
			}
			l2 := d.decodeL2(raw[t.off-tabs[i].off:])
			for k, e := range l2 {
				blk := int64(t.l1)*d.l2Entries + int64(k)
				if blk*d.clusterSize >= d.size {
					break // entries past the disk's end are never read
				}
				switch {
				case e&qcowCompressed != 0:
					x := 62 - (d.clusterBits - 8)
					host := int64(e & (1<<x - 1))
					if host <= 0 || host >= d.fileSize {
						return corruptf("qcow2: compressed cluster %d at offset %d lies past the end of the image (%d bytes): truncated image", blk, host, d.fileSize)
					}
					if host > last.host {
						last.host, last.entry = host, int64(e)
					}
				case e&qcowZeroFlag != 0 || e&qcowOffsetMask == 0:
				default:
					host := int64(e & qcowOffsetMask)
					if err := d.checkCluster(host, "data cluster"); err != nil {
						return fmt.Errorf("qcow2 cluster %d: %w", blk, err)
					}
					if n := min(d.clusterSize, d.size-blk*d.clusterSize); host > d.fileSize-n {
						return corruptf("qcow2: data cluster %d at offset %d (+%d) lies past the end of the image (%d bytes): truncated image",
							blk, host, n, d.fileSize)
					}
				}
			}
			if d.l2Cache.len() < d.l2Cached() {
				d.l2Cache.put(t.off, l2)
			}
		}
		i = j
	}
	// Only decompressing the last compressed cluster tells whether the
	// file holds all of it.
	if last.host > 0 {
		if _, err := d.compressed(uint64(last.entry)); err != nil {
			return fmt.Errorf("last compressed cluster of the image: %w", err)
		}
	}
	return nil
}

// qcowMaxRun bounds one read of adjacent L2 tables at open.
const qcowMaxRun = 4 << 20

func (d *qcow2Disk) Size() int64 { return d.size }

func (d *qcow2Disk) ReadAt(p []byte, off int64) (int, error) {
	return readBlocks(d, d.clusterSize, d.size, p, off)
}

// checkCluster verifies that a host cluster offset lies inside the file and
// does not overlap the header or the L1 table, so a table can never point
// back at the structures that lead to it.
func (d *qcow2Disk) checkCluster(off int64, what string) error {
	if off%d.clusterSize != 0 {
		return corruptf("qcow2: %s offset %d not cluster aligned", what, off)
	}
	if off == 0 {
		return corruptf("qcow2: %s points at the header", what)
	}
	l1End := d.l1Off + int64(len(d.l1))*8
	if off < l1End && off+d.clusterSize > d.l1Off {
		return corruptf("qcow2: %s at %d overlaps the L1 table", what, off)
	}
	if off >= d.fileSize {
		return corruptf("qcow2: %s at %d past the end of the image (%d bytes)", what, off, d.fileSize)
	}
	return nil
}

func (d *qcow2Disk) l2Table(off int64) ([]uint64, error) {
	if t, ok := d.l2Cache.get(off); ok {
		return t, nil
	}
	if err := d.checkCluster(off, "L2 table"); err != nil {
		return nil, err
	}
	raw := make([]byte, d.clusterSize)
	if err := readFull(d.r, d.fileSize, raw, off, "qcow2 L2 table"); err != nil {
		return nil, err
	}
	t := d.decodeL2(raw)
	d.l2Cache.put(off, t)
	return t, nil
}

// decodeL2 decodes the L2 table at the start of raw.
func (d *qcow2Disk) decodeL2(raw []byte) []uint64 {
	t := make([]uint64, d.l2Entries)
	for i := range t {
		t[i] = binary.BigEndian.Uint64(raw[i*8:])
	}
	return t
}

func (d *qcow2Disk) readBlock(p []byte, blk, within int64) error {
	l1i, l2i := blk/d.l2Entries, blk%d.l2Entries
	l2Off := int64(d.l1[l1i] & qcowOffsetMask)
	if l2Off == 0 {
		return d.unallocated(p, blk, within)
	}
	t, err := d.l2Table(l2Off)
	if err != nil {
		return err
	}
	e := t[l2i]
	if e&qcowCompressed != 0 {
		c, err := d.compressed(e)
		if err != nil {
			return fmt.Errorf("qcow2 cluster %d: %w", blk, err)
		}
		copy(p, c[within:])
		return nil
	}
	if e&qcowZeroFlag != 0 {
		clear(p)
		return nil
	}
	host := int64(e & qcowOffsetMask)
	if host == 0 {
		return d.unallocated(p, blk, within)
	}
	if err := d.checkCluster(host, "data cluster"); err != nil {
		return err
	}
	return readFull(d.r, d.fileSize, p, host+within, "qcow2 data cluster")
}

func (d *qcow2Disk) unallocated(p []byte, blk, within int64) error {
	if d.backing == nil {
		clear(p)
		return nil
	}
	pos := blk*d.clusterSize + within
	n, err := d.backing.ReadAt(p, pos)
	if n < len(p) {
		if err != nil && err != io.EOF {
			return fmt.Errorf("qcow2 backing file at %d: %w", pos, err)
		}
		clear(p[n:]) // a shorter backing file reads as zeros past its end
	}
	return nil
}

// compressed returns the decompressed cluster an L2 entry describes.
func (d *qcow2Disk) compressed(e uint64) ([]byte, error) {
	x := 62 - (d.clusterBits - 8)
	host := int64(e & (1<<x - 1))
	sectors := int64((e>>x)&(1<<(62-x)-1)) + 1
	if c, ok := d.compCache.get(host); ok {
		return c, nil
	}
	n := sectors*512 - host%512
	if host <= 0 || host >= d.fileSize {
		return nil, corruptf("qcow2: compressed cluster at %d outside the image", host)
	}
	if n > d.fileSize-host {
		n = d.fileSize - host // the last compressed cluster may end the file early
	}
	if n > 2*d.clusterSize+512 {
		return nil, corruptf("qcow2: compressed cluster of %d bytes", n)
	}
	src := make([]byte, n)
	if err := readFull(d.r, d.fileSize, src, host, "qcow2 compressed cluster"); err != nil {
		return nil, err
	}
	out := make([]byte, d.clusterSize)
	if d.zstd {
		dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(4*d.clusterSize)))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		defer dec.Close()
		if err := readZstdToEnd(dec, src, out); err != nil {
			return nil, corruptf("qcow2: zstd compressed cluster at %d: %v", host, err)
		}
	} else {
		fr := flate.NewReader(bytes.NewReader(src))
		defer fr.Close()
		if err := readToEnd(fr, out); err != nil {
			return nil, corruptf("qcow2: compressed cluster at %d: %v", host, err)
		}
	}
	d.compCache.put(host, out)
	return out, nil
}
