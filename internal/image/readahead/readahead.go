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
	for range maxLayers {
		if off < 0 || n <= 0 {
			return
		}
		switch v := r.(type) {
		case Source:
			v.Prefetch(off, n)
			return
		case *io.SectionReader:
			outer, base, size := v.Outer()
			if off >= size {
				return
			}
			r, off, n = outer, base+off, min(n, size-off)
		default:
			return
		}
	}
}
