package systemdtest

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// Transaction is what `systemd --test --system` says of a root's initial
// boot transaction.
type Transaction struct {
	// Start are the units with a start job, sorted.
	Start []string
	// Triggers maps a loaded unit to the units it triggers ("Triggers:").
	Triggers map[string][]string
	// Wants maps a loaded unit to the units it wants ("Wants:"), whether
	// a setting, a link or systemd itself added the dependency.
	Wants map[string][]string
	// After maps a loaded unit to the units it starts after ("After:"),
	// whether a setting (its own After= or another's Before=) or systemd
	// itself added the ordering.
	After map[string][]string
	// Cycles are the ordering cycles systemd logged while verifying the
	// transaction's order ("Found ordering cycle on X/start", then "Found
	// dependency on Y/start" for the rest), each the units in the order
	// logged.
	Cycles [][]string
	// CycleDeleted are the units whose job systemd deleted to break an
	// ordering cycle ("Job X/start deleted to break ordering cycle
	// starting with ..."), in the order logged.
	CycleDeleted []string
	// Failed is systemd's reason when it could not queue the default
	// target's job ("Failed to isolate default target: Unit x.service is
	// masked."; "rescue.target masked" or "Failed to load rescue.target"
	// when the fallback cannot be loaded either), "" when it could.
	Failed string
	// Fallback names the target systemd fell back to because
	// default.target could not be loaded ("rescue.target"), "" if none.
	Fallback string
	// Default is the unit default.target names: the dumped unit with the
	// alias default.target, or default.target itself.
	Default string
	// Console is everything systemd (and the generators it ran) logged.
	Console string
}

var (
	jobLine      = regexp.MustCompile(`^\t\tAction: (\S+) -> start$`)
	unitLine     = regexp.MustCompile(`^\t-> Unit (\S+):$`)
	triggersLine = regexp.MustCompile(`^\t\tTriggers: (\S+) \(`)
	wantsLine    = regexp.MustCompile(`^\t\tWants: (\S+) \(`)
	fallbackLine = regexp.MustCompile(`Falling back to (\S+)\.`)
	afterLine    = regexp.MustCompile(`^\t\tAfter: (\S+) \(`)
	aliasLine    = regexp.MustCompile(`^\t\tAlias: (\S+)$`)
	cycleLine    = regexp.MustCompile(`Found (ordering cycle|dependency) on (\S+)/\S+$`)
	deletedLine  = regexp.MustCompile(`Job (\S+)/\S+ deleted to break ordering cycle starting with `)
)

// Boot runs `systemd --test --system` of s on its root with upper (a
// directory made by [Systemd.Upper], or "" for the root alone) stacked
// over it in an overlay (written only in a tmpfs of the command's own).
// systemd runs as nobody with /proc, a writable /sys, the host's cgroup
// hierarchy and an empty tmpfs on /run, as at a real boot, and its console
// captured. Generators run unless
// upper masks them (see [Systemd.MaskGenerators]).
func (s Systemd) Boot(tb testing.TB, upper string) Transaction {
	tb.Helper()
	return s.BootWith(tb, upper, Machine{})
}

// Machine is what Boot shows systemd and its generators of the machine
// that boots.
type Machine struct {
	// CmdLine, when set, is bind-mounted over /proc/cmdline: the kernel
	// command line the generators read. Unset, they read an empty one, as
	// the model does of an image without a boot loader configuration (the
	// Debian roots), never the test machine's own. systemd itself does
	// not read it in test mode: it parses the kernel command line only as
	// PID 1 (arg_system is still false when parse_configuration runs),
	// so what it would take from it is given as Unit.
	CmdLine *string
	// Unit, when set, is the unit systemd starts in default.target's
	// place (--unit=, which sets the arg_default_unit that systemd.unit=
	// or a runlevel word on the kernel command line sets at a real boot).
	Unit string
	// Container mounts /sys read-only, which systemd takes for a
	// container: it supports no device units, and
	// systemd-fstab-generator ignores device entries. Without it /sys is
	// writable, as on the virtual machine the boot model assumes.
	Container bool
}

// BootWith is Boot on the machine m.
func (s Systemd) BootWith(tb testing.TB, upper string, m Machine) Transaction {
	tb.Helper()
	lower := s.Path(tb)
	tmp := tb.TempDir()
	merged, rw := filepath.Join(tmp, "merged"), filepath.Join(tmp, "rw")
	// The stack is writable through a tmpfs upper layer so systemd can
	// create its temporary generator directory under /tmp without a mount
	// there (a tmpfs on /tmp would make tmp.mount active already).
	sysOpts, text := "", ""
	if m.CmdLine != nil {
		text = *m.CmdLine
	}
	cmdline := filepath.Join(tmp, "cmdline")
	if err := os.WriteFile(cmdline, []byte(text+"\n"), 0o644); err != nil {
		tb.Fatalf("systemd %d: %v", s.Version, err)
	}
	if m.Container {
		sysOpts = "-o ro"
	}
	script := `set -e
r=$1 lower=$2 upper=$3 rw=$4 cmdline=$5 console=$6
shift 6
` + overlay(upper) + `mount -t proc proc "$r/proc"
mount -t sysfs ` + sysOpts + ` sysfs "$r/sys"
mount --rbind /sys/fs/cgroup "$r/sys/fs/cgroup"
mount -t tmpfs tmpfs "$r/run"
mount --bind "$cmdline" "$r/proc/cmdline"
mount --bind "$console" "$r/dev/console"
exec chroot --userspec=65534:65534 "$r" "$@"`
	argv := []string{"/lib/systemd/systemd", "--test", "--system", "--no-pager", "--log-target=console", "--log-level=info"}
	if m.Unit != "" {
		argv = append(argv, "--unit="+m.Unit)
	}
	o := s.namespace(tb, script, []string{merged, lower, upper, rw, cmdline}, argv)
	// systemd logs to the console, or to stderr when the console is not
	// a terminal; either way the lines are the same.
	tr := Transaction{Triggers: map[string][]string{}, Wants: map[string][]string{}, After: map[string][]string{}, Console: string(o.Console) + string(o.Stderr)}
	for _, l := range strings.Split(tr.Console, "\n") {
		l = strings.TrimRight(l, "\r")
		if m := fallbackLine.FindStringSubmatch(l); m != nil {
			tr.Fallback = m[1]
		}
		if m := cycleLine.FindStringSubmatch(l); m != nil {
			if m[1] == "ordering cycle" || len(tr.Cycles) == 0 {
				tr.Cycles = append(tr.Cycles, nil)
			}
			tr.Cycles[len(tr.Cycles)-1] = append(tr.Cycles[len(tr.Cycles)-1], m[2])
		}
		if m := deletedLine.FindStringSubmatch(l); m != nil {
			tr.CycleDeleted = append(tr.CycleDeleted, m[1])
		}
		if o.Err == nil || tr.Failed != "" {
			continue
		}
		switch {
		case strings.HasPrefix(l, "Failed to "):
			tr.Failed = l
		case tr.Fallback != "" && strings.HasPrefix(l, "Unit "+tr.Fallback+" "):
			// The fallback cannot be loaded either: PID 1 logs why and
			// stops with this message (do_queue_default_job).
			tr.Failed = "Failed to load " + tr.Fallback
			if strings.HasSuffix(l, " is masked.") {
				tr.Failed = tr.Fallback + " masked"
			}
		}
	}
	if o.Err != nil {
		// In test mode systemd logs why it could not queue the default
		// target's job and exits 1 without dumping jobs.
		if bytes.Contains(o.Stdout, []byte("-> By jobs:")) || tr.Failed == "" {
			tb.Fatalf("systemd %d --test: %v\nstderr: %s\nconsole: %s", s.Version, o.Err, o.Stderr, o.Console)
		}
		return tr
	}
	inJobs := false
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(o.Stdout))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "-> By jobs:" {
			inJobs = true
			continue
		}
		if m := unitLine.FindStringSubmatch(l); !inJobs && m != nil {
			cur = m[1]
			if cur == "default.target" && tr.Default == "" {
				tr.Default = cur
			}
		}
		if m := aliasLine.FindStringSubmatch(l); !inJobs && m != nil && m[1] == "default.target" {
			tr.Default = cur
		}
		if m := triggersLine.FindStringSubmatch(l); !inJobs && m != nil {
			tr.Triggers[cur] = append(tr.Triggers[cur], m[1])
		}
		if m := wantsLine.FindStringSubmatch(l); !inJobs && m != nil {
			tr.Wants[cur] = append(tr.Wants[cur], m[1])
		}
		if m := afterLine.FindStringSubmatch(l); !inJobs && m != nil {
			tr.After[cur] = append(tr.After[cur], m[1])
		}
		if m := jobLine.FindStringSubmatch(l); inJobs && m != nil {
			tr.Start = append(tr.Start, m[1])
		}
	}
	if !inJobs {
		tb.Fatalf("systemd %d --test printed no jobs section; stderr: %s", s.Version, o.Stderr)
	}
	sort.Strings(tr.Start)
	tr.Start = slices.Compact(tr.Start)
	return tr
}
