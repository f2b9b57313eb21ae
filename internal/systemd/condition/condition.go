// Package condition decides a unit's Condition*= and Assert*= settings the
// way systemd tests them when the unit's job runs, from what an image
// holds: paths in the image (not under /run, /proc, /sys, /dev or /tmp,
// which are filled at boot), whether the boot is a first boot (the
// machine-id), the kernel command line the image's boot loader passes
// (GRUB, Boot Loader Specification entries, /etc/kernel/cmdline), the
// architecture of the image's binaries, its os-release and installed
// kernel. What only the machine that boots it knows (virtualization,
// memory, CPUs, firmware, ...) is unknown unless the user states it
// (Assumptions). Each verdict says why. It reads the image only through a
// rootfs view, never the host, and never writes.
package condition

import (
	"fmt"
	"strings"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// Verdict is a three-valued truth.
type Verdict string

// Verdicts.
const (
	True    Verdict = "true"
	False   Verdict = "false"
	Unknown Verdict = "unknown"
)

func verdictOf(b bool) Verdict {
	if b {
		return True
	}
	return False
}

// not is negation; Unknown stays Unknown.
func (v Verdict) not() Verdict {
	switch v {
	case True:
		return False
	case False:
		return True
	}
	return Unknown
}

// Check is one Condition*= or Assert*= assignment of a unit and its
// verdict.
type Check struct {
	// Setting is the assignment's name: "ConditionPathExists",
	// "AssertKernelCommandLine", ...
	Setting string `json:"setting"`
	// Value is the parameter as systemd tests it: the "|" and "!"
	// prefixes removed, specifiers expanded.
	Value string `json:"value"`
	// Trigger is the "|" prefix: one trigger check of the list suffices.
	Trigger bool `json:"trigger"`
	// Negate is the "!" prefix.
	Negate bool `json:"negate"`
	// Verdict is the check's result, negation applied.
	Verdict Verdict `json:"verdict"`
	// Reason says what decided it, or why it cannot be decided.
	Reason string `json:"reason"`
}

// Assert reports whether the check is an Assert*= (a failing assertion
// fails the unit's job; a failing condition only skips the unit).
func (c Check) Assert() bool { return strings.HasPrefix(c.Setting, "Assert") }

// kinds are the condition types systemd 252 to 257 know, by the name after
// the Condition or Assert prefix.
var kinds = map[string]bool{
	"Architecture": true, "Firmware": true, "Virtualization": true, "Host": true,
	"KernelCommandLine": true, "KernelVersion": true, "Credential": true, "Security": true,
	"Capability": true, "ACPower": true, "NeedsUpdate": true, "FirstBoot": true,
	"PathExists": true, "PathExistsGlob": true, "PathIsDirectory": true, "PathIsSymbolicLink": true,
	"PathIsMountPoint": true, "PathIsReadWrite": true, "PathIsEncrypted": true,
	"DirectoryNotEmpty": true, "FileNotEmpty": true, "FileIsExecutable": true,
	"User": true, "Group": true, "ControlGroupController": true, "CPUs": true, "Memory": true,
	"Environment": true, "CPUFeature": true, "OSRelease": true,
	"MemoryPressure": true, "CPUPressure": true, "IOPressure": true,
}

// pathKinds take an absolute path, which systemd simplifies and which
// specifiers expand as paths.
func pathKind(kind string) bool {
	switch kind {
	case "PathExists", "PathExistsGlob", "PathIsDirectory", "PathIsSymbolicLink", "PathIsMountPoint",
		"PathIsReadWrite", "PathIsEncrypted", "DirectoryNotEmpty", "FileNotEmpty", "FileIsExecutable", "NeedsUpdate":
		return true
	}
	return false
}

// split names a setting: ("Condition", "PathExists") for
// ConditionPathExists, ok false for anything else.
func split(name string) (prefix, kind string, ok bool) {
	for _, p := range []string{"Condition", "Assert"} {
		if k, found := strings.CutPrefix(name, p); found && kinds[k] {
			return p, k, true
		}
	}
	return "", "", false
}

// Unit decides the Condition*= and Assert*= assignments of the unit id
// (for specifiers) read from sources, its unit file and drop-ins in the
// order systemd reads them, each the list of its assignments as written.
// An empty assignment of any Condition*= setting empties the conditions
// read so far (all of them, whatever their type, as systemd does), and
// one of any Assert*= setting the assertions.
func (e *Env) Unit(id string, sources [][]*unit.Option) []Check {
	var conds, asserts []Check
	for _, opts := range sources {
		for _, o := range opts {
			if o.Section != "Unit" {
				continue
			}
			prefix, kind, ok := split(o.Name)
			if !ok {
				continue
			}
			list := &conds
			if prefix == "Assert" {
				list = &asserts
			}
			v := strings.TrimSpace(o.Value)
			if v == "" {
				*list = nil
				continue
			}
			c, ok := e.check(id, o.Name, kind, v)
			if ok {
				*list = append(*list, c)
			}
		}
	}
	return append(conds, asserts...)
}

// check parses and decides one assignment as config_parse_unit_condition_path
// and config_parse_unit_condition_string do; ok is false when systemd
// ignores it (an expansion that fails, a path it refuses).
func (e *Env) check(id, setting, kind, v string) (Check, bool) {
	c := Check{Setting: setting}
	path := pathKind(kind)
	// Blanks after "|" and "!" are skipped in a string condition only.
	if rest, ok := strings.CutPrefix(v, "|"); ok {
		c.Trigger, v = true, rest
		if !path {
			v = strings.TrimLeft(v, whitespace)
		}
	}
	if rest, ok := strings.CutPrefix(v, "!"); ok {
		c.Negate, v = true, rest
		if !path {
			v = strings.TrimLeft(v, whitespace)
		}
	}
	max := unit.FullPrintfMax
	if path {
		max = unit.PathPrintfMax
	}
	// The machine's specifiers count as empty: an expansion too long
	// without them is too long with them.
	expanded, machine, err := e.expand(id, v, max, "")
	if err != nil {
		return c, false // "Failed to resolve unit specifiers"
	}
	c.Value = expanded
	if len(machine) > 0 {
		c.Value = v
		c.Verdict, c.Reason = e.testMachine(id, kind, v, max, machine)
		if c.Negate {
			c.Verdict = c.Verdict.not()
		}
		return c, true
	}
	if path {
		p, why := unit.SimplifyPath(e.Version, expanded, true)
		if why != "" {
			return c, false // systemd ignores it with a warning
		}
		c.Value = p
	}
	r, reason := e.test(kind, c.Value)
	if c.Negate {
		r = r.not()
	}
	c.Verdict, c.Reason = r, reason
	return c, true
}

// expand expands v's specifiers as unit_full_printf does for unit id,
// the machine's as kernel for %v when kernel is not "" and as "" for the
// rest, which it returns (machine).
func (e *Env) expand(id, v string, max int, kernel string) (string, []byte, error) {
	return e.expandWith(id, v, max, kernel, "")
}

// expandWith is expand with the unknown machine specifiers expanding to
// mark.
func (e *Env) expandWith(id, v string, max int, kernel, mark string) (string, []byte, error) {
	var machine []byte
	s, err := unit.Expand(e.Version, id, v, max, func(s byte) string {
		switch {
		case s == 'h':
			return "/root"
		case s == 's':
			return e.rootShell()
		case s == 'v' && kernel != "":
			return kernel
		}
		machine = append(machine, s)
		return mark
	})
	return s, machine, err
}

// testMachine decides a check whose value has specifiers of the machine
// (negation not applied), where the image decides it anyway:
//   - %v alone: the check holds alike for every kernel the machine may
//     boot (Env.kernels);
//   - a path whose directory before the first of them is not in the
//     image: no expansion exists there.
//
// Any other is unknown.
func (e *Env) testMachine(id, kind, v string, max int, machine []byte) (Verdict, string) {
	unknown := fmt.Sprintf("specifier %%%c depends on the machine that boots the image", machine[0])
	if r, reason, ok := e.testPerKernel(id, kind, v, max, machine); ok {
		return r, reason
	}
	if pathKind(kind) {
		if r, reason, ok := e.testAbsentPrefix(id, kind, v, max); ok {
			return r, reason
		}
	}
	return Unknown, unknown
}

// testPerKernel decides a check whose only machine specifier is %v for
// each kernel the machine may boot; ok when it holds, or fails, for all.
func (e *Env) testPerKernel(id, kind, v string, max int, machine []byte) (Verdict, string, bool) {
	if strings.Trim(string(machine), "v") != "" {
		return Unknown, "", false
	}
	ks, src := e.kernels()
	if len(ks) == 0 {
		return Unknown, "", false
	}
	got := make([]Verdict, len(ks))
	var reason string
	for i, k := range ks {
		s, _, err := e.expand(id, v, max, k)
		if err != nil {
			return Unknown, "", false // too long with this kernel: systemd ignores it
		}
		if pathKind(kind) {
			p, why := unit.SimplifyPath(e.Version, s, true)
			if why != "" {
				return Unknown, "", false
			}
			s = p
		}
		got[i], reason = e.test(kind, s)
	}
	if r, ok := agree(got); ok && r != Unknown {
		if len(ks) > 1 {
			reason = "for each: " + reason
		}
		return r, reason + "; %v is the kernel the machine boots: " + src, true
	}
	return Unknown, "", false
}

// absentKinds are the path checks that fail on a path that does not
// exist.
var absentKinds = map[string]bool{
	"PathExists": true, "PathExistsGlob": true, "PathIsDirectory": true, "PathIsSymbolicLink": true,
	"DirectoryNotEmpty": true, "FileNotEmpty": true, "FileIsExecutable": true,
}

// prefixMark stands for the machine's specifiers in testAbsentPrefix's
// expansion: a unit file's value cannot hold a NUL byte.
const prefixMark = "\x00"

// testAbsentPrefix decides a path check whose directory before the first
// machine specifier does not exist in the image (/lib/modules/%v/… in an
// image without /lib/modules): whatever the machine's values, the path
// does not exist. ok is false when that directory exists, is the
// machine's (/dev, /run, …) or holds a glob.
func (e *Env) testAbsentPrefix(id, kind, v string, max int) (Verdict, string, bool) {
	if !absentKinds[kind] || e.fsys == nil || strings.Contains(v, prefixMark) {
		return Unknown, "", false
	}
	s, _, err := e.expandWith(id, v, max+len(v)*len(prefixMark), "", prefixMark)
	if err != nil {
		return Unknown, "", false
	}
	i := strings.Index(s, prefixMark)
	if i < 0 || !strings.HasPrefix(s, "/") {
		return Unknown, "", false
	}
	dir := s[:strings.LastIndexByte(s[:i], '/')]
	if dir == "" || kind == "PathExistsGlob" && strings.ContainsAny(dir, "*?[") {
		return Unknown, "", false
	}
	dir, why := unit.SimplifyPath(e.Version, dir, true)
	if why != "" || volatile(dir) != "" {
		return Unknown, "", false
	}
	fi, err := e.fsys.Stat(strings.TrimPrefix(dir, "/"))
	switch {
	case err == nil && fi.IsDir():
		return Unknown, "", false
	case err == nil:
		return False, fmt.Sprintf("%s is not a directory in the image, whatever the machine's specifiers are", dir), true
	case absent(err):
		return False, fmt.Sprintf("%s does not exist in the image, whatever the machine's specifiers are", dir), true
	}
	return Unknown, "", false
}

// Result combines checks as condition_test_list does, for conditions and
// assertions alike: every non-trigger check must hold, and one trigger
// check if there are any. A check that cannot be decided makes the
// result unknown only where it could change it.
func Result(checks []Check) Verdict {
	result := True
	var triggers []Verdict
	for _, c := range checks {
		if c.Trigger {
			triggers = append(triggers, c.Verdict)
			continue
		}
		switch c.Verdict {
		case False:
			return False
		case Unknown:
			result = Unknown
		}
	}
	if len(triggers) == 0 {
		return result
	}
	trig := False
	for _, v := range triggers {
		if v == True {
			trig = True
			break
		}
		if v == Unknown {
			trig = Unknown
		}
	}
	switch {
	case trig == False:
		return False
	case trig == Unknown:
		return Unknown
	}
	return result
}

// Undecided are the checks that cannot be decided, as written, in
// order; nil when there are none.
func Undecided(checks []Check) []string {
	var out []string
	for _, c := range checks {
		if c.Verdict == Unknown {
			out = append(out, c.String())
		}
	}
	return out
}

// Explain is one line saying why checks do not all hold, for messages:
// the failing non-trigger checks, or that no trigger check holds.
func Explain(checks []Check) string {
	var parts []string
	for _, c := range checks {
		if !c.Trigger && c.Verdict == False {
			parts = append(parts, c.String()+": "+c.Reason)
		}
	}
	if len(parts) == 0 {
		var trig []string
		for _, c := range checks {
			if c.Trigger {
				trig = append(trig, c.String())
			}
		}
		if len(trig) > 0 && Result(checks) == False {
			parts = append(parts, "none of "+strings.Join(trig, ", ")+" holds")
		}
	}
	return strings.Join(parts, "; ")
}

// String is the assignment as written, specifiers expanded.
func (c Check) String() string {
	var b strings.Builder
	b.WriteString(c.Setting + "=")
	if c.Trigger {
		b.WriteString("|")
	}
	if c.Negate {
		b.WriteString("!")
	}
	b.WriteString(c.Value)
	return b.String()
}

// whitespace is systemd's WHITESPACE.
const whitespace = " \t\n\r"
