// Package integrity owns what the image readers do when a structure fails
// the check its format carries (a CRC32C, a CRC32, a byte sum): the one
// error they all return for it ([Mismatch], which wraps [ErrChecksum] and
// the reader's own ErrCorrupt), and the [Checker] that decides, per target,
// whether a mismatch stops the audit (the default) or is recorded in a
// [Log] and reading goes on (amilint's --allow-corrupt, for a forensic look
// at a damaged image). It also holds the checksum functions the formats
// share, seeded as their kernels and tools seed them. It reads nothing
// itself and never decides what a structure means.
package integrity

import (
	"errors"
	"fmt"
	"hash/crc32"
	"sort"
	"strings"
	"sync"
)

// ErrChecksum reports a structure whose stored checksum does not match its
// contents. Every [Mismatch] wraps it.
var ErrChecksum = errors.New("checksum mismatch")

// Mismatch is one structure of an image that fails its checksum. Its
// message is the one line a user reads: "partition 2: ext4: directory
// block 4389 (/etc/systemd/system/multi-user.target.wants) fails its
// checksum".
type Mismatch struct {
	// Where locates the volume in the target ("partition 2", "LV vg/root
	// in partition 3"); "" for the whole target.
	Where string
	// Format is the format whose structure it is: "ext4", "xfs", "gpt",
	// "lvm", "vhdx", "tar".
	Format string
	// Structure names the structure and where it lies in its format:
	// "directory block 4389", "inode 12", "primary header at LBA 1".
	Structure string
	// Path is the file or directory being read when the structure was,
	// if known ("/etc/os-release").
	Path string
	// Corrupt is the reader's ErrCorrupt, which the Mismatch wraps too,
	// so errors.Is(err, ext4.ErrCorrupt) holds for a checksum failure.
	Corrupt error
	// Ino is the inode the structure belongs to (0: none), for a reader
	// to find Path from.
	Ino uint64
}

func (m *Mismatch) Error() string {
	var b strings.Builder
	if m.Where != "" {
		b.WriteString(m.Where + ": ")
	}
	b.WriteString(m.Format + ": " + m.Structure)
	if m.Path != "" {
		b.WriteString(" (" + m.Path + ")")
	}
	b.WriteString(" fails its checksum")
	return b.String()
}

// Unwrap returns ErrChecksum and the reader's ErrCorrupt.
func (m *Mismatch) Unwrap() []error {
	if m.Corrupt == nil {
		return []error{ErrChecksum}
	}
	return []error{ErrChecksum, m.Corrupt}
}

// As returns the first Mismatch in err's chain.
func As(err error) (*Mismatch, bool) {
	var m *Mismatch
	ok := errors.As(err, &m)
	return m, ok
}

// WithPath returns err with the path being read filled in: when err's chain
// holds a Mismatch that names no path yet, a copy of it naming path (the
// Mismatch says all the chain around it said); else err unchanged. The
// readers of inode-based filesystems do not know paths; the lookup above
// them does, and calls this as their errors pass.
func WithPath(err error, path string) error {
	m, ok := As(err)
	if !ok || m.Path != "" || path == "" {
		return err
	}
	c := *m
	c.Path = path
	return &c
}

// Checker decides what a mismatch does. The nil *Checker, what readers use
// unless told otherwise, makes every mismatch an error. A Checker is safe
// for concurrent use.
type Checker struct {
	where string
	log   *Log // nil: mismatches are errors
}

// Strict returns a Checker whose mismatches are errors located at where.
func Strict(where string) *Checker { return &Checker{where: where} }

// Lenient returns a Checker that records mismatches in log and lets reading
// go on with the structure as stored.
func Lenient(log *Log) *Checker { return &Checker{log: log} }

// Within returns a Checker that behaves as c and locates its mismatches at
// where inside c's location ("partition 2", "LV vg/root").
func (c *Checker) Within(where string) *Checker {
	if c == nil {
		return Strict(where)
	}
	w := where
	if c.where != "" && where != "" {
		w = c.where + ": " + where
	} else if where == "" {
		w = c.where
	}
	return &Checker{where: w, log: c.log}
}

// Lenient reports whether c records mismatches rather than failing on
// them; a reader that can name paths only at some cost pays it then.
func (c *Checker) Lenient() bool { return c != nil && c.log != nil }

// Fail handles the mismatch m: it returns m, located, as the error to stop
// on; or, for a lenient Checker, records it and returns nil, and the
// reader goes on with the structure as it is stored.
func (c *Checker) Fail(m *Mismatch) error {
	if c != nil && m.Where == "" {
		m.Where = c.where
	}
	if c == nil || c.log == nil {
		return m
	}
	c.log.add(m.Error())
	return nil
}

// Record adds line to a lenient Checker's log, located as its mismatches
// are: a structure its reader, reading on past a mismatch, then could not
// read at all. A strict Checker ignores it (its reader returns the error).
func (c *Checker) Record(line string) {
	if !c.Lenient() {
		return
	}
	if c.where != "" {
		line = c.where + ": " + line
	}
	c.log.add(line)
}

// Lines returns the lines c's Log holds (see Log.Lines): the mismatches
// recorded by every Checker sharing it. It is nil for a strict Checker.
func (c *Checker) Lines() []string {
	if c == nil {
		return nil
	}
	return c.log.Lines()
}

// maxLines bounds a Log: a badly damaged image fails thousands of checks,
// and the first ones say enough.
const maxLines = 200

// Log is the record a lenient Checker keeps: each mismatch's line, once,
// in the order they were found. It is safe for concurrent use.
type Log struct {
	mu      sync.Mutex
	seen    map[string]bool
	lines   []string
	dropped int
}

func (l *Log) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen[line] {
		return
	}
	if l.seen == nil {
		l.seen = map[string]bool{}
	}
	l.seen[line] = true
	if len(l.lines) >= maxLines {
		l.dropped++
		return
	}
	l.lines = append(l.lines, line)
}

// Lines returns the mismatches recorded so far, one line each, sorted; when
// more were found than a Log keeps, a last line says how many more.
func (l *Log) Lines() []string {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]string(nil), l.lines...)
	sort.Strings(out)
	if l.dropped > 0 {
		out = append(out, fmt.Sprintf("… and %d more structures that fail their checksums", l.dropped))
	}
	return out
}

// castagnoli is the CRC32C table (hash/crc32 uses the CPU's instruction
// for it where there is one).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C is the standard CRC32C of p (initial value and final result
// inverted), as XFS, VHDX and the iSCSI specification compute it.
func CRC32C(p []byte) uint32 { return crc32.Checksum(p, castagnoli) }

// CRC32CUpdate continues a standard CRC32C over p.
func CRC32CUpdate(crc uint32, p []byte) uint32 { return crc32.Update(crc, castagnoli, p) }

// CRC32CRaw continues the Linux kernel's crc32c(seed, p, len): the CRC32C
// register updated over p with neither the seed nor the result inverted.
// ext4 and jbd2 seed it with ~0 or a filesystem's seed and store the
// register as it is.
func CRC32CRaw(seed uint32, p []byte) uint32 { return ^crc32.Update(^seed, castagnoli, p) }

// crc16Table is the table of the reflected CRC-16 of polynomial 0x8005
// (0xA001), the Linux kernel's lib/crc16.
var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i)
		for range 8 {
			if c&1 != 0 {
				c = c>>1 ^ 0xA001
			} else {
				c >>= 1
			}
		}
		t[i] = c
	}
	return t
}()

// CRC16 continues the Linux kernel's crc16(crc, p, len) (reflected, poly
// 0x8005, no inversion): ext4 group descriptors without metadata_csum
// carry it (the uninit_bg feature).
func CRC16(crc uint16, p []byte) uint16 {
	for _, b := range p {
		crc = crc>>8 ^ crc16Table[byte(crc)^b]
	}
	return crc
}
