package report

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/audit/finding"
)

// textWriter renders findings grouped by severity for a person at a
// terminal: each finding's rule, unit, message, the chain that starts the
// unit and the exact fix, then a one-line summary.
type textWriter struct{ o options }

const (
	ansiReset = "\x1b[0m"
	ansiBold  = "\x1b[1m"
	ansiDim   = "\x1b[2m"
)

var ansiSeverity = map[finding.Severity]string{
	finding.Critical: "\x1b[1;35m",
	finding.High:     "\x1b[1;31m",
	finding.Medium:   "\x1b[33m",
	finding.Low:      "\x1b[36m",
	finding.Info:     "\x1b[2m",
}

func (t *textWriter) colored(w io.Writer) bool {
	switch t.o.color {
	case ColorAlways:
		return true
	case ColorNever:
		return false
	}
	return IsTerminal(w) && os.Getenv("NO_COLOR") == ""
}

func (t *textWriter) Write(w io.Writer, r *finding.Report) error {
	color := t.colored(w)
	paint := func(code, s string) string {
		if !color || code == "" {
			return s
		}
		return code + s + ansiReset
	}
	bw := bufio.NewWriter(w)
	target := r.Target.Name
	if r.Target.Kind != "" {
		target += " (" + r.Target.Kind + ")"
	}
	if r.Target.OS != "" {
		target += " — " + r.Target.OS
	}
	target = Printable(target)
	fmt.Fprintf(bw, "%s %s\n", paint(ansiBold, "amilint report for"), target)
	for _, g := range groups(sortedFindings(r)) {
		label := strings.ToUpper(severityLabel(g))
		code := ansiSeverity[g.Severity]
		if g.Waived {
			code = ansiDim
		}
		fmt.Fprintf(bw, "\n%s (%d)\n", paint(code, label), len(g.Findings))
		// A rule's remediation is the same text for each of its units
		// (service-exposure's is over a kilobyte, on fifty services of a
		// stock image): it is written once per group, under the first
		// finding, and the others point back to it.
		said := map[string]string{}
		for _, f := range g.Findings {
			head := f.RuleID
			if f.Unit != "" {
				head += "  " + f.Unit
			}
			head = Printable(head)
			if g.Waived {
				head += "  [" + f.Severity.String() + ", waived]"
			}
			fmt.Fprintf(bw, "  %s\n", paint(ansiBold, head))
			if f.Title != "" {
				fmt.Fprintf(bw, "    %s\n", oneLine(f.Title))
			}
			fmt.Fprintf(bw, "    %s\n", oneLine(f.Message))
			if c := Chain(f.Chain); c != "" {
				fmt.Fprintf(bw, "    starts at boot: %s\n", Printable(c))
			}
			if f.Waived && f.Waiver != nil {
				wv := "    waived: " + oneLine(f.Waiver.Reason)
				if f.Waiver.Expires != "" {
					wv += " (expires " + oneLine(f.Waiver.Expires) + ")"
				}
				fmt.Fprintln(bw, wv)
			}
			cmds := FixCommands(f)
			if len(cmds) > 0 {
				fmt.Fprintln(bw, "    fix:")
				for _, c := range cmds {
					fmt.Fprintf(bw, "      %s\n", paint(ansiBold, Printable(c)))
				}
			}
			if text := oneLine(f.Remediation.Text); text != "" {
				key := f.RuleID + "\x00" + text
				if first, ok := said[key]; ok {
					fmt.Fprintf(bw, "    %s\n", remediationAbove(first))
				} else {
					said[key] = f.Unit
					fmt.Fprintf(bw, "    %s\n", text)
				}
			}
		}
	}
	if l := t.o.live; l != nil {
		writeLiveText(bw, l)
	}
	fmt.Fprintf(bw, "\n%s\n", summaryLine(r, t.o.failOn))
	return bw.Flush()
}

// remediationAbove points to the remediation written under the rule's
// first finding in the same group, named by its unit when it has one.
func remediationAbove(unit string) string {
	if unit == "" {
		return "(remediation as above)"
	}
	return "(remediation as for " + Printable(unit) + " above)"
}

func writeLiveText(w io.Writer, l *Live) {
	fmt.Fprintln(w, "\nLIVE")
	if l.Memcg != nil {
		fmt.Fprintf(w, "  memory cgroups: %d tracked by the kernel, %d present, %d zombies",
			l.Memcg.Tracked, l.Memcg.Present, l.Memcg.Zombies)
		if l.Memcg.Leaking != "" {
			fmt.Fprintf(w, " (leaking: %s)", oneLine(l.Memcg.Leaking))
		}
		fmt.Fprintln(w)
	}
	for _, c := range hotCores(l.Cores, 0.5) {
		fmt.Fprintf(w, "  cpu%d: %.0f%% busy, %.0f%% system", c.CPU, 100*c.Busy(), 100*c.System)
		if len(c.NICs) > 0 {
			fmt.Fprintf(w, ", serves %s", oneLine(strings.Join(c.NICs, ", ")))
		}
		fmt.Fprintln(w)
	}
}

// hotCores are the cores at least min busy, busiest first.
func hotCores(cs []Core, min float64) []Core {
	var out []Core
	for _, c := range cs {
		if c.Busy() >= min {
			out = append(out, c)
		}
	}
	slices.SortStableFunc(out, func(a, b Core) int { return cmp.Compare(b.Busy(), a.Busy()) })
	return out
}

// oneLine folds a message's line breaks so one finding stays one block,
// and replaces control characters (a hostile image's escape sequences
// must not reach a terminal) with U+FFFD.
func oneLine(s string) string {
	return Printable(strings.Join(strings.Fields(s), " "))
}

// Printable replaces C0 and C1 control characters, DEL, the bidirectional
// formatting characters and invalid UTF-8 with U+FFFD (finding.Printable).
func Printable(s string) string { return finding.Printable(s) }
