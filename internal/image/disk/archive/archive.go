// Package archive finds the disk image inside a disk archive and serves it
// to the disk readers as an io.ReaderAt: a GCE image (a .tar or .tar.gz
// holding exactly one disk image, disk.raw) or an OVA (a tar holding an OVF
// descriptor and the disks it names). A disk of an uncompressed tar is read
// in place, by its offset. A disk of a compressed tar (or a sparse tar
// member, or a member the OVF says is gzip-compressed) is decompressed once,
// streaming, into a sparse scratch file in the temporary directory: only its
// non-zero 4 KiB blocks take space, the file is unlinked as soon as it is
// created (nothing is left behind, even on a kill), and memory stays a few
// buffers whatever the disk's size. It never writes anything else.
package archive

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/image/fs/tarfs"
)

// ErrCorrupt reports an archive that is not what it claims: two disk
// images where one is expected, an OVF descriptor that does not parse or
// names a disk the archive lacks, a disk member cut short.
var ErrCorrupt = errors.New("corrupt disk archive")

// maxOVF bounds an OVF descriptor.
const maxOVF = 4 << 20

// diskExts are the names of members that hold a disk image.
var diskExts = []string{".raw", ".img", ".vmdk", ".qcow2", ".vhd", ".vhdx"}

// IsDiskName reports whether a member's name is a disk image's.
func IsDiskName(name string) bool {
	return slices.Contains(diskExts, strings.ToLower(path.Ext(name)))
}

// Disk is one disk image found in an archive.
type Disk struct {
	// Name is the member's name.
	Name string
	// R reads the disk image (any format the disk readers know), Size
	// bytes of it.
	R    io.ReaderAt
	Size int64
	// Detail says how it is read ("in place", "through a sparse scratch
	// file of 512 MiB allocated").
	Detail string

	scratch *os.File
}

// Archive is an opened disk archive.
type Archive struct {
	// Kind is "ova" or "disk archive".
	Kind string
	// Compression is how the tar is compressed (tarfs.Plain for none).
	Compression tarfs.Compression
	// Disks are the disks to try, in order: the one disk of a GCE-style
	// archive, the disks of an OVA in the order its OVF lists them.
	Disks []Disk
}

// Close removes the scratch files.
func (a *Archive) Close() error {
	var errs []error
	for _, d := range a.Disks {
		if d.scratch != nil {
			errs = append(errs, d.scratch.Close())
		}
	}
	return errors.Join(errs...)
}

// Options tune Open.
type Options struct {
	// ScratchDir is where scratch files are made; "" is os.TempDir().
	ScratchDir string
}

// Open reads the tarball r of size bytes as a disk archive. ok is false,
// with nothing read past the first entry, when it is not one: its first
// file is neither an OVF descriptor nor a disk image's name.
func Open(r io.ReaderAt, size int64, opt Options) (a *Archive, ok bool, err error) {
	comp, isTar := tarfs.Detect(r)
	if !isTar {
		return nil, false, nil
	}
	first, err := firstFile(r, size, comp)
	if err != nil || first == nil {
		return nil, false, nil // not for us: the tarball reader says what is wrong
	}
	if !IsDiskName(first.Name) && !strings.EqualFold(path.Ext(first.Name), ".ovf") {
		return nil, false, nil
	}
	if comp == tarfs.Plain {
		a, err = openPlain(r, size, opt)
	} else {
		a, err = openStream(io.NewSectionReader(r, 0, size), comp, opt)
	}
	if err != nil {
		return nil, true, err
	}
	a.Compression = comp
	return a, true, nil
}

// firstFile reads the first regular file's header (decompressing only as
// far as it).
func firstFile(r io.ReaderAt, size int64, comp tarfs.Compression) (*tar.Header, error) {
	var stream io.Reader = io.NewSectionReader(r, 0, size)
	if comp != tarfs.Plain {
		zr, err := tarfs.Decompress(bufio.NewReader(stream), comp)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		stream = zr
	}
	tr := tar.NewReader(stream)
	for range 16 {
		h, err := tr.Next()
		if err != nil {
			return nil, err
		}
		if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeGNUSparse || h.Typeflag == '\x00' {
			return h, nil
		}
	}
	return nil, nil
}

// plan is what an archive's listing says to read: the disks in order, and
// for an OVA which of them the OVF says are gzip-compressed.
type plan struct {
	kind  string
	disks []string
	gzip  map[string]bool
}

// planOf decides from the member names (and the OVF descriptor's disks,
// if any, as parseOVF gave them) which members are the disks.
func planOf(names []string, ovfName string, refs []OVFDisk, refsErr error) (*plan, error) {
	if ovfName != "" {
		if refsErr != nil {
			return nil, fmt.Errorf("%s: %w", ovfName, refsErr)
		}
		held := make(map[string]bool, len(names))
		for _, n := range names {
			held[n] = true
		}
		p := &plan{kind: "ova", gzip: map[string]bool{}}
		for _, ref := range refs {
			name := memberOf(ovfName, ref)
			if !held[name] {
				return nil, fmt.Errorf("%w: %s names %s, which the archive does not hold", ErrCorrupt, ovfName, ref.Href)
			}
			p.disks = append(p.disks, name)
			p.gzip[name] = ref.Gzip
		}
		return p, nil
	}
	var disks []string
	for _, n := range names {
		if IsDiskName(n) {
			disks = append(disks, n)
		}
	}
	if len(disks) != 1 {
		return nil, fmt.Errorf("%w: %d disk images (%s) where a disk archive holds exactly one", ErrCorrupt, len(disks), strings.Join(disks, ", "))
	}
	return &plan{kind: "disk archive", disks: disks}, nil
}

// openPlain reads an uncompressed tar: its disks in place, except a
// sparse or compressed member, which goes through a scratch file.
func openPlain(r io.ReaderAt, size int64, opt Options) (*Archive, error) {
	ms, err := tarfs.Members(r, size, 1<<16)
	if err != nil {
		return nil, err
	}
	byName := map[string]tarfs.Member{}
	var names []string
	var ovf []byte
	ovfName := ""
	for _, m := range ms {
		if m.Type != tar.TypeReg && m.Type != tar.TypeGNUSparse && m.Type != '\x00' {
			continue
		}
		byName[m.Name] = m
		names = append(names, m.Name)
		if strings.EqualFold(path.Ext(m.Name), ".ovf") && ovfName == "" {
			if m.Size > maxOVF || m.Offset < 0 {
				return nil, fmt.Errorf("%w: OVF descriptor %s of %d bytes", ErrCorrupt, m.Name, m.Size)
			}
			ovfName, ovf = m.Name, make([]byte, m.Size)
			if _, err := r.ReadAt(ovf, m.Offset); err != nil {
				return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, m.Name, err)
			}
		}
	}
	var refs []OVFDisk
	var refsErr error
	if ovfName != "" {
		refs, refsErr = parseOVF(ovf)
	}
	p, err := planOf(names, ovfName, refs, refsErr)
	if err != nil {
		return nil, err
	}
	a := &Archive{Kind: p.kind}
	for _, n := range p.disks {
		m := byName[n]
		if m.Offset >= 0 && !p.gzip[n] {
			a.Disks = append(a.Disks, Disk{Name: n, R: io.NewSectionReader(r, m.Offset, m.Size), Size: m.Size, Detail: "read in place"})
			continue
		}
		// A sparse member is not one range; a compressed one must be
		// decompressed: both stream into a scratch file.
		d, err := scratchMember(io.NewSectionReader(r, 0, size), n, p.gzip[n], opt)
		if err != nil {
			a.Close()
			return nil, err
		}
		a.Disks = append(a.Disks, *d)
	}
	return a, nil
}

// scratchMember streams the tar (plain) to member name and copies it into a
// scratch file.
func scratchMember(stream io.Reader, name string, gz bool, opt Options) (*Disk, error) {
	tr := tar.NewReader(stream)
	for {
		h, err := tr.Next()
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, name, err)
		}
		if path.Clean("/" + h.Name)[1:] == name {
			return toScratch(tr, name, gz, opt)
		}
	}
}

// openStream reads a compressed tar once: its OVF descriptor into memory,
// its disks into scratch files, every other member skipped; the
// decompressor reads to its stream's end, so its trailer is checked.
func openStream(r io.Reader, comp tarfs.Compression, opt Options) (*Archive, error) {
	zr, err := tarfs.Decompress(bufio.NewReaderSize(r, 1<<20), comp)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	var names []string
	disks := map[string]*Disk{}
	var ovf []byte
	ovfName := ""
	var refs []OVFDisk // ovf's, parsed once
	var refsErr error
	var gzipOf map[string]bool // refs by member name: whether gzip-compressed
	a := &Archive{}
	fail := func(err error) (*Archive, error) {
		for _, d := range disks {
			d.scratch.Close()
		}
		return nil, err
	}
	for n := 0; ; n++ {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(fmt.Errorf("%w: entry %d: %w", ErrCorrupt, n+1, err))
		}
		if n >= 1<<16 {
			return fail(fmt.Errorf("%w: more than %d entries", ErrCorrupt, 1<<16))
		}
		if h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeGNUSparse && h.Typeflag != '\x00' {
			continue
		}
		name := path.Clean("/" + h.Name)[1:]
		names = append(names, name)
		switch {
		case strings.EqualFold(path.Ext(name), ".ovf") && ovfName == "":
			if h.Size > maxOVF {
				return fail(fmt.Errorf("%w: OVF descriptor %s of %d bytes", ErrCorrupt, name, h.Size))
			}
			ovfName = name
			if ovf, err = io.ReadAll(tr); err != nil {
				return fail(fmt.Errorf("%w: %s: %w", ErrCorrupt, name, err))
			}
			refs, refsErr = parseOVF(ovf)
			gzipOf = map[string]bool{}
			for _, r := range refs {
				gzipOf[memberOf(ovfName, r)] = r.Gzip // the last counts, as in planOf
			}
		case IsDiskName(name) && disks[name] == nil:
			// Which disks an OVA uses is known only from its OVF, which
			// comes first; a GCE archive's one disk is any disk name.
			gz := false
			if ovfName != "" {
				if refsErr != nil {
					return fail(fmt.Errorf("%s: %w", ovfName, refsErr))
				}
				var ok bool
				if gz, ok = gzipOf[name]; !ok {
					continue
				}
			}
			d, err := toScratch(tr, name, gz, opt)
			if err != nil {
				return fail(err)
			}
			disks[name] = d
		}
	}
	if _, err := io.Copy(io.Discard, io.LimitReader(zr, 1<<20)); err != nil {
		return fail(fmt.Errorf("%w: %s: %w", ErrCorrupt, comp, err))
	}
	p, err := planOf(names, ovfName, refs, refsErr)
	if err != nil {
		return fail(err)
	}
	a.Kind = p.kind
	for _, n := range p.disks {
		if d := disks[n]; d != nil {
			a.Disks = append(a.Disks, *d)
			delete(disks, n)
		}
	}
	for _, d := range disks {
		d.scratch.Close()
	}
	return a, nil
}

// toScratch copies a member's content (decompressed if gz) into a new
// sparse scratch file: runs of zero 4 KiB blocks become holes.
func toScratch(r io.Reader, name string, gz bool, opt Options) (*Disk, error) {
	if gz {
		zr, err := tarfs.Decompress(bufio.NewReader(r), tarfs.Gzip)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrCorrupt, name, err)
		}
		defer zr.Close()
		r = zr
	}
	f, err := os.CreateTemp(opt.ScratchDir, "amilint-disk-*")
	if err != nil {
		return nil, fmt.Errorf("scratch file for %s: %w", name, err)
	}
	// Unlinked now: the open file is all that is left of it.
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("scratch file for %s: %w", name, err)
	}
	size, err := copySparse(f, r)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	detail := "through a sparse scratch file"
	if fi, err := f.Stat(); err == nil {
		detail += fmt.Sprintf(" (%.1f MiB of %.1f MiB allocated)", float64(allocated(fi))/(1<<20), float64(size)/(1<<20))
	}
	return &Disk{Name: name, R: f, Size: size, Detail: detail, scratch: f}, nil
}

// block is the granularity of holes in a scratch file.
const block = 4096

// copySparse copies r into f, seeking over zero blocks, and returns the
// bytes copied.
func copySparse(f *os.File, r io.Reader) (int64, error) {
	buf := make([]byte, 1<<20)
	zero := make([]byte, block)
	var off int64
	for {
		n, err := io.ReadFull(r, buf)
		for i := 0; i < n; i += block {
			b := buf[i:min(i+block, n)]
			if !bytes.Equal(b, zero[:len(b)]) {
				if _, werr := f.WriteAt(b, off+int64(i)); werr != nil {
					return 0, fmt.Errorf("scratch file: %w", werr)
				}
			}
		}
		off += int64(n)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
	}
	if err := f.Truncate(off); err != nil {
		return 0, fmt.Errorf("scratch file: %w", err)
	}
	return off, nil
}

// OVFDisk is a disk file an OVF descriptor names.
type OVFDisk struct {
	// Href is the file's name in the archive, relative to the OVF.
	Href string
	// Gzip says the file is gzip-compressed (ovf:compression="gzip").
	Gzip bool
}

// ovfFile is an OVF descriptor's References/File.
type ovfFile struct {
	ID          string `xml:"id,attr"`
	Href        string `xml:"href,attr"`
	Compression string `xml:"compression,attr"`
	ChunkSize   string `xml:"chunkSize,attr"`
}

// memberOf is the archive member an OVF descriptor's disk names.
func memberOf(ovfName string, ref OVFDisk) string {
	return path.Clean(path.Join(path.Dir(ovfName), ref.Href))
}

// parseOVF is ParseOVF, counted by a test.
var parseOVF = ParseOVF

// ParseOVF lists the files of the disks an OVF descriptor declares, in the
// order of its DiskSection.
func ParseOVF(b []byte) ([]OVFDisk, error) {
	var env struct {
		Files []ovfFile `xml:"References>File"`
		Disks []struct {
			FileRef string `xml:"fileRef,attr"`
		} `xml:"DiskSection>Disk"`
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	dec.Strict = true
	if err := dec.Decode(&env); err != nil {
		return nil, fmt.Errorf("%w: OVF descriptor: %w", ErrCorrupt, err)
	}
	var out []OVFDisk
	for _, d := range env.Disks {
		i := slices.IndexFunc(env.Files, func(f ovfFile) bool { return f.ID == d.FileRef })
		if i < 0 {
			continue // a disk with no file: an empty disk the VM creates
		}
		f := env.Files[i]
		switch {
		case f.Href == "" || strings.Contains(f.Href, "://"):
			return nil, fmt.Errorf("%w: OVF descriptor: disk file %q is not in the archive", ErrCorrupt, f.Href)
		case f.ChunkSize != "":
			return nil, fmt.Errorf("OVF descriptor: disk file %s is chunked (ovf:chunkSize), which is not supported", f.Href)
		case f.Compression != "" && f.Compression != "identity" && f.Compression != "gzip":
			return nil, fmt.Errorf("%w: OVF descriptor: disk file %s: compression %q", ErrCorrupt, f.Href, f.Compression)
		}
		out = append(out, OVFDisk{Href: f.Href, Gzip: f.Compression == "gzip"})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: the OVF descriptor declares no disk with a file", ErrCorrupt)
	}
	return out, nil
}
