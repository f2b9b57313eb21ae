package vdisk

import (
	"errors"
	"io"

	"github.com/klauspost/compress/zstd"
)

// Compressed clusters and grains are read to the end of their stream:
// zlib checks its Adler-32 only there, and a deflate or zstd stream that
// goes on past the cluster's size is not the cluster the image claims.

// readToEnd fills out from zr, a deflate or zlib stream that must end
// exactly there; reading on must give io.EOF, which makes zlib check its
// Adler-32 trailer.
func readToEnd(zr io.Reader, out []byte) error {
	if _, err := io.ReadFull(zr, out); err != nil {
		return err
	}
	var one [1]byte
	switch _, err := io.ReadFull(zr, one[:]); {
	case err == nil:
		return errors.New("the stream holds more than the cluster")
	case errors.Is(err, io.EOF):
		return nil
	default:
		return err
	}
}

// readZstdToEnd fills out with the zstd frames at the start of src, the
// data of a qcow2 cluster, as qemu reads them: frame after frame until
// the cluster is full, the last frame ending exactly there; what follows
// it is padding or the next cluster. Each frame is decoded whole, so its
// content size and checksum (when it has them) are checked.
func readZstdToEnd(dec *zstd.Decoder, src, out []byte) error {
	got := out[:0]
	for len(got) < len(out) {
		n, err := zstdFrameLen(src)
		if err != nil {
			return err
		}
		if got, err = dec.DecodeAll(src[:n], got); err != nil {
			return err
		}
		src = src[n:]
	}
	if len(got) != len(out) || &got[0] != &out[0] {
		return errors.New("the stream holds more than the cluster")
	}
	return nil
}

// zstdFrameLen is the length of the zstd frame at the start of src
// (RFC 8878 section 3.1.1): its header, its blocks, its checksum.
func zstdFrameLen(src []byte) (int, error) {
	var h zstd.Header
	if err := h.Decode(src); err != nil {
		return 0, err
	}
	if h.Skippable {
		n := h.HeaderSize + int(h.SkippableSize)
		if n > len(src) {
			return 0, io.ErrUnexpectedEOF
		}
		return n, nil
	}
	pos := h.HeaderSize
	for {
		if pos+3 > len(src) {
			return 0, io.ErrUnexpectedEOF
		}
		bh := int(src[pos]) | int(src[pos+1])<<8 | int(src[pos+2])<<16
		pos += 3
		switch bh >> 1 & 3 {
		case 0, 2: // raw, compressed
			pos += bh >> 3
		case 1: // RLE: one byte
			pos++
		default:
			return 0, zstd.ErrReservedBlockType
		}
		if pos > len(src) {
			return 0, io.ErrUnexpectedEOF
		}
		if bh&1 == 1 {
			break
		}
	}
	if h.HasCheckSum {
		pos += 4
	}
	if pos > len(src) {
		return 0, io.ErrUnexpectedEOF
	}
	return pos, nil
}
