// Package cpu owns per-core CPU facts of a running host: utilisation of
// each core over a short sample (/proc/stat), NET_RX softirqs per core
// (/proc/softirqs), and which cores serve the network card's interrupts
// (/proc/interrupts and /sys/class/net), so that "the core serving eth0's
// interrupts is saturated while the machine looks idle" is stated plainly.
//
// It reads only those proc and sysfs files, from an fs.FS laid out like
// the host's root, and never writes.
package cpu

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrCorrupt marks a proc file that does not parse.
var ErrCorrupt = errors.New("corrupt")

// Times are cumulative clock ticks of one CPU line of /proc/stat.
type Times struct {
	User, Nice, System, Idle, IOWait, IRQ, SoftIRQ, Steal uint64
}

// Total is the sum of all ticks (guest time is already in user and nice).
func (t Times) Total() uint64 {
	return t.User + t.Nice + t.System + t.Idle + t.IOWait + t.IRQ + t.SoftIRQ + t.Steal
}

// Stat is the CPU part of /proc/stat.
type Stat struct {
	All Times
	// Cores are the per-CPU lines by CPU number (offline CPUs are absent).
	Cores map[int]Times
}

// ParseStat parses /proc/stat's cpu lines.
func ParseStat(b []byte) (*Stat, error) {
	s := &Stat{Cores: map[int]Times{}}
	seenAll := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "cpu") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 5 {
			return nil, fmt.Errorf("line %q: too few fields: %w", truncate(line), ErrCorrupt)
		}
		var v [8]uint64
		for i := 1; i < len(f) && i <= 8; i++ {
			n, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("line %q: %w", truncate(line), ErrCorrupt)
			}
			v[i-1] = n
		}
		t := Times{User: v[0], Nice: v[1], System: v[2], Idle: v[3], IOWait: v[4], IRQ: v[5], SoftIRQ: v[6], Steal: v[7]}
		if f[0] == "cpu" {
			s.All, seenAll = t, true
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil || n < 0 {
			return nil, fmt.Errorf("cpu name %q: %w", truncate(f[0]), ErrCorrupt)
		}
		s.Cores[n] = t
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scan: %w", err)
	}
	if !seenAll || len(s.Cores) == 0 {
		return nil, fmt.Errorf("no cpu lines: %w", ErrCorrupt)
	}
	return s, nil
}

// Table is a per-CPU counter table as /proc/softirqs and /proc/interrupts
// print it: a header of CPU columns, then one row per source.
type Table struct {
	// CPUs are the CPU numbers of the columns, in order.
	CPUs []int
	// Rows are in file order.
	Rows []Row
}

// Row is one source of a Table.
type Row struct {
	// Key is the label before the colon: "NET_RX", "34", "LOC".
	Key string
	// Counts are per column of Table.CPUs; a row may have fewer.
	Counts []uint64
	// Desc is the rest of the line (for interrupts: chip, hwirq and the
	// action names, e.g. "PCI-MSIX-0000:00:03.0 1-edge virtio2-input.0").
	Desc string
}

// Row returns the row with key, if any.
func (t *Table) Row(key string) (Row, bool) {
	for _, r := range t.Rows {
		if r.Key == key {
			return r, true
		}
	}
	return Row{}, false
}

// ParseTable parses /proc/softirqs or /proc/interrupts.
func ParseTable(b []byte) (*Table, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64*1024), 4<<20)
	t := &Table{}
	header := true
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "" {
			continue
		}
		if header {
			header = false
			for _, c := range strings.Fields(line) {
				n, err := strconv.Atoi(strings.TrimPrefix(c, "CPU"))
				if !strings.HasPrefix(c, "CPU") || err != nil || n < 0 {
					return nil, fmt.Errorf("header column %q: %w", truncate(c), ErrCorrupt)
				}
				t.CPUs = append(t.CPUs, n)
			}
			if len(t.CPUs) == 0 {
				return nil, fmt.Errorf("empty header: %w", ErrCorrupt)
			}
			continue
		}
		key, rest, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("line %q: no colon: %w", truncate(line), ErrCorrupt)
		}
		r := Row{Key: strings.TrimSpace(key)}
		f := strings.Fields(rest)
		i := 0
		for ; i < len(f) && i < len(t.CPUs); i++ {
			n, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				break
			}
			r.Counts = append(r.Counts, n)
		}
		r.Desc = strings.Join(f[i:], " ")
		t.Rows = append(t.Rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("scan: %w", err)
	}
	if header {
		return nil, fmt.Errorf("empty: %w", ErrCorrupt)
	}
	return t, nil
}

func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}
