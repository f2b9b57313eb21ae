// Package partition owns disk partition tables: it reads MBR (with
// extended and logical partitions) and GPT from an io.ReaderAt and reports
// where each partition lies. It never writes, and it rejects tables whose
// entries point outside the disk or loop.
//
// # GPT checksums
//
// A GPT header and its partition entry array each carry a CRC32, checked
// on both copies. When the primary header (or its entries) fails, the
// backup at the disk's last LBA is read instead, with a warning
// (Table.Warnings), as gdisk and UEFI firmware recover from it (Linux does
// only with its gpt parameter); when the backup the primary names fails,
// the primary is read with a warning, as Linux does. When no copy passes,
// the mismatch is an [integrity.Mismatch] wrapping ErrCorrupt, or, for a
// lenient [integrity.Checker], recorded and the primary read as stored.
package partition

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"unicode/utf16"

	"github.com/amilint/amilint/internal/image/integrity"
)

// ErrCorrupt reports a partition table that is inconsistent, truncated or
// points outside the disk.
var ErrCorrupt = errors.New("corrupt partition table")

// Scheme names a partitioning scheme.
type Scheme string

// The schemes Read recognises.
const (
	None Scheme = "none" // no partition table: the whole disk is one volume
	MBR  Scheme = "mbr"
	GPT  Scheme = "gpt"
)

// maxLogical bounds the extended partition chain, as the Linux kernel
// bounds it (well above any real table); the chain is also checked for
// loops.
const maxLogical = 256

// Partition is one partition.
type Partition struct {
	// Number is the partition's number as Linux names it: MBR primaries
	// 1-4 and logicals from 5; GPT entries by their index from 1.
	Number int
	// Start and Size are in bytes from the start of the disk.
	Start, Size int64
	// Type is the MBR type byte ("0x83") or the GPT type GUID in upper case.
	Type string
	// Name is the GPT partition name ("" for MBR).
	Name string
	// UUID is the partition's PARTUUID as udev and blkid spell it (its
	// /dev/disk/by-partuuid link): a GPT entry's unique GUID in lower
	// case, or for MBR the disk signature and the partition number,
	// "SSSSSSSS-NN" in lower-case hex ("" when the MBR's signature is 0,
	// which blkid leaves without one).
	UUID string
}

// Table is a disk's partition table.
type Table struct {
	Scheme     Scheme
	Partitions []Partition
	// Warnings say, one line each, which copy of a GPT was read when the
	// other fails its checks.
	Warnings []string
}

// Section returns the partition's bytes within disk.
func (p Partition) Section(disk io.ReaderAt) *io.SectionReader {
	return io.NewSectionReader(disk, p.Start, p.Size)
}

// Find returns the partition numbered n.
func (t *Table) Find(n int) (Partition, bool) {
	for _, p := range t.Partitions {
		if p.Number == n {
			return p, true
		}
	}
	return Partition{}, false
}

// Well-known partition types.
const (
	TypeMBRExtendedCHS = "0x05"
	TypeMBRExtendedLBA = "0x0F"
	TypeMBRLinuxExt    = "0x85"
	TypeMBRLVM         = "0x8E"
	TypeGPTLVM         = "E6D6D379-F507-44C2-A23C-238F2A3DF928"
)

func corruptf(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, a...))
}

func readFull(r io.ReaderAt, size int64, p []byte, off int64, what string) error {
	if off < 0 || off > size-int64(len(p)) {
		return corruptf("%s at offset %d lies past the end of the disk (%d bytes)", what, off, size)
	}
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return corruptf("%s at offset %d: truncated disk", what, off)
	}
	return fmt.Errorf("read %s at offset %d: %w", what, off, err)
}

// Read reads the partition table of a disk of size bytes. A disk without
// one (a bare filesystem) yields Scheme None and no partitions. A GPT none
// of whose copies passes its checksums is an error.
func Read(r io.ReaderAt, size int64) (*Table, error) { return ReadWith(r, size, nil) }

// ReadWith is Read with check deciding what a GPT that fails its checksums
// in every copy does (nil: it is an error).
func ReadWith(r io.ReaderAt, size int64, check *integrity.Checker) (*Table, error) {
	if size < 512 {
		return &Table{Scheme: None}, nil
	}
	var mbr [512]byte
	if err := readFull(r, size, mbr[:], 0, "MBR"); err != nil {
		return nil, err
	}
	entries, ok := mbrEntries(mbr[:])
	if !ok {
		// Without an MBR a GPT is still recognised (some tools skip the
		// protective MBR); else there is no table.
		if t, err := readGPT(r, size, nil); err == nil {
			return t, nil
		} else if _, isMismatch := integrity.As(err); isMismatch {
			return readGPT(r, size, check)
		}
		return &Table{Scheme: None}, nil
	}
	for _, e := range entries {
		if e.typ == 0xEE {
			return readGPT(r, size, check)
		}
	}
	return readMBR(r, size, entries, binary.LittleEndian.Uint32(mbr[440:]))
}

type mbrEntry struct {
	status, typ   byte
	start, length uint32
}

// mbrEntries parses the four primary entries and reports whether the
// sector looks like an MBR at all: the boot signature, and status bytes
// that are 0x00 or 0x80 (a filesystem boot sector fails this).
func mbrEntries(b []byte) ([4]mbrEntry, bool) {
	var es [4]mbrEntry
	if b[510] != 0x55 || b[511] != 0xAA {
		return es, false
	}
	used := false
	for i := range es {
		e := b[446+16*i:]
		es[i] = mbrEntry{status: e[0], typ: e[4], start: binary.LittleEndian.Uint32(e[8:]), length: binary.LittleEndian.Uint32(e[12:])}
		if es[i].status != 0 && es[i].status != 0x80 {
			return es, false
		}
		if es[i].typ != 0 {
			used = true
		}
	}
	return es, used
}

func isExtended(typ byte) bool { return typ == 0x05 || typ == 0x0F || typ == 0x85 }

// readMBR reads an MBR's partitions; signature is the disk signature at
// byte 440, which names them in PARTUUIDs (blkid's dos_partlist does so:
// "%08x-%02x" of the signature and the partition number).
func readMBR(r io.ReaderAt, size int64, entries [4]mbrEntry, signature uint32) (*Table, error) {
	t := &Table{Scheme: MBR}
	add := func(n int, start, length int64, typ byte) error {
		if length == 0 {
			return nil
		}
		if start <= 0 || start+length > size {
			return corruptf("MBR partition %d (bytes %d..%d) lies outside the disk (%d bytes)", n, start, start+length, size)
		}
		uuid := ""
		if signature != 0 {
			uuid = fmt.Sprintf("%08x-%02x", signature, n)
		}
		t.Partitions = append(t.Partitions, Partition{Number: n, Start: start, Size: length, Type: fmt.Sprintf("0x%02X", typ), UUID: uuid})
		return nil
	}
	var ext *mbrEntry
	for i, e := range entries {
		if e.typ == 0 {
			continue
		}
		if isExtended(e.typ) {
			if ext != nil {
				return nil, corruptf("MBR has two extended partitions")
			}
			ext = &entries[i]
			continue
		}
		if err := add(i+1, int64(e.start)*512, int64(e.length)*512, e.typ); err != nil {
			return nil, err
		}
	}
	if ext == nil {
		return t, nil
	}
	extStart, extEnd := int64(ext.start)*512, int64(ext.start)*512+int64(ext.length)*512
	if extStart <= 0 || extEnd > size {
		return nil, corruptf("MBR extended partition (bytes %d..%d) lies outside the disk", extStart, extEnd)
	}
	seen := map[int64]bool{}
	ebr := extStart
	for n := 5; ; n++ {
		if n-5 >= maxLogical {
			return nil, corruptf("MBR extended partition chain longer than %d", maxLogical)
		}
		if seen[ebr] {
			return nil, corruptf("MBR extended partition chain loops at byte %d", ebr)
		}
		seen[ebr] = true
		if ebr < extStart || ebr >= extEnd {
			return nil, corruptf("MBR extended boot record at byte %d outside the extended partition", ebr)
		}
		var b [512]byte
		if err := readFull(r, size, b[:], ebr, "extended boot record"); err != nil {
			return nil, err
		}
		if b[510] != 0x55 || b[511] != 0xAA {
			return nil, corruptf("extended boot record at byte %d has no signature", ebr)
		}
		le := binary.LittleEndian
		typ := b[446+4]
		start := ebr + int64(le.Uint32(b[446+8:]))*512
		length := int64(le.Uint32(b[446+12:])) * 512
		if typ != 0 && length > 0 {
			if start+length > extEnd {
				return nil, corruptf("logical partition %d (bytes %d..%d) lies outside the extended partition", n, start, start+length)
			}
			if err := add(n, start, length, typ); err != nil {
				return nil, err
			}
		}
		next := b[446+16:]
		if next[4] == 0 || le.Uint32(next[8:]) == 0 {
			break
		}
		if !isExtended(next[4]) {
			return nil, corruptf("extended boot record at byte %d links to type 0x%02X", ebr, next[4])
		}
		ebr = extStart + int64(le.Uint32(next[8:]))*512
	}
	return t, nil
}

// readGPT reads the primary GPT header and checks the backup it names, or
// reads the backup when the primary fails, trying 512- and 4096-byte
// logical sectors.
func readGPT(r io.ReaderAt, size int64, check *integrity.Checker) (*Table, error) {
	var errs []error
	for _, sector := range []int64{512, 4096} {
		if size < 3*sector {
			continue
		}
		last := size/sector - 1
		t, alt, perr := readGPTAt(r, size, sector, 1, false)
		if perr == nil {
			if alt < 2 || alt > last {
				t.Warnings = append(t.Warnings, fmt.Sprintf("gpt: the primary header names its backup at LBA %d, outside the disk's %d sectors: the primary was read", alt, last+1))
			} else if _, _, berr := readGPTAt(r, size, sector, alt, false); berr != nil {
				t.Warnings = append(t.Warnings, fmt.Sprintf("gpt: %s: the primary was read, as Linux does", failure("backup header at LBA", alt, berr)))
			}
			return t, nil
		}
		t, _, berr := readGPTAt(r, size, sector, last, false)
		if berr == nil {
			t.Warnings = append(t.Warnings, fmt.Sprintf("gpt: %s: the backup at LBA %d was read, "+
				"as gdisk and UEFI firmware would (Linux reads it only with its gpt parameter)", failure("primary header at LBA", 1, perr), last))
			return t, nil
		}
		errs = append(errs, perr, berr)
		if m, ok := integrity.As(perr); ok {
			// Neither copy passes, and the primary is a GPT header that
			// fails its checksums.
			if err := check.Fail(m); err != nil {
				return nil, err
			}
			t, _, err := readGPTAt(r, size, sector, 1, true)
			if err != nil {
				return nil, err
			}
			return t, nil
		}
	}
	// Keep the chain: a header that could not be read because the disk
	// failed (a remote block, a cancelled context) must say so.
	return nil, fmt.Errorf("%w: no valid GPT header: %w", ErrCorrupt, errors.Join(errs...))
}

// failure says why the GPT header at lba (what names it) was not read.
func failure(what string, lba int64, err error) string {
	if m, ok := integrity.As(err); ok {
		return m.Structure + " fails its checksum"
	}
	return fmt.Sprintf("the %s %d is invalid (%s)", what, lba, strings.ReplaceAll(err.Error(), "\n", "; "))
}

// gptMismatch is the error of a GPT structure that fails its CRC32.
func gptMismatch(structure string) error {
	return &integrity.Mismatch{Format: "gpt", Structure: structure, Corrupt: ErrCorrupt}
}

// readGPTAt reads the GPT header at lba and its entries, and returns the
// table and the LBA the header says its other copy is at. With ignoreCRC
// the header and entries are taken as stored.
func readGPTAt(r io.ReaderAt, size, sector, lba int64, ignoreCRC bool) (*Table, int64, error) {
	le := binary.LittleEndian
	which := "primary"
	if lba != 1 {
		which = "backup"
	}
	h := make([]byte, sector)
	if err := readFull(r, size, h, lba*sector, "GPT header"); err != nil {
		return nil, 0, err
	}
	if string(h[:8]) != "EFI PART" {
		return nil, 0, fmt.Errorf("GPT header at LBA %d (%d-byte sectors): no signature", lba, sector)
	}
	hsize := int64(le.Uint32(h[12:]))
	if hsize < 92 || hsize > sector {
		return nil, 0, fmt.Errorf("GPT header at LBA %d: size %d", lba, hsize)
	}
	want := le.Uint32(h[16:])
	c := append([]byte{}, h[:hsize]...)
	c[16], c[17], c[18], c[19] = 0, 0, 0, 0
	if crc32.ChecksumIEEE(c) != want && !ignoreCRC {
		return nil, 0, gptMismatch(fmt.Sprintf("%s header at LBA %d", which, lba))
	}
	if my := int64(le.Uint64(h[24:])); my != lba {
		return nil, 0, fmt.Errorf("GPT header at LBA %d says it is at LBA %d", lba, my)
	}
	alt := int64(le.Uint64(h[32:]))
	entLBA := int64(le.Uint64(h[72:]))
	count := int64(le.Uint32(h[80:]))
	esize := int64(le.Uint32(h[84:]))
	if esize < 128 || esize%128 != 0 || esize > 4096 || count > 4096 {
		return nil, 0, fmt.Errorf("GPT header at LBA %d: %d entries of %d bytes", lba, count, esize)
	}
	if entLBA < 0 || entLBA > size/sector {
		// Bound it before multiplying: a huge LBA wraps into the disk.
		return nil, 0, corruptf("GPT header at LBA %d: entries at LBA %d past the end of the disk", lba, entLBA)
	}
	ents := make([]byte, count*esize)
	if err := readFull(r, size, ents, entLBA*sector, "GPT partition entries"); err != nil {
		return nil, 0, err
	}
	if crc32.ChecksumIEEE(ents) != le.Uint32(h[88:]) && !ignoreCRC {
		return nil, 0, gptMismatch(fmt.Sprintf("partition entry array at LBA %d of the %s header", entLBA, which))
	}
	t := &Table{Scheme: GPT}
	for i := range count {
		e := ents[i*esize : (i+1)*esize]
		var zero [16]byte
		if [16]byte(e[:16]) == zero {
			continue
		}
		first, last := int64(le.Uint64(e[32:])), int64(le.Uint64(e[40:]))
		if first < 1 || last < first || last >= size/sector {
			// Checksums matched, so this is what the table says: an
			// entry past the disk's end is corruption, not noise.
			return nil, 0, corruptf("GPT partition %d (LBA %d..%d) lies outside the disk (%d sectors)", i+1, first, last, size/sector)
		}
		u := make([]uint16, 36)
		for j := range u {
			u[j] = le.Uint16(e[56+2*j:])
		}
		name := strings.TrimRight(string(utf16.Decode(u)), "\x00")
		t.Partitions = append(t.Partitions, Partition{
			Number: int(i + 1), Start: first * sector, Size: (last - first + 1) * sector,
			Type: guidString(e[:16]), Name: name, UUID: strings.ToLower(guidString(e[16:32])),
		})
	}
	return t, alt, nil
}

// guidString formats on-disk (mixed-endian) GUID bytes.
func guidString(b []byte) string {
	le := binary.LittleEndian
	return fmt.Sprintf("%08X-%04X-%04X-%X-%X", le.Uint32(b), le.Uint16(b[4:]), le.Uint16(b[6:]), b[8:10], b[10:16])
}
