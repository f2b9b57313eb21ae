// Package lvm owns LVM2 physical volumes: it finds the label, reads the
// volume group's text metadata from the metadata area, assembles the PVs
// of one volume group found in an image, and exposes linear and striped
// logical volumes as io.ReaderAt over them. It never writes and never
// talks to device-mapper; thin, RAID, mirror and snapshot volumes are
// reported as unsupported, never guessed at.
//
// # Checksums
//
// The label sector, each metadata area header and the metadata text carry
// LVM's CRC32, all checked. A PV with several metadata areas is read from
// the first that passes, as lvm2 does; when none passes, the mismatch is
// an [integrity.Mismatch] wrapping ErrCorrupt, or, for a lenient
// [integrity.Checker], recorded and the first area read as stored.
package lvm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/amilint/amilint/internal/image/integrity"
)

// ErrCorrupt reports LVM structures that are inconsistent, truncated or
// out of bounds.
var ErrCorrupt = errors.New("corrupt LVM physical volume")

// ErrUnsupported reports a logical volume layout amilint does not read.
var ErrUnsupported = errors.New("unsupported LVM layout")

const (
	sector       = 512
	labelScan    = 4 // the label is in one of the first four sectors
	mdaMagic     = " LVM2 x[5A%r0N*>"
	initialCRC   = 0xf597a6cf
	maxMetadata  = 16 << 20
	maxSegments  = 4096
	maxLocations = 16
	// maxStripes is lvm2's limit on stripes per segment.
	maxStripes = 128
	// maxStripeSize bounds a stripe's chunk (lvm2 allows up to 4 GiB).
	maxStripeSize = 4 << 30
)

// crc is LVM's checksum: CRC-32 (IEEE, reflected) without the initial and
// final inversion, seeded with 0xf597a6cf.
func crc(b []byte) uint32 { return ^crc32.Update(^uint32(initialCRC), crc32.IEEETable, b) }

func corruptf(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, a...))
}

func readFull(r io.ReaderAt, size int64, p []byte, off int64, what string) error {
	if off < 0 || off > size-int64(len(p)) {
		return corruptf("%s at offset %d lies past the end of the volume (%d bytes)", what, off, size)
	}
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return corruptf("%s at offset %d: truncated volume", what, off)
	}
	return fmt.Errorf("read %s at offset %d: %w", what, off, err)
}

// Probe reports whether r starts with an LVM2 label (by its magic alone:
// a damaged label is Open's to report).
func Probe(r io.ReaderAt, size int64) bool {
	b := make([]byte, sector)
	for i := range int64(labelScan) {
		if readFull(r, size, b, i*sector, "LVM label") != nil {
			return false
		}
		if string(b[:8]) == "LABELONE" && string(b[24:32]) == "LVM2 001" {
			return true
		}
	}
	return false
}

// lvmMismatch is the error of an LVM structure that fails its checksum.
func lvmMismatch(structure string) *integrity.Mismatch {
	return &integrity.Mismatch{Format: "lvm", Structure: structure, Corrupt: ErrCorrupt}
}

func findLabel(r io.ReaderAt, size int64, check *integrity.Checker) ([]byte, error) {
	for i := range int64(labelScan) {
		b := make([]byte, sector)
		if readFull(r, size, b, i*sector, "LVM label") != nil {
			break
		}
		if string(b[:8]) == "LABELONE" && string(b[24:32]) == "LVM2 001" {
			if binary.LittleEndian.Uint64(b[8:]) != uint64(i) {
				return nil, corruptf("LVM label in sector %d says it is in sector %d", i, binary.LittleEndian.Uint64(b[8:]))
			}
			if crc(b[20:]) != binary.LittleEndian.Uint32(b[16:]) {
				if err := check.Fail(lvmMismatch(fmt.Sprintf("label in sector %d", i))); err != nil {
					return nil, err
				}
			}
			return b, nil
		}
	}
	return nil, fmt.Errorf("no LVM2 label: %w", ErrCorrupt)
}

// VG is a volume group as the metadata of its physical volumes in one
// image describes it.
type VG struct {
	Name string
	// LVs are the logical volumes, sorted by name.
	LVs []*LV
}

// LV is a logical volume.
type LV struct {
	Name string
	size int64
	segs []segment
	err  error // why the LV cannot be read, if it cannot
}

// segment maps bytes [start, start+length) of an LV onto its areas: one
// area for a linear segment, stripe_count areas for a striped one, whose
// chunks of stripe bytes go to the areas in turn.
type segment struct {
	start, length int64 // bytes, in the LV
	stripe        int64 // bytes per chunk; 0 when there is one area
	areas         []area
}

// area is where a segment's data (or one stripe of it) starts on a PV.
type area struct {
	pv  *PV
	off int64 // bytes, in the PV
}

// Size is the logical volume's size in bytes.
func (lv *LV) Size() int64 { return lv.size }

// Err reports why the volume cannot be read (an unsupported segment type or
// a PV missing from this image), or nil.
func (lv *LV) Err() error { return lv.err }

// ReadAt reads the logical volume's bytes.
func (lv *LV) ReadAt(p []byte, off int64) (int, error) {
	if lv.err != nil {
		return 0, lv.err
	}
	if off < 0 {
		return 0, fmt.Errorf("read LV %s at %d: negative offset", lv.Name, off)
	}
	if off >= lv.size {
		return 0, io.EOF
	}
	want := len(p)
	if int64(want) > lv.size-off {
		p = p[:lv.size-off]
	}
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		i := sort.Search(len(lv.segs), func(i int) bool { return lv.segs[i].start+lv.segs[i].length > pos })
		if i == len(lv.segs) || lv.segs[i].start > pos {
			return n, corruptf("LV %s has no segment at byte %d", lv.Name, pos)
		}
		s := lv.segs[i]
		rel := pos - s.start
		rest := s.length - rel
		a, at := s.areas[0], s.areas[0].off+rel
		if s.stripe > 0 {
			chunk := rel / s.stripe
			within := rel % s.stripe
			a = s.areas[chunk%int64(len(s.areas))]
			at = a.off + chunk/int64(len(s.areas))*s.stripe + within
			rest = min(rest, s.stripe-within)
		}
		chunk := p[n:]
		if int64(len(chunk)) > rest {
			chunk = chunk[:rest]
		}
		if err := readFull(a.pv.r, a.pv.size, chunk, at, "LV "+lv.Name); err != nil {
			return n, err
		}
		n += len(chunk)
	}
	if n < want {
		return n, io.EOF
	}
	return n, nil
}

// PV is one LVM2 physical volume: its label and the volume group metadata
// it carries.
type PV struct {
	r     io.ReaderAt
	size  int64
	uuid  string   // without dashes, as in the label
	root  *section // the current metadata, parsed
	vg    string
	vgID  string
	seqno int64
}

// VGName is the name of the volume group the PV belongs to.
func (p *PV) VGName() string { return p.vg }

// VGID identifies the volume group the PV belongs to (its id, else its
// name): PVs with the same VGID are assembled together.
func (p *PV) VGID() string {
	if p.vgID != "" {
		return p.vgID
	}
	return p.vg
}

// Open reads the LVM2 physical volume r of size bytes as a volume group of
// its own: LVs with segments on other PVs report it in Err.
func Open(r io.ReaderAt, size int64) (*VG, error) {
	pv, err := ReadPV(r, size)
	if err != nil {
		return nil, err
	}
	return Assemble([]*PV{pv})
}

// ReadPV reads the label and the current volume group metadata of the
// physical volume r of size bytes. A checksum mismatch is an error.
func ReadPV(r io.ReaderAt, size int64) (*PV, error) { return ReadPVWith(r, size, nil) }

// ReadPVWith is ReadPV with check deciding what a checksum mismatch does
// (nil: it is an error).
func ReadPVWith(r io.ReaderAt, size int64, check *integrity.Checker) (*PV, error) {
	le := binary.LittleEndian
	label, err := findLabel(r, size, check)
	if err != nil {
		return nil, err
	}

	off := int64(le.Uint32(label[20:]))
	if off < 32 || off > sector-40 {
		return nil, corruptf("PV header offset %d", off)
	}
	hdr := label[off:]
	pv := &PV{r: r, size: size, uuid: string(hdr[:32])}
	// Skip the data area list, then read the metadata area list.
	lists := hdr[40:]
	var areas [2][][2]uint64
	for k := range areas {
		for {
			if len(lists) < 16 {
				return nil, corruptf("PV header area lists run off the label sector")
			}
			o, s := le.Uint64(lists), le.Uint64(lists[8:])
			lists = lists[16:]
			if o == 0 {
				break
			}
			if len(areas[k]) == maxLocations {
				return nil, corruptf("PV header lists too many areas")
			}
			areas[k] = append(areas[k], [2]uint64{o, s})
		}
	}
	if len(areas[1]) == 0 {
		return nil, corruptf("PV has no metadata area")
	}
	var errs []error
	for _, mda := range areas[1] {
		err := pv.load(r, size, mda, false)
		if err == nil {
			return pv, nil
		}
		errs = append(errs, err)
	}
	// No area passes. When the first fails a checksum, a lenient Checker
	// records it and reads it as stored.
	if m, ok := integrity.As(errs[0]); ok {
		if err := check.Fail(m); err != nil {
			return nil, err
		}
		if err := pv.load(r, size, areas[1][0], true); err != nil {
			return nil, fmt.Errorf("read LVM metadata: %w", err)
		}
		return pv, nil
	}
	return nil, fmt.Errorf("read LVM metadata: %w", errors.Join(errs...))
}

// load reads the metadata area mda (offset, size) into pv; with ignoreCRC
// its checksums are not checked.
func (pv *PV) load(r io.ReaderAt, size int64, mda [2]uint64, ignoreCRC bool) error {
	text, err := readMetadata(r, size, int64(mda[0]), int64(mda[1]), ignoreCRC)
	if err != nil {
		return err
	}
	root, err := parse(text)
	if err != nil {
		return err
	}
	name, vg := vgSection(root)
	if vg == nil {
		return corruptf("metadata names no volume group")
	}
	pv.root, pv.vg = root, name
	pv.vgID, _ = vg.str("id")
	pv.seqno, _ = vg.int("seqno")
	return nil
}

// Assemble builds the volume group that pvs (PVs of one VGID, from one
// image) belong to, from the newest metadata among theirs. LVs with a
// segment on a PV that is not among pvs report it in Err.
func Assemble(pvs []*PV) (*VG, error) {
	if len(pvs) == 0 {
		return nil, fmt.Errorf("assemble volume group: %w", errors.New("no physical volumes"))
	}
	best := pvs[0]
	for _, p := range pvs[1:] {
		if p.VGID() != best.VGID() {
			return nil, fmt.Errorf("assemble volume group: PVs of %s and %s: %w", best.vg, p.vg, errors.New("different volume groups"))
		}
		if p.seqno > best.seqno {
			best = p
		}
	}
	return vgOf(best.root, pvs)
}

// vgSection is the first section of the metadata: the volume group.
func vgSection(root *section) (string, *section) {
	for _, k := range root.order {
		if s, ok := root.sections[k]; ok {
			return k, s
		}
	}
	return "", nil
}

// pvDev is a PV of the metadata that is in this image.
type pvDev struct {
	pv      *PV
	peStart int64
}

// parseVG parses metadata text and builds its volume group over pvs.
func parseVG(text []byte, pvs []*PV) (*VG, error) {
	root, err := parse(text)
	if err != nil {
		return nil, err
	}
	return vgOf(root, pvs)
}

// vgOf builds the volume group of parsed metadata over pvs; ReadPV parsed
// it already, so Assemble does not parse it again.
func vgOf(root *section, pvs []*PV) (*VG, error) {
	vgName, vg := vgSection(root)
	if vg == nil {
		return nil, corruptf("metadata names no volume group")
	}
	extent, ok := vg.int("extent_size")
	if !ok || extent <= 0 || extent > 1<<32 {
		return nil, corruptf("VG %s: extent_size", vgName)
	}
	extent *= sector
	// Find the image's PVs among the group's.
	list := vg.sections["physical_volumes"]
	if list == nil {
		return nil, corruptf("VG %s has no physical_volumes", vgName)
	}
	devs := map[string]pvDev{}
	for _, name := range list.order {
		s := list.sections[name]
		if s == nil {
			continue
		}
		id, _ := s.str("id")
		for _, pv := range pvs {
			if strings.ReplaceAll(id, "-", "") != pv.uuid {
				continue
			}
			ps, ok := s.int("pe_start")
			if !ok || ps < 0 || ps > pv.size/sector { // bounded before multiplying: no wrap
				return nil, corruptf("VG %s PV %s: pe_start", vgName, name)
			}
			devs[name] = pvDev{pv: pv, peStart: ps * sector}
		}
	}
	if len(devs) == 0 {
		uuids := make([]string, len(pvs))
		for i, pv := range pvs {
			uuids[i] = pv.uuid
		}
		return nil, corruptf("VG %s does not list this PV (%s)", vgName, strings.Join(uuids, ", "))
	}
	out := &VG{Name: vgName}
	if lvs := vg.sections["logical_volumes"]; lvs != nil {
		for _, name := range lvs.order {
			s := lvs.sections[name]
			if s == nil {
				continue
			}
			lv := &LV{Name: name}
			lv.err = lv.load(s, devs, extent)
			if lv.err != nil && errors.Is(lv.err, ErrCorrupt) {
				return nil, fmt.Errorf("VG %s LV %s: %w", vgName, name, lv.err)
			}
			if lv.err != nil {
				lv.err = fmt.Errorf("LV %s/%s: %w", vgName, name, lv.err)
			}
			out.LVs = append(out.LVs, lv)
		}
	}
	sort.Slice(out.LVs, func(i, j int) bool { return out.LVs[i].Name < out.LVs[j].Name })
	return out, nil
}

func (lv *LV) load(s *section, devs map[string]pvDev, extent int64) error {
	n, ok := s.int("segment_count")
	if !ok || n < 1 || n > maxSegments {
		return corruptf("segment_count")
	}
	for i := range n {
		seg := s.sections[fmt.Sprintf("segment%d", i+1)]
		if seg == nil {
			return corruptf("segment%d missing", i+1)
		}
		startExt, ok1 := seg.int("start_extent")
		count, ok2 := seg.int("extent_count")
		// Bounded so that no product with the extent size wraps.
		if !ok1 || !ok2 || startExt < 0 || count <= 0 || startExt > 1<<40 || count > 1<<40 ||
			startExt > math.MaxInt64/4/extent || count > math.MaxInt64/4/extent {
			return corruptf("segment%d extents", i+1)
		}
		typ, _ := seg.str("type")
		stripes, _ := seg.int("stripe_count")
		if typ != "striped" || stripes < 1 {
			return fmt.Errorf("segment type %q with %d stripes: %w", typ, stripes, ErrUnsupported)
		}
		if stripes > maxStripes || count%stripes != 0 {
			return corruptf("segment%d: %d extents in %d stripes", i+1, count, stripes)
		}
		sg := segment{start: startExt * extent, length: count * extent}
		if stripes > 1 {
			ss, ok := seg.int("stripe_size")
			if !ok || ss <= 0 || ss&(ss-1) != 0 || ss > maxStripeSize/sector {
				return corruptf("segment%d stripe_size", i+1)
			}
			sg.stripe = ss * sector
			if (count/stripes*extent)%sg.stripe != 0 {
				return corruptf("segment%d: stripe size %d does not divide its stripes", i+1, sg.stripe)
			}
		}
		arr := seg.arrays["stripes"]
		if int64(len(arr)) != 2*stripes {
			return corruptf("segment%d stripes", i+1)
		}
		for k := int64(0); k < stripes; k++ {
			pv, ok1 := arr[2*k].(string)
			pe, ok2 := arr[2*k+1].(int64)
			if !ok1 || !ok2 || pe < 0 || pe > 1<<40 || pe > math.MaxInt64/4/extent {
				return corruptf("segment%d stripes", i+1)
			}
			dev, ok := devs[pv]
			if !ok {
				return fmt.Errorf("segment on PV %s, which is not in this image: %w", pv, ErrUnsupported)
			}
			sg.areas = append(sg.areas, area{pv: dev.pv, off: dev.peStart + pe*extent})
		}
		lv.segs = append(lv.segs, sg)
	}
	sort.Slice(lv.segs, func(i, j int) bool { return lv.segs[i].start < lv.segs[j].start })
	var end int64
	for _, sg := range lv.segs {
		if sg.start != end {
			return corruptf("segments leave a gap or overlap at byte %d", end)
		}
		end += sg.length
	}
	lv.size = end
	return nil
}

// readMetadata returns the current metadata text of the area at mdaOff;
// with ignoreCRC its checksums are not checked.
func readMetadata(r io.ReaderAt, size, mdaOff, mdaSize int64, ignoreCRC bool) ([]byte, error) {
	le := binary.LittleEndian
	h := make([]byte, sector)
	if err := readFull(r, size, h, mdaOff, "LVM metadata area header"); err != nil {
		return nil, err
	}
	if string(h[4:20]) != mdaMagic {
		return nil, corruptf("metadata area at %d: bad magic", mdaOff)
	}
	if crc(h[4:]) != le.Uint32(h) && !ignoreCRC {
		return nil, lvmMismatch(fmt.Sprintf("metadata area header at byte %d", mdaOff))
	}
	if start := int64(le.Uint64(h[24:])); start != mdaOff {
		return nil, corruptf("metadata area at %d says it starts at %d", mdaOff, start)
	}
	if s := int64(le.Uint64(h[32:])); s != mdaSize || s < 2*sector || s > size {
		return nil, corruptf("metadata area size %d (label says %d)", s, mdaSize)
	}
	loc := h[40:]
	textOff, textLen := int64(le.Uint64(loc)), int64(le.Uint64(loc[8:]))
	sum := le.Uint32(loc[16:])
	if textLen == 0 {
		return nil, corruptf("metadata area at %d holds no metadata", mdaOff)
	}
	if textLen < 0 || textLen > maxMetadata || textLen > mdaSize-sector || textOff < sector || textOff >= mdaSize {
		return nil, corruptf("metadata text at %d (+%d) outside its area of %d bytes", textOff, textLen, mdaSize)
	}
	text := make([]byte, textLen)
	// The area is a ring after its header sector: text that reaches the
	// end continues right after the header.
	first := min(textLen, mdaSize-textOff)
	if err := readFull(r, size, text[:first], mdaOff+textOff, "LVM metadata"); err != nil {
		return nil, err
	}
	if first < textLen {
		if err := readFull(r, size, text[first:], mdaOff+sector, "LVM metadata (wrapped)"); err != nil {
			return nil, err
		}
	}
	if crc(text) != sum && !ignoreCRC {
		return nil, lvmMismatch(fmt.Sprintf("metadata text at byte %d", mdaOff+textOff))
	}
	return text, nil
}

// section is one { } block of LVM's text metadata.
type section struct {
	order    []string
	sections map[string]*section
	values   map[string]any // string or int64
	arrays   map[string][]any
}

func (s *section) int(k string) (int64, bool)  { v, ok := s.values[k].(int64); return v, ok }
func (s *section) str(k string) (string, bool) { v, ok := s.values[k].(string); return v, ok }

func newSection() *section {
	return &section{sections: map[string]*section{}, values: map[string]any{}, arrays: map[string][]any{}}
}

// parse reads LVM's text metadata format: name { key = value ... }, with
// strings, integers, arrays and # comments.
func parse(text []byte) (*section, error) {
	p := &parser{s: text}
	root := newSection()
	if err := p.body(root, 0); err != nil {
		return nil, err
	}
	if tok := p.next(); tok != "" {
		return nil, corruptf("metadata: unexpected %q at byte %d", tok, p.i)
	}
	return root, nil
}

type parser struct {
	s []byte
	i int
}

const maxDepth = 16

// next returns the next token: a word, a quoted string (with its quotes),
// or one of { } [ ] = ,; "" at the end.
func (p *parser) next() string {
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '#':
			for p.i < len(p.s) && p.s[p.i] != '\n' {
				p.i++
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == 0:
			p.i++
		case bytes.IndexByte([]byte("{}[]=,"), c) >= 0:
			p.i++
			return string(c)
		case c == '"':
			start := p.i
			p.i++
			for p.i < len(p.s) && p.s[p.i] != '"' {
				if p.s[p.i] == '\\' {
					p.i++
				}
				p.i++
			}
			p.i++
			if p.i > len(p.s) {
				p.i = len(p.s)
				return string(p.s[start:]) // unterminated: rejected by the caller
			}
			return string(p.s[start:p.i])
		default:
			start := p.i
			for p.i < len(p.s) && bytes.IndexByte([]byte("{}[]=,#\" \t\n\r"), p.s[p.i]) < 0 {
				p.i++
			}
			return string(p.s[start:p.i])
		}
	}
	return ""
}

func (p *parser) peek() string {
	i := p.i
	t := p.next()
	p.i = i
	return t
}

func (p *parser) body(s *section, depth int) error {
	if depth > maxDepth {
		return corruptf("metadata nested deeper than %d", maxDepth)
	}
	for {
		t := p.peek()
		if t == "" || t == "}" {
			return nil
		}
		key := p.next()
		if !isWord(key) {
			return corruptf("metadata: unexpected %q at byte %d", key, p.i)
		}
		switch p.next() {
		case "{":
			child := newSection()
			if err := p.body(child, depth+1); err != nil {
				return err
			}
			if p.next() != "}" {
				return corruptf("metadata: section %s not closed", key)
			}
			if _, dup := s.sections[key]; dup {
				// Every name in order would load the last section of
				// that name: one LV of 4096 segments, again and again.
				return corruptf("metadata: section %s given twice", key)
			}
			s.sections[key] = child
			s.order = append(s.order, key)
		case "=":
			if p.peek() == "[" {
				p.next()
				var arr []any
				for {
					t := p.next()
					if t == "]" {
						break
					}
					if t == "," {
						continue
					}
					v, err := value(t)
					if err != nil {
						return err
					}
					arr = append(arr, v)
				}
				s.arrays[key] = arr
				continue
			}
			v, err := value(p.next())
			if err != nil {
				return err
			}
			s.values[key] = v
		default:
			return corruptf("metadata: %s is neither a section nor a value", key)
		}
	}
}

func isWord(t string) bool {
	return t != "" && bytes.IndexByte([]byte("{}[]=,\""), t[0]) < 0
}

func value(t string) (any, error) {
	switch {
	case len(t) >= 2 && t[0] == '"' && t[len(t)-1] == '"':
		return strings.ReplaceAll(strings.ReplaceAll(t[1:len(t)-1], `\"`, `"`), `\\`, `\`), nil
	case t == "":
		return nil, corruptf("metadata: truncated")
	case isWord(t):
		var n int64
		if _, err := fmt.Sscan(t, &n); err == nil {
			return n, nil
		}
		return t, nil
	}
	return nil, corruptf("metadata: unexpected %q", t)
}
