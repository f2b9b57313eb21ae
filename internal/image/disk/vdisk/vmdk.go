package vdisk

import (
	"bytes"
	"cmp"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"strings"
)

// VMDK sparse extent flags and constants, from VMware's Virtual Disk Format
// 5.0 technote.
const (
	vmdkFlagCompressed = 1 << 16
	vmdkFlagMarkers    = 1 << 17
	vmdkGDAtEnd        = 0xffffffffffffffff
	vmdkDeflate        = 1
)

// vmdkDisk is the guest disk of a monolithicSparse or streamOptimized VMDK.
type vmdkDisk struct {
	r          io.ReaderAt
	fileSize   int64
	size       int64
	grainSize  int64 // bytes
	gtes       int64 // entries per grain table
	gd         []uint32
	gdStart    int64 // bytes
	gdEnd      int64
	compressed bool
	markers    bool
	gtCache    *lru[[]uint32]
	grainCache *lru[[]byte]
}

type vmdkHeader struct {
	version, flags      uint32
	capacity, grainSize uint64
	gtes                uint32
	gdOffset            uint64
	compress            uint16
}

func parseVMDKHeader(b []byte) vmdkHeader {
	le := binary.LittleEndian
	return vmdkHeader{
		version:   le.Uint32(b[4:]),
		flags:     le.Uint32(b[8:]),
		capacity:  le.Uint64(b[12:]),
		grainSize: le.Uint64(b[20:]),
		gtes:      le.Uint32(b[44:]),
		gdOffset:  le.Uint64(b[56:]),
		compress:  le.Uint16(b[77:]),
	}
}

// OpenVMDK opens a hosted sparse VMDK extent with its embedded descriptor:
// monolithicSparse, or streamOptimized with compressed grains and markers.
func OpenVMDK(r io.ReaderAt, fileSize int64) (Disk, error) {
	var b [512]byte
	if err := readFull(r, fileSize, b[:], 0, "vmdk header"); err != nil {
		return nil, err
	}
	if string(b[:4]) != "KDMV" {
		if strings.HasPrefix(string(b[:]), "# Disk DescriptorFile") {
			return nil, descriptorError(b[:])
		}
		return nil, corruptf("vmdk: bad magic %q", b[:4])
	}
	h := parseVMDKHeader(b[:])
	if h.version < 1 || h.version > 3 {
		return nil, fmt.Errorf("vmdk version %d: %w", h.version, ErrUnsupported)
	}
	if h.gdOffset == vmdkGDAtEnd {
		// streamOptimized writes the grain directory last; the footer,
		// a copy of the header with the real offset, sits 1024 bytes
		// before the end (then the end-of-stream marker).
		if fileSize < 1536 {
			return nil, corruptf("vmdk: no room for a footer")
		}
		if err := readFull(r, fileSize, b[:], fileSize-1024, "vmdk footer"); err != nil {
			return nil, err
		}
		if string(b[:4]) != "KDMV" {
			return nil, corruptf("vmdk: grain directory at end but no footer")
		}
		h = parseVMDKHeader(b[:])
		if h.gdOffset == vmdkGDAtEnd {
			return nil, corruptf("vmdk: footer has no grain directory offset")
		}
	}
	if h.grainSize < 1 || h.grainSize > 2048 || h.grainSize&(h.grainSize-1) != 0 {
		return nil, corruptf("vmdk: grain size %d sectors", h.grainSize)
	}
	if h.gtes < 1 || h.gtes > 1<<16 {
		return nil, corruptf("vmdk: %d entries per grain table", h.gtes)
	}
	if h.capacity > 1<<40 {
		return nil, corruptf("vmdk: capacity of %d sectors", h.capacity)
	}
	d := &vmdkDisk{
		r: r, fileSize: fileSize,
		size:       int64(h.capacity) * 512,
		grainSize:  int64(h.grainSize) * 512,
		gtes:       int64(h.gtes),
		compressed: h.flags&vmdkFlagCompressed != 0,
		markers:    h.flags&vmdkFlagMarkers != 0,
	}
	if d.compressed && h.compress != vmdkDeflate {
		return nil, fmt.Errorf("vmdk compression algorithm %d: %w", h.compress, ErrUnsupported)
	}
	perGT := d.grainSize * d.gtes
	n := (d.size + perGT - 1) / perGT
	if n*4 > qcowMaxTableLen {
		return nil, corruptf("vmdk: grain directory of %d entries too large", n)
	}
	if h.gdOffset > uint64(fileSize)/512 {
		return nil, corruptf("vmdk: grain directory at sector %d past the end", h.gdOffset)
	}
	d.gdStart = int64(h.gdOffset) * 512
	d.gdEnd = d.gdStart + n*4
	if d.gdStart == 0 && n > 0 {
		return nil, corruptf("vmdk: grain directory points at the header")
	}
	if n*4 > fileSize {
		return nil, corruptf("vmdk: grain directory of %d entries larger than the image", n)
	}
	raw := make([]byte, n*4)
	if err := readFull(r, fileSize, raw, d.gdStart, "vmdk grain directory"); err != nil {
		return nil, err
	}
	d.gd = make([]uint32, n)
	for i := range d.gd {
		d.gd[i] = binary.LittleEndian.Uint32(raw[i*4:])
	}
	d.gtCache = newLRU[[]uint32](vmdkGTCache)
	d.grainCache = newLRU[[]byte](8)
	if err := d.checkTables(); err != nil {
		return nil, err
	}
	return d, nil
}

// vmdkGTCache is how many grain tables a disk keeps decoded: those of a
// 4 GiB disk with the usual 64 KiB grains and 512-entry tables.
const vmdkGTCache = 256

// vmdkMaxRun bounds one read of adjacent grain tables at open.
const vmdkMaxRun = 1 << 20

// checkTables reads every grain table the grain directory names and checks
// that each table and each allocated grain lies inside the file, so that a
// truncated file fails at open rather than at the read of a grain the scan
// may never ask for. Grain tables are small (2 KiB per 32 MiB of guest
// disk) and usually adjacent, so they are read in few large reads; the
// first ones read stay cached for the scan. Tables may not overlap one
// another, which bounds the bytes read to the file's size.
func (d *vmdkDisk) checkTables() error {
	type table struct {
		off int64
		gd  int
	}
	var tabs []table
	for i, gde := range d.gd {
		if gde != 0 {
			tabs = append(tabs, table{int64(gde) * 512, i})
		}
	}
	slices.SortFunc(tabs, func(a, b table) int { return cmp.Compare(a.off, b.off) })
	gtBytes := d.gtes * 4
	for i, t := range tabs {
		if t.off < d.gdEnd && t.off+gtBytes > d.gdStart {
			return corruptf("vmdk: grain table %d at %d overlaps the grain directory", t.gd, t.off)
		}
		if t.off > d.fileSize-gtBytes {
			return corruptf("vmdk: grain table %d at offset %d (+%d) lies past the end of the image (%d bytes): truncated image",
				t.gd, t.off, gtBytes, d.fileSize)
		}
		if i > 0 && t.off < tabs[i-1].off+gtBytes {
			return corruptf("vmdk: grain tables %d and %d overlap at offset %d", tabs[i-1].gd, t.gd, t.off)
		}
	}
	// The grain that ends furthest into the file; for compressed grains
	// its marker says how long it is.
	var last struct{ off, blk int64 }
	for i := 0; i < len(tabs); {
		// A run of adjacent tables, read at once.
		j := i + 1
		for j < len(tabs) && tabs[j].off == tabs[j-1].off+gtBytes && int64(j-i+1)*gtBytes <= vmdkMaxRun {
			j++
		}
		raw := make([]byte, int64(j-i)*gtBytes)
		if err := readFull(d.r, d.fileSize, raw, tabs[i].off, "vmdk grain tables"); err != nil {
			return err
		}
		for k, t := range tabs[i:j] {
			gt := d.decodeGT(raw[int64(k)*gtBytes:])
			for e, gte := range gt {
				if gte <= 1 { // unallocated or zeroed
					continue
				}
				blk := int64(t.gd)*d.gtes + int64(e)
				if blk*d.grainSize >= d.size {
					break // the last table's entries past the disk's end are never read
				}
				off := int64(gte) * 512
				if err := d.checkGrain(off, blk); err != nil {
					return err
				}
				if off > last.off {
					last.off, last.blk = off, blk
				}
			}
			if d.gtCache.len() < vmdkGTCache {
				d.gtCache.put(t.off, gt)
			}
		}
		i = j
	}
	if d.compressed && last.off > 0 {
		if _, err := d.grain(last.off, last.blk); err != nil {
			return fmt.Errorf("last grain of the image: %w", err)
		}
	}
	return nil
}

// checkGrain checks that the grain of guest block blk at off lies inside
// the file: all of it that the guest disk holds when it is stored whole,
// its marker when it is compressed (only reading it tells its length).
func (d *vmdkDisk) checkGrain(off, blk int64) error {
	length := min(d.grainSize, d.size-blk*d.grainSize)
	if d.compressed {
		length = 4
		if d.markers {
			length = 12
		}
	} else if off < d.gdEnd && off+d.grainSize > d.gdStart {
		return corruptf("vmdk: grain %d overlaps the grain directory", blk)
	}
	if off > d.fileSize-length {
		return corruptf("vmdk: grain %d at offset %d (+%d) lies past the end of the image (%d bytes): truncated image",
			blk, off, length, d.fileSize)
	}
	return nil
}

func (d *vmdkDisk) Size() int64 { return d.size }

func (d *vmdkDisk) ReadAt(p []byte, off int64) (int, error) {
	return readBlocks(d, d.grainSize, d.size, p, off)
}

func (d *vmdkDisk) grainTable(sector uint32) ([]uint32, error) {
	off := int64(sector) * 512
	if t, ok := d.gtCache.get(off); ok {
		return t, nil
	}
	end := off + d.gtes*4
	if off == 0 {
		return nil, corruptf("vmdk: grain table points at the header")
	}
	if off < d.gdEnd && end > d.gdStart {
		return nil, corruptf("vmdk: grain table at %d overlaps the grain directory", off)
	}
	raw := make([]byte, d.gtes*4)
	if err := readFull(d.r, d.fileSize, raw, off, "vmdk grain table"); err != nil {
		return nil, err
	}
	t := d.decodeGT(raw)
	d.gtCache.put(off, t)
	return t, nil
}

// decodeGT decodes the grain table at the start of raw.
func (d *vmdkDisk) decodeGT(raw []byte) []uint32 {
	t := make([]uint32, d.gtes)
	for i := range t {
		t[i] = binary.LittleEndian.Uint32(raw[i*4:])
	}
	return t
}

func (d *vmdkDisk) readBlock(p []byte, blk, within int64) error {
	gde := d.gd[blk/d.gtes]
	if gde == 0 {
		clear(p)
		return nil
	}
	gt, err := d.grainTable(gde)
	if err != nil {
		return err
	}
	gte := gt[blk%d.gtes]
	if gte <= 1 { // 0: unallocated, 1: zeroed grain
		clear(p)
		return nil
	}
	off := int64(gte) * 512
	if off < d.gdEnd && off+d.grainSize > d.gdStart && !d.compressed {
		return corruptf("vmdk: grain %d overlaps the grain directory", blk)
	}
	if !d.compressed {
		return readFull(d.r, d.fileSize, p, off+within, "vmdk grain")
	}
	g, err := d.grain(off, blk)
	if err != nil {
		return err
	}
	copy(p, g[within:])
	return nil
}

// descriptorError explains a VMDK text descriptor: its data lives in
// separate extent files, which (when flat) are raw disks amilint reads
// directly.
func descriptorError(b []byte) error {
	createType := "?"
	var extents []string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "createType="); ok {
			createType = strings.Trim(v, `"`)
		}
		if f := strings.Fields(line); len(f) >= 4 && (f[0] == "RW" || f[0] == "RDONLY") {
			extents = append(extents, strings.Trim(f[3], `"`))
		}
	}
	return fmt.Errorf("vmdk descriptor file (createType %s): the disk is in its extent files %q; give a flat extent (a raw disk) or convert with qemu-img: %w",
		createType, extents, ErrUnsupported)
}

// grain decompresses the compressed grain at off, which must hold guest
// block blk.
func (d *vmdkDisk) grain(off, blk int64) ([]byte, error) {
	if g, ok := d.grainCache.get(off); ok {
		return g, nil
	}
	hdrLen := int64(4)
	if d.markers {
		hdrLen = 12
	}
	var hdr [12]byte
	if err := readFull(d.r, d.fileSize, hdr[:hdrLen], off, "vmdk grain marker"); err != nil {
		return nil, err
	}
	lba := binary.LittleEndian.Uint64(hdr[:8])
	length := int64(binary.LittleEndian.Uint32(hdr[hdrLen-4:]))
	if d.markers && lba != uint64(blk*d.grainSize/512) {
		return nil, corruptf("vmdk: grain for sector %d found where sector %d's belongs", lba, blk*d.grainSize/512)
	}
	if length == 0 || length > 2*d.grainSize+1024 {
		return nil, corruptf("vmdk: compressed grain of %d bytes", length)
	}
	src := make([]byte, length)
	if err := readFull(d.r, d.fileSize, src, off+hdrLen, "vmdk compressed grain"); err != nil {
		return nil, err
	}
	zr, err := zlib.NewReader(bytes.NewReader(src))
	if err != nil {
		return nil, corruptf("vmdk: grain %d: %v", blk, err)
	}
	out := make([]byte, d.grainSize)
	// The disk's last grain may be short; what it lacks reads as zeros.
	// Either way the stream is read to its end, so zlib checks its
	// Adler-32.
	if last := (blk+1)*d.grainSize > d.size; last {
		n, err := io.ReadFull(zr, out)
		if err == nil {
			err = readToEnd(zr, nil)
		} else if err == io.ErrUnexpectedEOF && int64(n) >= d.size-blk*d.grainSize {
			err = nil
		}
		if err != nil {
			return nil, corruptf("vmdk: grain %d: %v", blk, err)
		}
	} else if err := readToEnd(zr, out); err != nil {
		return nil, corruptf("vmdk: grain %d: %v", blk, err)
	}
	d.grainCache.put(off, out)
	return out, nil
}
