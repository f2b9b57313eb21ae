package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/containerd/stargz-snapshotter/estargz"
	"github.com/containerd/stargz-snapshotter/estargz/zstdchunked"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// maxTOC bounds a table of contents, compressed and as JSON.
const maxTOC = 64 << 20

// tocAnnotations are the layer annotations that record a table of
// contents' digest: eStargz's over the JSON, zstd:chunked's over the
// compressed table.
var tocAnnotations = []string{estargz.TOCJSONDigestAnnotation, zstdchunked.ManifestChecksumAnnotation}

// tocDecompressor is what readTOC needs of an estargz decompressor.
type tocDecompressor interface {
	estargz.Decompressor
	DecompressTOC(io.Reader) (io.ReadCloser, error)
}

// decompressors are the table-of-contents formats, in the order their
// footers are tried: eStargz, legacy stargz, zstd:chunked.
func decompressors() []tocDecompressor {
	return []tocDecompressor{new(estargz.GzipDecompressor), new(estargz.LegacyGzipDecompressor), new(zstdchunked.Decompressor)}
}

// applyRanged applies a layer through its table of contents when it has
// one whose digest the manifest records and its store reads by range: the
// table is fetched and verified, its entries applied as the tar's would
// be, and each file's content is fetched by range when the audit opens it.
// It reports false, having fetched nothing, for any other layer.
func applyRanged(ctx context.Context, t *Tree, i int, l layerRef) (bool, error) {
	if l.at == nil {
		return false, nil
	}
	annotated := false
	for _, a := range tocAnnotations {
		annotated = annotated || l.desc.Annotations[a] != ""
	}
	if !annotated {
		return false, nil
	}
	ra, err := l.at(ctx)
	if err != nil {
		return false, err
	}
	toc, err := readTOC(ra, l.desc)
	if errors.Is(err, errNoRanges) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("table of contents: %w", err)
	}
	if err := applyTOC(t, i, toc, ra); err != nil {
		return false, err
	}
	return true, nil
}

// table is a verified table of contents: its entries, where the files'
// compressed payload ends, and how to decompress a chunk.
type table struct {
	*estargz.JTOC
	payloadEnd int64
	d          estargz.Decompressor
}

// readTOC fetches a layer's footer and table of contents and checks the
// table against the digest the manifest records.
func readTOC(ra io.ReaderAt, desc v1.Descriptor) (*table, error) {
	size := desc.Size
	var maxFooter int64
	for _, d := range decompressors() {
		maxFooter = max(maxFooter, d.FooterSize())
	}
	tail := make([]byte, min(maxFooter, size))
	if _, err := ra.ReadAt(tail, size-int64(len(tail))); err != nil {
		return nil, fmt.Errorf("footer: %w", err)
	}
	var errs []error
	for _, d := range decompressors() {
		fs := d.FooterSize()
		if int64(len(tail)) < fs {
			continue
		}
		var payload, off, n int64
		err := safely(func() (err error) {
			payload, off, n, err = d.ParseFooter(tail[int64(len(tail))-fs:])
			return err
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n <= 0 {
			n = size - off - fs
		}
		if payload < 0 {
			payload = off
		}
		if off < 0 || n <= 0 || off > size-fs || n > size-fs-off || payload > off {
			return nil, fmt.Errorf("%w: the footer places the table at %d (+%d) in a %d-byte blob", ErrCorrupt, off, n, size)
		}
		if n > maxTOC {
			return nil, fmt.Errorf("%w: a %d-byte table of contents, over %d", ErrTooLarge, n, maxTOC)
		}
		raw := make([]byte, n)
		if _, err := ra.ReadAt(raw, off); err != nil {
			return nil, fmt.Errorf("read: %w", err)
		}
		var js []byte
		err = safely(func() error {
			rc, err := d.DecompressTOC(bytes.NewReader(raw))
			if err != nil {
				return err
			}
			defer rc.Close()
			js, err = io.ReadAll(io.LimitReader(rc, maxTOC+1))
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		if len(js) > maxTOC {
			return nil, fmt.Errorf("%w: the table of contents is over %d bytes as JSON", ErrTooLarge, maxTOC)
		}
		if err := checkTOCDigest(desc, raw, js); err != nil {
			return nil, err
		}
		var toc estargz.JTOC
		if err := json.Unmarshal(js, &toc); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return &table{JTOC: &toc, payloadEnd: payload, d: d}, nil
	}
	return nil, fmt.Errorf("%w: no eStargz or zstd:chunked footer: %w", ErrCorrupt, errors.Join(errs...))
}

// safely runs a parser of the estargz library, which can panic on a
// hostile footer (it slices by lengths the footer claims): a panic is a
// corrupt layer, not a crash.
func safely(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrCorrupt, r)
		}
	}()
	return f()
}

// checkTOCDigest checks every table digest the descriptor records.
func checkTOCDigest(desc v1.Descriptor, raw, js []byte) error {
	for _, c := range []struct {
		annotation string
		over       []byte
	}{
		{estargz.TOCJSONDigestAnnotation, js},
		{zstdchunked.ManifestChecksumAnnotation, raw},
	} {
		want := desc.Annotations[c.annotation]
		if want == "" {
			continue
		}
		sum := sha256.Sum256(c.over)
		if got := "sha256:" + hex.EncodeToString(sum[:]); got != want {
			return fmt.Errorf("%w: digest mismatch: the table is %s, the manifest says %s", ErrCorrupt, got, want)
		}
	}
	return nil
}

// chunk is where one piece of a file lies in the blob: the compressed
// range [off, next), InnerOffset bytes into its decompressed stream, size
// bytes at fileOff in the file.
type chunk struct {
	off, next, inner, fileOff, size int64
}

// applyTOC applies a table's entries in order, as the layer's tar entries.
func applyTOC(t *Tree, layer int, toc *table, ra io.ReaderAt) error {
	ents := toc.Entries
	tocOff, d := toc.payloadEnd, toc.d
	// Where each data entry's compressed bytes end: the next entry's
	// start, or the table's for the last one (estargz's own rule).
	next := make([]int64, len(ents))
	last := tocOff
	for k := len(ents) - 1; k >= 0; k-- {
		e := ents[k]
		if e.Type == "reg" || e.Type == "chunk" {
			next[k] = last
		}
		if e.Offset != 0 && e.InnerOffset == 0 {
			last = e.Offset
		}
	}
	for k := 0; k < len(ents); k++ {
		e := ents[k]
		hdr := &tar.Header{Name: e.Name, Linkname: e.LinkName, Size: e.Size, Mode: e.Mode}
		hdr.ModTime, _ = time.Parse(time.RFC3339, e.ModTime3339)
		var lazy *lazyFile
		switch e.Type {
		case "dir":
			hdr.Typeflag = tar.TypeDir
		case "reg":
			hdr.Typeflag = tar.TypeReg
			var chunks []chunk
			for j := k; j < len(ents) && (j == k || ents[j].Type == "chunk"); j++ {
				c := ents[j]
				size := c.ChunkSize
				if size == 0 {
					size = e.Size - c.ChunkOffset
				}
				chunks = append(chunks, chunk{off: c.Offset, next: next[j], inner: c.InnerOffset, fileOff: c.ChunkOffset, size: size})
				if j > k {
					k = j
				}
			}
			if e.Size > 0 {
				lazy = &lazyFile{read: fileReader(ra, d, e.Name, e.Size, e.Digest, tocOff, chunks)}
			}
		case "symlink":
			hdr.Typeflag = tar.TypeSymlink
		case "hardlink":
			hdr.Typeflag = tar.TypeLink
		case "char":
			hdr.Typeflag = tar.TypeChar
		case "block":
			hdr.Typeflag = tar.TypeBlock
		case "fifo":
			hdr.Typeflag = tar.TypeFifo
		case "chunk":
			return fmt.Errorf("%w: table of contents: a chunk of %s follows no file", ErrCorrupt, e.Name)
		default:
			continue
		}
		if err := t.apply(layer, hdr, nil, lazy); err != nil {
			return err
		}
	}
	return nil
}

// fileReader returns the function that fetches a file's chunks by range,
// decompresses them, and checks the whole against the digest the table
// records.
func fileReader(ra io.ReaderAt, d estargz.Decompressor, name string, size int64, digest string, tocOff int64, chunks []chunk) func() ([]byte, error) {
	return func() ([]byte, error) {
		if !strings.HasPrefix(digest, "sha256:") {
			return nil, fmt.Errorf("%w: %s: the table of contents records no sha256 digest", ErrCorrupt, name)
		}
		if size > rootfs.MaxReadFile {
			return nil, fmt.Errorf("%d bytes, over %d: %w", size, rootfs.MaxReadFile, rootfs.ErrTooLarge)
		}
		lo, hi := chunks[0].off, chunks[len(chunks)-1].next
		for _, c := range chunks {
			if c.off < 0 || c.next <= c.off || c.next > tocOff || c.inner < 0 || c.fileOff < 0 || c.size < 0 || c.fileOff+c.size > size {
				return nil, fmt.Errorf("%w: %s: a chunk lies outside the blob or the file", ErrCorrupt, name)
			}
			lo, hi = min(lo, c.off), max(hi, c.next)
		}
		if hi-lo > rootfs.MaxReadFile+(1<<20) {
			return nil, fmt.Errorf("%w: %s: %d compressed bytes for a %d-byte file", ErrCorrupt, name, hi-lo, size)
		}
		raw := make([]byte, hi-lo)
		if _, err := ra.ReadAt(raw, lo); err != nil {
			return nil, fmt.Errorf("fetch %s: %w", name, err)
		}
		out := make([]byte, size)
		for _, c := range chunks {
			zr, err := d.Reader(bytes.NewReader(raw[c.off-lo : c.next-lo]))
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, name, err)
			}
			_, err = io.CopyN(io.Discard, zr, c.inner)
			if err == nil {
				_, err = io.ReadFull(zr, out[c.fileOff:c.fileOff+c.size])
			}
			zr.Close()
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, name, err)
			}
		}
		sum := sha256.Sum256(out)
		if got := "sha256:" + hex.EncodeToString(sum[:]); got != digest {
			return nil, fmt.Errorf("%w: %s: content digest %s, the table of contents says %s", ErrCorrupt, name, got, digest)
		}
		return out, nil
	}
}
