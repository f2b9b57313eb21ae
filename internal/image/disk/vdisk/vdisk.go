// Package vdisk owns virtual disk containers: it turns a raw, qcow2, VMDK,
// VHD or VHDX file into an io.ReaderAt over the guest disk's bytes. It reads
// only the blocks asked for (plus the tables that map them), keeps its table
// caches bounded, checks every offset it reads from the container against the
// container's size, and reports corrupt or truncated input as an error
// wrapping [ErrCorrupt], never a panic or a hang. It never writes.
package vdisk

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/amilint/amilint/internal/image/integrity"
)

// ErrCorrupt reports a container whose structures are inconsistent,
// truncated or out of bounds.
var ErrCorrupt = errors.New("corrupt disk image")

// ErrUnsupported reports a valid container using a feature amilint does not
// read (encryption, external data files).
var ErrUnsupported = errors.New("unsupported disk image feature")

// ErrBacking reports an image that needs a backing (parent) file that was
// not given. Reading it alone would silently return zeros for every block
// the parent holds.
var ErrBacking = errors.New("disk image has a backing file")

// Disk is a guest disk: its bytes and its size.
type Disk interface {
	io.ReaderAt
	// Size is the guest disk's size in bytes.
	Size() int64
}

// Format names a container format.
type Format string

// The container formats Open recognises.
const (
	Raw   Format = "raw"
	QCOW2 Format = "qcow2"
	VMDK  Format = "vmdk"
	VHD   Format = "vhd"
	VHDX  Format = "vhdx"
)

// Options tune Open.
type Options struct {
	// Backing is the guest disk of a qcow2 image's backing file or of a
	// VHD or VHDX differencing disk's parent. Without it an image that
	// names one fails with ErrBacking.
	Backing Disk
	// Check decides what a structure that fails its checksum in every
	// copy does (nil: it is an error).
	Check *integrity.Checker
}

// Warnings says, one line each, which copy of a redundant structure d was
// read from because the other failed its checks (a VHDX header or region
// table); it is empty for the other formats.
func Warnings(d Disk) []string {
	if w, ok := d.(interface{ warnings() []string }); ok {
		return w.warnings()
	}
	return nil
}

// Detect names the container format of r by its magic bytes. Anything
// unrecognised is Raw.
func Detect(r io.ReaderAt, size int64) Format {
	var head [8]byte
	if n, _ := r.ReadAt(head[:], 0); n == len(head) {
		switch {
		case string(head[:4]) == "QFI\xfb":
			return QCOW2
		case string(head[:4]) == "KDMV":
			return VMDK
		case string(head[:8]) == "vhdxfile":
			return VHDX
		case string(head[:8]) == "conectix":
			return VHD
		case string(head[:8]) == "# Disk D":
			return VMDK // a text descriptor; OpenVMDK explains
		}
	}
	if size >= 512 {
		var foot [8]byte
		if n, _ := r.ReadAt(foot[:], size-512); n == len(foot) && string(foot[:]) == "conectix" {
			return VHD
		}
	}
	return Raw
}

// Open detects r's container format and returns its guest disk.
func Open(r io.ReaderAt, size int64, opt Options) (Disk, Format, error) {
	f := Detect(r, size)
	var (
		d   Disk
		err error
	)
	switch f {
	case QCOW2:
		d, err = OpenQCOW2(r, size, opt.Backing)
	case VMDK:
		d, err = OpenVMDK(r, size)
	case VHD:
		d, err = OpenVHD(r, size, opt.Backing)
	case VHDX:
		d, err = openVHDX(r, size, opt.Backing, opt.Check)
	default:
		d = NewRaw(r, size)
	}
	if err != nil {
		return nil, f, fmt.Errorf("open %s image: %w", f, err)
	}
	if opt.Backing != nil && !hasBacking(d) {
		// Ignoring it would read another disk than the user named.
		return nil, f, fmt.Errorf("open %s image: a backing file was given, but the image has none: %w", f, ErrNoBacking)
	}
	return d, f, nil
}

// ErrNoBacking reports a backing (parent) disk given for an image that
// names none.
var ErrNoBacking = errors.New("disk image has no backing file")

// hasBacking reports whether d reads from a backing or parent disk.
func hasBacking(d Disk) bool {
	switch d := d.(type) {
	case *qcow2Disk:
		return d.backing != nil
	case *vhdDisk:
		return d.parent != nil
	case *vhdxDisk:
		return d.parent != nil
	}
	return false
}

// NewRaw returns the disk that is r's first size bytes.
func NewRaw(r io.ReaderAt, size int64) Disk { return io.NewSectionReader(r, 0, size) }

// Counter is an io.ReaderAt that counts what passes through it, so a caller
// can report how many bytes of an image a scan read.
type Counter struct {
	r     io.ReaderAt
	bytes atomic.Int64
	reads atomic.Int64
}

// NewCounter counts reads of r.
func NewCounter(r io.ReaderAt) *Counter { return &Counter{r: r} }

// ReadAt reads from the underlying reader and counts the bytes returned.
func (c *Counter) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.bytes.Add(int64(n))
	c.reads.Add(1)
	return n, err
}

// Bytes is the number of bytes read so far.
func (c *Counter) Bytes() int64 { return c.bytes.Load() }

// Reads is the number of ReadAt calls so far.
func (c *Counter) Reads() int64 { return c.reads.Load() }

// corruptf returns an error wrapping ErrCorrupt.
func corruptf(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, a...))
}

// readFull reads exactly len(p) bytes of the container at off, failing with
// ErrCorrupt when the range lies outside the container's size.
func readFull(r io.ReaderAt, size int64, p []byte, off int64, what string) error {
	if off < 0 || int64(len(p)) > size || off > size-int64(len(p)) {
		return corruptf("%s at offset %d (+%d) lies past the end of the image (%d bytes)", what, off, len(p), size)
	}
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return corruptf("%s at offset %d: truncated image", what, off)
	}
	return fmt.Errorf("read %s at offset %d: %w", what, off, err)
}

// blockReader reads part of one guest block.
type blockReader interface {
	// readBlock fills p with the bytes of block blk starting at offset
	// within it; p never crosses the block's end.
	readBlock(p []byte, blk, within int64) error
}

// readBlocks implements ReadAt for a disk of size bytes in blocks of bs
// bytes, splitting the request at block boundaries.
func readBlocks(br blockReader, bs, size int64, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read at %d: %w", off, errors.New("negative offset"))
	}
	if off >= size {
		return 0, io.EOF
	}
	want := len(p)
	if int64(want) > size-off {
		p = p[:size-off]
	}
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		blk, within := pos/bs, pos%bs
		chunk := p[n:]
		if int64(len(chunk)) > bs-within {
			chunk = chunk[:bs-within]
		}
		if err := br.readBlock(chunk, blk, within); err != nil {
			return n, err
		}
		n += len(chunk)
	}
	if n < want {
		return n, io.EOF
	}
	return n, nil
}
