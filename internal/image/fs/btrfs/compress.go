package btrfs

import (
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// Compression types of file extents (BTRFS_COMPRESS_*).
const (
	compNone = 0
	compZlib = 1
	compLZO  = 2
	compZstd = 3
)

// maxCompressed bounds a compressed extent, both as stored and
// decompressed: btrfs compresses at most 128 KiB at a time
// (BTRFS_MAX_UNCOMPRESSED).
const maxCompressed = 128 << 10

// decompress decompresses src, compressed with comp, into ram bytes: a
// stream that ends early leaves zeros, as the kernel's decompressors
// zero the rest of the pages; bytes past ram are not decompressed.
func decompress(comp uint8, src []byte, ram int, sectorSize int) ([]byte, error) {
	if ram < 0 || ram > maxCompressed || len(src) > maxCompressed {
		return nil, fmt.Errorf("compressed extent of %d bytes holding %d: %w", len(src), ram, ErrCorrupt)
	}
	out := make([]byte, ram)
	var err error
	switch comp {
	case compZlib:
		err = inflate(out, src)
	case compZstd:
		err = unzstd(out, src)
	case compLZO:
		err = unlzoSegments(out, src, sectorSize)
	default:
		return nil, fmt.Errorf("compression type %d: %w", comp, ErrUnsupported)
	}
	if err != nil {
		return nil, fmt.Errorf("decompress %s extent: %w", compName(comp), err)
	}
	return out, nil
}

func compName(c uint8) string {
	switch c {
	case compZlib:
		return "zlib"
	case compLZO:
		return "lzo"
	case compZstd:
		return "zstd"
	}
	return fmt.Sprintf("type %d", c)
}

// readUpTo fills out from r; a stream ending early is no error.
func readUpTo(out []byte, r io.Reader) error {
	_, err := io.ReadFull(r, out)
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil
	}
	return fmt.Errorf("%v: %w", err, ErrCorrupt)
}

func inflate(out, src []byte) error {
	r, err := zlib.NewReader(bytes.NewReader(src))
	if err != nil {
		return fmt.Errorf("%v: %w", err, ErrCorrupt)
	}
	return readUpTo(out, r)
}

// zstdPool holds streaming decoders: a stream is read only as far as the
// extent's bytes go, since the sector padding after a frame is no frame.
var zstdPool = sync.Pool{New: func() any {
	d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
		zstd.WithDecoderMaxWindow(1<<20), zstd.WithDecoderMaxMemory(4<<20))
	if err != nil {
		return err
	}
	return d
}}

func unzstd(out, src []byte) error {
	v := zstdPool.Get()
	d, ok := v.(*zstd.Decoder)
	if !ok {
		return fmt.Errorf("zstd decoder: %v", v)
	}
	defer zstdPool.Put(d)
	if err := d.Reset(bytes.NewReader(src)); err != nil {
		return fmt.Errorf("%v: %w", err, ErrCorrupt)
	}
	// The kernel (zstd_decompress in fs/btrfs/zstd.c) stops at the end of
	// the frame: a file's last extent holds less than its ram_bytes, and
	// the sector's padding after the frame is no frame.
	n, err := io.ReadFull(d, out)
	if err != nil && n > 0 && errors.Is(err, zstd.ErrMagicMismatch) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil
	}
	return fmt.Errorf("%v: %w", err, ErrCorrupt)
}

// unlzoSegments decompresses btrfs's LZO format (fs/btrfs/lzo.c): a
// little-endian 32-bit total length, then segments, each a 32-bit length
// and LZO1X data of at most one sector decompressed; a segment header
// never straddles a sector boundary (the rest of the sector is padding).
func unlzoSegments(out, src []byte, sectorSize int) error {
	if len(src) < 4 {
		return fmt.Errorf("lzo: %d bytes: %w", len(src), ErrCorrupt)
	}
	total := int(le.Uint32(src))
	if total < 4 || total > len(src) {
		return fmt.Errorf("lzo: total length %d of %d bytes: %w", total, len(src), ErrCorrupt)
	}
	pos, done := 4, 0
	for pos < total && done < len(out) {
		if left := sectorSize - pos%sectorSize; left < 4 {
			pos += left
			continue
		}
		if total-pos < 4 {
			return fmt.Errorf("lzo: segment header at %d: %w", pos, ErrCorrupt)
		}
		n := int(le.Uint32(src[pos:]))
		pos += 4
		if n > total-pos || n > 2*sectorSize {
			return fmt.Errorf("lzo: segment of %d bytes at %d: %w", n, pos, ErrCorrupt)
		}
		seg := out[done:min(len(out), done+sectorSize)]
		got, err := lzo1xDecompress(seg, src[pos:pos+n])
		if err != nil && !errors.Is(err, errOutputFull) {
			return err
		}
		done += got
		pos += n
		if got < sectorSize {
			break // the last segment
		}
	}
	return nil
}

var errOutputFull = errors.New("lzo: output full")

// lzo1xDecompress decompresses one LZO1X block into dst and returns the
// bytes written; it follows the Linux kernel's lzo1x_decompress_safe
// (lib/lzo/lzo1x_decompress_safe.c), checking every read and copy. Output
// past len(dst) is not written: errOutputFull says so, with dst full.
func lzo1xDecompress(dst, src []byte) (int, error) {
	corrupt := func(what string) (int, error) {
		return 0, fmt.Errorf("lzo: %s: %w", what, ErrCorrupt)
	}
	ip, op := 0, 0
	next := func() (int, bool) {
		if ip >= len(src) {
			return 0, false
		}
		ip++
		return int(src[ip-1]), true
	}
	// runLength reads the zero-extended length after an opcode.
	runLength := func(base int) (int, bool) {
		t := 0
		for ip < len(src) && src[ip] == 0 {
			t += 255
			ip++
			if t > 1<<24 {
				return 0, false
			}
		}
		b, ok := next()
		return t + base + b, ok
	}
	copyLiterals := func(t int) error {
		if t > len(src)-ip {
			return fmt.Errorf("lzo: literal run past the input: %w", ErrCorrupt)
		}
		if t > len(dst)-op {
			op += copy(dst[op:], src[ip:ip+t])
			return errOutputFull
		}
		op += copy(dst[op:], src[ip:ip+t])
		ip += t
		return nil
	}
	copyMatch := func(mpos, t int) error {
		if mpos < 0 || mpos >= op {
			return fmt.Errorf("lzo: match before the output: %w", ErrCorrupt)
		}
		for range t {
			if op >= len(dst) {
				return errOutputFull
			}
			dst[op] = dst[mpos]
			op, mpos = op+1, mpos+1
		}
		return nil
	}
	state := 0
	if len(src) < 3 {
		return corrupt("input too short")
	}
	var t, nextLits int
	if src[0] > 17 {
		t = int(src[0]) - 17
		ip = 1
		if t < 4 {
			nextLits = t
			if err := copyLiterals(nextLits); err != nil {
				return op, err
			}
			state = nextLits
		} else {
			if err := copyLiterals(t); err != nil {
				return op, err
			}
			state = 4
		}
	}
	for {
		t, ok := next()
		if !ok {
			return corrupt("input ends without an end marker")
		}
		var mpos, length int
		switch {
		case t < 16:
			switch state {
			case 0:
				if t == 0 {
					if t, ok = runLength(15); !ok {
						return corrupt("literal length")
					}
				}
				if err := copyLiterals(t + 3); err != nil {
					return op, err
				}
				state = 4
				continue
			case 4:
				nextLits = t & 3
				b, ok := next()
				if !ok {
					return corrupt("match distance")
				}
				mpos = op - (1 + 0x800) - t>>2 - b<<2
				length = 3
			default:
				nextLits = t & 3
				b, ok := next()
				if !ok {
					return corrupt("match distance")
				}
				mpos = op - 1 - t>>2 - b<<2
				length = 2
			}
		case t >= 64:
			nextLits = t & 3
			b, ok := next()
			if !ok {
				return corrupt("match distance")
			}
			mpos = op - 1 - (t>>2)&7 - b<<3
			length = t>>5 - 1 + 2
		case t >= 32:
			length = t&31 + 2
			if length == 2 {
				if length, ok = runLength(31 + 2); !ok {
					return corrupt("match length")
				}
			}
			if len(src)-ip < 2 {
				return corrupt("match distance")
			}
			d := int(le.Uint16(src[ip:]))
			ip += 2
			mpos = op - 1 - d>>2
			nextLits = d & 3
		default: // 16..31
			mpos = op - (t&8)<<11
			length = t&7 + 2
			if length == 2 {
				if length, ok = runLength(7 + 2); !ok {
					return corrupt("match length")
				}
			}
			if len(src)-ip < 2 {
				return corrupt("match distance")
			}
			d := int(le.Uint16(src[ip:]))
			ip += 2
			mpos -= d >> 2
			nextLits = d & 3
			if mpos == op {
				// The end marker: a match of length 3 at distance 0.
				if length != 3 || ip != len(src) {
					return corrupt("trailing bytes after the end marker")
				}
				return op, nil
			}
			mpos -= 0x4000
		}
		if err := copyMatch(mpos, length); err != nil {
			return op, err
		}
		if err := copyLiterals(nextLits); err != nil {
			return op, err
		}
		state = nextLits
	}
}
