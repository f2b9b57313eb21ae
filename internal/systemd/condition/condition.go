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
	var machine []byte
	expanded, err := unit.Expand(e.Version, id, v, max, func(s byte) string {
		switch s {
		case 'h':
			return "/root"
		case 's':
			return e.rootShell()
		}
		machine = append(machine, s)
		return ""
	})
	if err != nil {
		return c, false // "Failed to resolve unit specifiers"
	}
	c.Value = expanded
	if len(machine) > 0 {
		c.Value = v
		c.Verdict, c.Reason = Unknown, fmt.Sprintf("specifier %%%c depends on the machine that boots the image", machine[0])
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
