package cli

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// section is what a flag applies to; `<command> --help` lists flags by
// section, so fix's image flags and its --live flags are not one list.
type section int

const (
	secMode   section = iota // what the command does (fix --live, --dry-run)
	secTarget                // how an image TARGET is read
	secHost                  // the running host: live, fix --live
	secPolicy                // rules, policies, waivers and the exit gate
	secOutput                // formats, files, serving
	secTest                  // which Rego tests run
	secOther                 // a flag sectionOf does not know (a test fails on it)
)

// sectionOf is the registry of flags: every flag of every command has its
// section here.
func sectionOf(name string) section {
	switch name {
	case "live", "dry-run":
		return secMode
	case "partition", "backing", "systemd-version", "assume", "platform", "allow-corrupt", "harden", "harden-catalog":
		return secTarget
	case "root", "mountinfo", "bus", "collect", "sample", "zombie-threshold", "restart-threshold", "saturation":
		return secHost
	case "rules", "policy", "data", "profile", "trait", "waivers", "fail-on", "policy-timeout", "policy-memory", "policy-capabilities",
		"threshold", "security-policy":
		return secPolicy
	case "o", "output", "serve", "npd", "interval", "web.config.file", "web.max-connections":
		return secOutput
	case "run", "v":
		return secTest
	}
	return secOther
}

// sectionTitle names a section as the command cmd uses it.
func sectionTitle(cmd string, s section) string {
	switch s {
	case secMode:
		return "mode"
	case secTarget:
		if cmd == "fix" {
			return "image flags (fix DIR)"
		}
		return "image target flags (how TARGET is read)"
	case secHost:
		if cmd == "fix" {
			return "--live flags (fix --live: the running host, over D-Bus)"
		}
		return "host flags (which host, which collectors, live thresholds)"
	case secPolicy:
		if cmd == "policy test" {
			return "policy flags (what the tests see)"
		}
		return "policy flags (what is judged, what fails)"
	case secOutput:
		return "output flags"
	case secTest:
		return "test selection flags"
	}
	return "other flags"
}

// usageOf prints a command's usage line and its flags by section; it is
// what `-h`/`--help` prints, and exits 0.
func usageOf(e *env, fs *flag.FlagSet, line string) int {
	fmt.Fprintln(e.stderr, "usage: "+line)
	printFlags(e.stderr, strings.TrimPrefix(fs.Name(), "amilint "), fs)
	return ExitOK
}

// printFlags lists fs's flags under their sections' titles, each section
// sorted by name, formatted as flag.PrintDefaults formats them.
func printFlags(w io.Writer, cmd string, fs *flag.FlagSet) {
	bySection := map[section][]*flag.Flag{}
	fs.VisitAll(func(f *flag.Flag) { bySection[sectionOf(f.Name)] = append(bySection[sectionOf(f.Name)], f) })
	for s := secMode; s <= secOther; s++ {
		flags := bySection[s]
		if len(flags) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", sectionTitle(cmd, s))
		slices.SortFunc(flags, func(a, b *flag.Flag) int { return strings.Compare(a.Name, b.Name) })
		for _, f := range flags {
			fmt.Fprint(w, flagLine(f))
		}
	}
}

// flagLine is one flag as flag.PrintDefaults prints it, with -- before
// long names as the README spells them.
func flagLine(f *flag.Flag) string {
	var b strings.Builder
	dash := "--"
	if len(f.Name) == 1 {
		dash = "-"
	}
	fmt.Fprintf(&b, "  %s%s", dash, f.Name)
	arg, usage := flag.UnquoteUsage(f)
	if arg != "" {
		b.WriteString(" " + arg)
	}
	if b.Len() <= 4 {
		b.WriteString("\t")
	} else {
		b.WriteString("\n    \t")
	}
	b.WriteString(strings.ReplaceAll(usage, "\n", "\n    \t"))
	if d := f.DefValue; d != "" && d != "0" && d != "false" && d != "0s" && d != "[]" {
		if arg == "string" {
			d = fmt.Sprintf("%q", d)
		}
		fmt.Fprintf(&b, " (default %s)", d)
	}
	b.WriteString("\n")
	return b.String()
}
