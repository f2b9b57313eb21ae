package oci

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/amilint/amilint/internal/image/fs/tarfs"
)

// applyStream streams layer l once into t: its bytes as stored are checked
// against the descriptor (size and digest) and, decompressed, against the
// diff ID; the decompressor reads to the end of its stream (a gzip or zstd
// trailer checked), and nothing but padding may follow the tar's end.
func applyStream(ctx context.Context, t *Tree, i int, l layerRef) error {
	rc, err := l.open(ctx)
	if err != nil {
		return err
	}
	defer rc.Close()
	raw, err := newVerifier(rc, l.desc)
	if err != nil {
		return err
	}
	br := bufio.NewReaderSize(raw, 64<<10)
	head, err := br.Peek(512)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	comp, ok := tarfs.DetectHead(head)
	if !ok {
		if len(head) == 0 {
			// An empty blob is no tar at all; an empty layer is a tar of
			// two zero blocks.
			return fmt.Errorf("%w: the layer is empty", ErrCorrupt)
		}
		return fmt.Errorf("%w: not a tar stream (gzip, zstd or plain)", ErrCorrupt)
	}
	var stream io.Reader = br
	var zr io.ReadCloser
	if comp != tarfs.Plain {
		if zr, err = tarfs.Decompress(br, comp); err != nil {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		defer zr.Close()
		stream = zr
	}
	diff, err := hasher(l.diffID)
	if err != nil {
		return fmt.Errorf("diff ID: %w", err)
	}
	tee := io.TeeReader(stream, diff)
	if err := t.ApplyLayer(i, tee); err != nil {
		return err
	}
	// Past the end-of-archive marker: padding only, read to the end of the
	// decompressed stream so its trailer is checked and the diff ID covers
	// every byte.
	n, err := io.Copy(io.Discard, io.LimitReader(tee, maxTrailer+1))
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if n > maxTrailer {
		return fmt.Errorf("%w: more than %d bytes after the end of the tar archive", ErrCorrupt, maxTrailer)
	}
	if comp != tarfs.Plain {
		// The compressed stream ends with the decompressor's; what follows
		// it in the blob is a corruption the digest check reports.
		if _, err := io.Copy(io.Discard, br); err != nil {
			return err
		}
	}
	if err := raw.check(); err != nil {
		return err
	}
	if got := hex.EncodeToString(diff.Sum(nil)); got != l.diffID.Hex {
		return fmt.Errorf("%w: diff ID mismatch: the uncompressed layer is sha256:%s, the configuration says %s", ErrCorrupt, got, l.diffID)
	}
	return nil
}
