// Package readahead carries a reader's notice of the bytes it will read
// soon down to the source under it, through the layers in between, when
// that source's reads are round trips to a service (an EBS snapshot read
// block by block): it can then fetch them side by side instead of one
// after another. On any other source a notice costs a type switch.
package readahead

import "io"

// Source is a reader that can start fetching bytes in the background.
type Source interface {
	// Prefetch starts fetching the n bytes at off that are neither
	// fetched nor being fetched, and returns at once. A failed fetch is
	// reported to the read that needs it.
	Prefetch(off, n int64)
}

// maxLayers bounds the layers Hint looks through.
const maxLayers = 8

// Hint tells the Source under r, if any, that the n bytes at off of r will
// be read soon. It looks through io.SectionReaders (a partition of a raw
// disk); any other layer ends the search, and so does a range that is not
// inside a section.
func Hint(r io.ReaderAt, off, n int64) {
	if src, off, n, ok := reach(r, off, n); ok {
		src.Prefetch(off, n)
	}
}

// Accepts reports whether a Source lies under r, so that a reader can
// skip working out what to Hint where nothing would take it.
func Accepts(r io.ReaderAt) bool {
	_, _, _, ok := reach(r, 0, 1)
	return ok
}

// reach returns the Source under r and where the n bytes at off of r lie
// in it, clipped to every section on the way.
func reach(r io.ReaderAt, off, n int64) (Source, int64, int64, bool) {
	for range maxLayers {
		if off < 0 || n <= 0 {
			return nil, 0, 0, false
		}
		switch v := r.(type) {
		case Source:
			return v, off, n, true
		case *io.SectionReader:
			outer, base, size := v.Outer()
			if off >= size {
				return nil, 0, 0, false
			}
			r, off, n = outer, base+off, min(n, size-off)
		default:
			return nil, 0, 0, false
		}
	}
	return nil, 0, 0, false
}
