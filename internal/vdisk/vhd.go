package vdisk

import (
	"encoding/binary"
	"fmt"
	"io"
)

// VHD disk types, from Microsoft's Virtual Hard Disk Image Format
// Specification.
const (
	vhdFixed       = 2
	vhdDynamic     = 3
	vhdDifferecing = 4
	vhdUnused      = 0xffffffff
)

// vhdDisk is the guest disk of a dynamic VHD.
type vhdDisk struct {
	r          io.ReaderAt
	fileSize   int64
	size       int64
	blockSize  int64
	bitmapSize int64
	bat        []uint32
}

// vhdChecksum is the one's complement of the byte sum of b, skipping the
// four checksum bytes at skip.
func vhdChecksum(b []byte, skip int) uint32 {
	var s uint32
	for i, c := range b {
		if i >= skip && i < skip+4 {
			continue
		}
		s += uint32(c)
	}
	return ^s
}

// OpenVHD opens a fixed or dynamic VHD. Differencing disks fail with
// ErrBacking.
func OpenVHD(r io.ReaderAt, fileSize int64) (Disk, error) {
	be := binary.BigEndian
	var foot [512]byte
	if fileSize < 512 {
		return nil, corruptf("vhd: %d bytes is too short for a footer", fileSize)
	}
	if err := readFull(r, fileSize, foot[:], fileSize-512, "vhd footer"); err != nil {
		return nil, err
	}
	if string(foot[:8]) != "conectix" {
		// A dynamic disk keeps a copy of the footer at offset 0.
		if err := readFull(r, fileSize, foot[:], 0, "vhd footer copy"); err != nil {
			return nil, err
		}
		if string(foot[:8]) != "conectix" {
			return nil, corruptf("vhd: no footer")
		}
	}
	if sum := be.Uint32(foot[64:]); sum != vhdChecksum(foot[:], 64) {
		return nil, corruptf("vhd: footer checksum %#x, want %#x", sum, vhdChecksum(foot[:], 64))
	}
	size := int64(be.Uint64(foot[48:]))
	if size < 0 || size > 1<<48 {
		return nil, corruptf("vhd: disk size %d", size)
	}
	switch typ := be.Uint32(foot[60:]); typ {
	case vhdFixed:
		if size > fileSize-512 {
			return nil, corruptf("vhd: fixed disk of %d bytes in a %d byte file", size, fileSize)
		}
		return io.NewSectionReader(r, 0, size), nil
	case vhdDynamic:
	case vhdDifferecing:
		return nil, fmt.Errorf("vhd differencing disk: %w", ErrBacking)
	default:
		return nil, corruptf("vhd: disk type %d", typ)
	}
	var hdr [1024]byte
	hdrOff := int64(be.Uint64(foot[16:]))
	if err := readFull(r, fileSize, hdr[:], hdrOff, "vhd dynamic header"); err != nil {
		return nil, err
	}
	if string(hdr[:8]) != "cxsparse" {
		return nil, corruptf("vhd: dynamic header at %d has bad cookie", hdrOff)
	}
	if sum := be.Uint32(hdr[36:]); sum != vhdChecksum(hdr[:], 36) {
		return nil, corruptf("vhd: dynamic header checksum %#x, want %#x", sum, vhdChecksum(hdr[:], 36))
	}
	d := &vhdDisk{r: r, fileSize: fileSize, size: size}
	batOff := int64(be.Uint64(hdr[16:]))
	entries := int64(be.Uint32(hdr[28:]))
	d.blockSize = int64(be.Uint32(hdr[32:]))
	if d.blockSize < 512 || d.blockSize&(d.blockSize-1) != 0 || d.blockSize > 256<<20 {
		return nil, corruptf("vhd: block size %d", d.blockSize)
	}
	need := (size + d.blockSize - 1) / d.blockSize
	if entries < need {
		return nil, corruptf("vhd: %d BAT entries, %d needed", entries, need)
	}
	if need*4 > qcowMaxTableLen {
		return nil, corruptf("vhd: BAT of %d entries too large", need)
	}
	if need*4 > fileSize {
		return nil, corruptf("vhd: BAT of %d entries larger than the image", need)
	}
	raw := make([]byte, need*4)
	if err := readFull(r, fileSize, raw, batOff, "vhd BAT"); err != nil {
		return nil, err
	}
	d.bat = make([]uint32, need)
	for i := range d.bat {
		d.bat[i] = be.Uint32(raw[i*4:])
	}
	d.bitmapSize = (d.blockSize/512/8 + 511) / 512 * 512
	return d, nil
}

func (d *vhdDisk) Size() int64 { return d.size }

func (d *vhdDisk) ReadAt(p []byte, off int64) (int, error) {
	return readBlocks(d, d.blockSize, d.size, p, off)
}

func (d *vhdDisk) readBlock(p []byte, blk, within int64) error {
	e := d.bat[blk]
	if e == vhdUnused {
		clear(p)
		return nil
	}
	start := int64(e)*512 + d.bitmapSize
	if e == 0 {
		return corruptf("vhd: block %d points at the footer copy", blk)
	}
	// The sector bitmap is not consulted for dynamic disks, as in QEMU.
	return readFull(d.r, d.fileSize, p, start+within, "vhd block")
}
