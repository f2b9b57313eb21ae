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
	qcowCopied      = 1 << 63
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

	// The refcount structures, for checkTables' cross-check.
	l1Size        int64
	refTableOff   int64
	refTableLen   int64 // bytes
	refOrder      uint
	refTableCache []uint64
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
	d.l1Size = l1Size
	d.refTableOff = int64(be.Uint64(h[48:]))
	d.refTableLen = int64(be.Uint32(h[56:])) * d.clusterSize
	d.refOrder = 4
	if version == 3 {
		if err := readFull(r, fileSize, h[72:104], 72, "qcow2 v3 header"); err != nil {
			return nil, err
		}
		incompat := be.Uint64(h[72:])
		d.refOrder = uint(be.Uint32(h[96:]))
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
	// Every host cluster the active tables use, once per use, and the
	// data clusters whose L2 entry says they are used once (OFLAG_COPIED):
	// checked against the refcounts below, as qemu-img check does.
	refs := d.metadataClusters()
	var copied []int64
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
		refs = append(refs, off/d.clusterSize)
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
					sectors := int64((e>>x)&(1<<(62-x)-1)) + 1
					for c := host / d.clusterSize; c <= (host+sectors*512-host%512-1)/d.clusterSize && c < d.fileSize/d.clusterSize+1; c++ {
						refs = append(refs, c)
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
					refs = append(refs, host/d.clusterSize)
					if e&qcowCopied != 0 {
						copied = append(copied, host/d.clusterSize)
					}
				}
			}
			if d.l2Cache.len() < d.l2Cached() {
				d.l2Cache.put(t.off, l2)
			}
		}
		i = j
	}
	if err := d.checkRefcounts(refs, copied); err != nil {
		return err
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

// metadataClusters lists the host clusters of the header, the L1 table and
// the refcount table, and of the refcount blocks it names.
func (d *qcow2Disk) metadataClusters() []int64 {
	refs := []int64{0}
	span := func(off, n int64) {
		if off < 0 || n <= 0 || n > d.fileSize || off > d.fileSize {
			return // refused by the reads that need it
		}
		for c := off / d.clusterSize; c <= (off+n-1)/d.clusterSize; c++ {
			refs = append(refs, c)
		}
	}
	span(d.l1Off, d.l1Size*8)
	span(d.refTableOff, d.refTableLen)
	if t, err := d.refTable(); err == nil {
		for _, e := range t {
			if off := int64(e &^ 0x1FF); off != 0 {
				refs = append(refs, off/d.clusterSize)
			}
		}
	}
	return refs
}

// qcowMaxRefTable bounds the refcount table read (32 MiB: 4 Mi blocks).
const qcowMaxRefTable = 32 << 20

// refTable reads the refcount table, once.
func (d *qcow2Disk) refTable() ([]uint64, error) {
	if d.refTableCache != nil {
		return d.refTableCache, nil
	}
	if d.refTableLen <= 0 || d.refTableLen > qcowMaxRefTable || d.refTableOff%d.clusterSize != 0 || d.refTableOff <= 0 {
		return nil, corruptf("qcow2: refcount table of %d bytes at %d", d.refTableLen, d.refTableOff)
	}
	raw := make([]byte, d.refTableLen)
	if err := readFull(d.r, d.fileSize, raw, d.refTableOff, "qcow2 refcount table"); err != nil {
		return nil, err
	}
	t := make([]uint64, len(raw)/8)
	for i := range t {
		t[i] = binary.BigEndian.Uint64(raw[8*i:])
	}
	d.refTableCache = t
	return t, nil
}

// checkRefcounts checks the clusters the active tables use against their
// refcounts, as qemu-img check does: a cluster used n times needs a
// refcount of n at least (snapshots may add to it; a table entry pointed at
// another's cluster, or at a free one, does not), and a data cluster whose
// L2 entry says it is used once (OFLAG_COPIED) must have a refcount of 1.
// Refcount widths under 8 bits, which qemu-img never writes by default,
// are not checked.
func (d *qcow2Disk) checkRefcounts(refs, copied []int64) error {
	if d.refOrder < 3 || d.refOrder > 6 {
		if d.refOrder > 6 {
			return corruptf("qcow2: refcount_order %d", d.refOrder)
		}
		return nil
	}
	t, err := d.refTable()
	if err != nil {
		return err
	}
	width := int64(1) << d.refOrder / 8 // bytes per refcount
	perBlock := d.clusterSize / width
	blocks := map[int64][]byte{}
	refcount := func(c int64) (uint64, error) {
		if c < 0 {
			return 0, corruptf("qcow2: cluster %d", c)
		}
		bi := c / perBlock
		if bi >= int64(len(t)) {
			return 0, nil
		}
		off := int64(t[bi] &^ 0x1FF)
		if off == 0 {
			return 0, nil
		}
		b, ok := blocks[bi]
		if !ok {
			if err := d.checkCluster(off, "refcount block"); err != nil {
				return 0, err
			}
			b = make([]byte, d.clusterSize)
			if err := readFull(d.r, d.fileSize, b, off, "qcow2 refcount block"); err != nil {
				return 0, err
			}
			blocks[bi] = b
		}
		e := b[c%perBlock*width:][:width]
		var v uint64
		for _, x := range e {
			v = v<<8 | uint64(x)
		}
		return v, nil
	}
	slices.Sort(refs)
	for i := 0; i < len(refs); {
		j := i
		for j < len(refs) && refs[j] == refs[i] {
			j++
		}
		n, err := refcount(refs[i])
		if err != nil {
			return err
		}
		if n < uint64(j-i) {
			return corruptf("qcow2: cluster %d (offset %d) is used %d times but its refcount is %d", refs[i], refs[i]*d.clusterSize, j-i, n)
		}
		i = j
	}
	for _, c := range copied {
		if n, err := refcount(c); err != nil {
			return err
		} else if n != 1 {
			return corruptf("qcow2: data cluster %d (offset %d) is marked used once (OFLAG_COPIED) but its refcount is %d", c, c*d.clusterSize, n)
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
