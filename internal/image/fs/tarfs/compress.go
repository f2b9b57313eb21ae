package tarfs

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// A compressed tarball is read to the end of its compressed stream, on
// every path (a file, a stream): that is where the trailers are (gzip's
// CRC-32 and length of each member, zstd's frame checksums and content
// sizes), and a tarball whose checksum does not match is corrupt even when
// its tar headers parse. The decompressors check the trailers only when
// read to their end; finish does that after the archive's end marker.

// maxTrailing bounds the decompressed bytes allowed after the tar
// end-of-archive marker: the zero padding to the record size (10 KiB for
// GNU tar's default) and more, but not an archive whose end marker hides
// another one or unbounded data.
const maxTrailing = 1 << 20

// gzipReserved are the FLG bits RFC 1952 reserves; gzip refuses a member
// with any of them set, and so does this reader (compress/gzip ignores
// them).
const gzipReserved = 0xe0

// decompressor decompresses r, a gzip or zstd stream; it is the one
// reader of both a tarball given as a file and one read from a stream.
func decompressor(r io.Reader, comp Compression) (io.ReadCloser, error) {
	switch comp {
	case Gzip:
		return newGzipReader(r)
	case Zstd:
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w: %w", ErrCorrupt, err)
		}
		return &zstdReader{zr: zr}, nil
	}
	return nil, fmt.Errorf("%s compression is not supported: decompress the tarball first", comp)
}

// gzipReader reads every member of a gzip file (RFC 1952) in turn, each
// checked against its CRC-32 and length, refusing reserved flags and
// anything after the last member that is not another member.
type gzipReader struct {
	br     *bufio.Reader
	zr     *gzip.Reader
	member int
	err    error
}

func newGzipReader(r io.Reader) (*gzipReader, error) {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReader(r)
	}
	g := &gzipReader{br: br}
	if err := g.next(); err != nil {
		return nil, err
	}
	return g, nil
}

// next starts the next member.
func (g *gzipReader) next() error {
	g.member++
	head, err := g.br.Peek(4)
	if err != nil || head[0] != 0x1f || head[1] != 0x8b {
		if g.member > 1 {
			return fmt.Errorf("gzip: %w: data after member %d is not a gzip member", ErrCorrupt, g.member-1)
		}
		return fmt.Errorf("gzip: %w: %w", ErrCorrupt, gzip.ErrHeader)
	}
	if head[3]&gzipReserved != 0 {
		return fmt.Errorf("gzip: %w: member %d has reserved flags 0x%02x", ErrCorrupt, g.member, head[3]&gzipReserved)
	}
	if g.zr == nil {
		g.zr, err = gzip.NewReader(g.br)
	} else {
		err = g.zr.Reset(g.br)
	}
	if err != nil {
		return fmt.Errorf("gzip: %w: member %d: %s", ErrCorrupt, g.member, gzipProblem(err))
	}
	g.zr.Multistream(false)
	return nil
}

func (g *gzipReader) Read(p []byte) (int, error) {
	for g.err == nil {
		n, err := g.zr.Read(p)
		switch {
		case err == nil:
			return n, nil
		case errors.Is(err, io.EOF):
			// The member ended, its CRC and length checked: another one,
			// or the end of the file.
			if _, perr := g.br.Peek(1); errors.Is(perr, io.EOF) {
				g.err = io.EOF
			} else if nerr := g.next(); nerr != nil {
				g.err = nerr
			}
			if n > 0 {
				return n, nil
			}
		default:
			g.err = fmt.Errorf("gzip: %w: member %d: %s", ErrCorrupt, g.member, gzipProblem(err))
			return n, g.err
		}
	}
	return 0, g.err
}

func (g *gzipReader) Close() error { return g.zr.Close() }

// gzipProblem says in words what a gzip or deflate error means.
func gzipProblem(err error) string {
	var ce flate.CorruptInputError
	switch {
	case errors.Is(err, gzip.ErrChecksum):
		return "the data does not match the CRC-32 or length in its trailer"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "the stream ends before its trailer (truncated)"
	case errors.Is(err, gzip.ErrHeader):
		return "invalid header"
	case errors.As(err, &ce):
		return fmt.Sprintf("invalid deflate data at byte %d of the member", int64(ce))
	}
	return err.Error()
}

// zstdReader marks every decoding error as corruption.
type zstdReader struct{ zr *zstd.Decoder }

func (z *zstdReader) Read(p []byte) (int, error) {
	n, err := z.zr.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = fmt.Errorf("zstd: %w: %w", ErrCorrupt, err)
	}
	return n, err
}

func (z *zstdReader) Close() error { z.zr.Close(); return nil }

// finish reads what follows the end-of-archive marker in a decompressed
// stream, so the decompressor reaches and checks every trailer; more than
// maxTrailing bytes there is corruption.
func finish(r io.Reader) error {
	n, err := io.Copy(io.Discard, io.LimitReader(r, maxTrailing+1))
	if err != nil {
		return err
	}
	if n > maxTrailing {
		return fmt.Errorf("%w: more than %d bytes after the end of the archive", ErrCorrupt, maxTrailing)
	}
	return nil
}
