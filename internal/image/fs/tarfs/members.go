package tarfs

import (
	"archive/tar"
	"fmt"
	"io"
	"strings"
)

// Member is one entry of an uncompressed tarball, where its content lies.
type Member struct {
	// Name is the entry's name, cleaned as Open cleans it.
	Name string
	// Type is the tar type flag (tar.TypeReg, tar.TypeDir, …).
	Type byte
	// Offset and Size locate the content in the tarball; Offset is -1 for
	// a sparse file, whose content is not one contiguous range.
	Offset, Size int64
}

// Members lists the entries of the uncompressed tarball r of size bytes in
// order, reading only headers (contents are skipped by seeking), at most
// max of them (0: DefaultMaxEntries). Archives of other things than a root
// filesystem (a disk image and its descriptor, a container image) are read
// in place from these offsets.
func Members(r io.ReaderAt, size int64, max int) ([]Member, error) {
	if max <= 0 {
		max = DefaultMaxEntries
	}
	sec := io.NewSectionReader(r, 0, size)
	tr := tar.NewReader(sec)
	var out []Member
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: entry %d: %w", ErrCorrupt, len(out)+1, err)
		}
		if len(out) >= max {
			return nil, fmt.Errorf("%w: more than %d entries", ErrTooLarge, max)
		}
		m := Member{Name: clean(hdr.Name), Type: hdr.Typeflag, Size: hdr.Size, Offset: -1}
		sparse := hdr.Typeflag == tar.TypeGNUSparse
		for k := range hdr.PAXRecords {
			sparse = sparse || strings.HasPrefix(k, "GNU.sparse.")
		}
		if !sparse {
			if m.Offset, err = sec.Seek(0, io.SeekCurrent); err != nil {
				return nil, err
			}
		}
		if m.Offset >= 0 && m.Offset+m.Size > size {
			return nil, fmt.Errorf("%w: %s: content past the end of the tarball", ErrCorrupt, m.Name)
		}
		out = append(out, m)
	}
}
