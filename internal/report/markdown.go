package report

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"github.com/amilint/amilint/internal/audit/finding"
)

// markdownWriter writes GitHub-flavoured Markdown for a pull-request
// comment: a summary table, then each finding with its chain and fix.
type markdownWriter struct{ o options }

var severityIcon = map[string]string{
	"critical": "🟣", "high": "🔴", "medium": "🟠", "low": "🔵", "info": "⚪", "waived": "⚫",
}

func (m *markdownWriter) Write(w io.Writer, r *finding.Report) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "## amilint: %s\n\n", MarkdownEscape(r.Target.Name))
	var about []string
	for _, s := range []string{r.Target.Kind, r.Target.OS} {
		if s != "" {
			about = append(about, MarkdownEscape(s))
		}
	}
	if len(about) > 0 {
		fmt.Fprintf(bw, "%s\n\n", strings.Join(about, " · "))
	}
	fmt.Fprintf(bw, "**%s**\n\n", summaryLine(r, m.o.failOn))
	s := finding.Summarize(r.Findings)
	fmt.Fprintln(bw, "| severity | findings |")
	fmt.Fprintln(bw, "|---|---:|")
	for sev := finding.Critical; sev >= finding.Info; sev-- {
		fmt.Fprintf(bw, "| %s %s | %d |\n", severityIcon[sev.String()], sev, s.BySeverity[sev.String()])
	}
	fmt.Fprintf(bw, "| %s waived | %d |\n", severityIcon["waived"], s.Waived)
	for _, g := range groups(sortedFindings(r)) {
		label := severityLabel(g)
		fmt.Fprintf(bw, "\n### %s %s (%d)\n", severityIcon[label], label, len(g.Findings))
		for _, f := range g.Findings {
			head := Code(f.RuleID)
			if f.Unit != "" {
				head += " · " + Code(f.Unit)
			}
			if g.Waived {
				head += " · " + f.Severity.String()
			}
			fmt.Fprintf(bw, "\n- **%s**", head)
			if f.Title != "" {
				fmt.Fprintf(bw, " — %s", MarkdownEscape(f.Title))
			}
			fmt.Fprintf(bw, "\n  %s\n", MarkdownEscape(oneLine(f.Message)))
			if units := ChainUnits(f.Chain); len(units) > 0 {
				fmt.Fprintf(bw, "  - starts at boot: %s", Code(strings.Join(units, " → ")))
				for i, src := range ChainSources(f.Chain) {
					sep := ", "
					if i == 0 {
						sep = " via "
					}
					fmt.Fprintf(bw, "%s%s", sep, Code(src))
				}
				fmt.Fprintln(bw)
			}
			if f.Waived && f.Waiver != nil {
				fmt.Fprintf(bw, "  - waived: %s", MarkdownEscape(oneLine(f.Waiver.Reason)))
				if f.Waiver.Expires != "" {
					fmt.Fprintf(bw, " (expires %s)", MarkdownEscape(f.Waiver.Expires))
				}
				fmt.Fprintln(bw)
			}
			if cmds := FixCommands(f); len(cmds) > 0 {
				fmt.Fprintf(bw, "  - fix:\n    ```sh\n")
				for _, c := range cmds {
					fmt.Fprintf(bw, "    %s\n", strings.ReplaceAll(oneLine(c), "```", "'''"))
				}
				fmt.Fprintf(bw, "    ```\n")
			}
		}
	}
	if l := m.o.live; l != nil {
		fmt.Fprintf(bw, "\n### Live host\n\n")
		if l.Memcg != nil {
			fmt.Fprintf(bw, "- memory cgroups: **%d zombies** (%d tracked by the kernel, %d present)\n",
				l.Memcg.Zombies, l.Memcg.Tracked, l.Memcg.Present)
		}
		for _, c := range hotCores(l.Cores, 0.5) {
			fmt.Fprintf(bw, "- cpu%d: %.0f%% busy, %.0f%% system", c.CPU, 100*c.Busy(), 100*c.System)
			if len(c.NICs) > 0 {
				fmt.Fprintf(bw, ", serves %s", MarkdownEscape(strings.Join(c.NICs, ", ")))
			}
			fmt.Fprintln(bw)
		}
	}
	return bw.Flush()
}

// Code makes s an inline code span: one line, printable, with backticks
// (which would end the span) replaced.
func Code(s string) string {
	return "`" + strings.ReplaceAll(oneLine(s), "`", "'") + "`"
}

// CodeCell is Code for a table cell: a pipe ends the cell even inside a
// code span unless it is escaped.
func CodeCell(s string) string {
	return strings.ReplaceAll(Code(s), "|", `\|`)
}

// MarkdownEscape escapes the characters that would change Markdown or
// inject HTML in a comment, and folds line breaks. A text from an image
// or a policy must not notify anyone either: GitHub turns "@name" into a
// mention and "#12" into a reference that lands in that issue's
// timeline, in the text a comment shows, escaped or not. A zero-width
// space (written &#8203;, so the source stays readable) after every "@",
// and after a "#" before a digit, keeps them plain text; "&" is escaped
// so that no entity such as &#64; can spell an "@" itself.
func MarkdownEscape(s string) string {
	var b strings.Builder
	line := oneLine(s)
	for i, r := range line {
		switch r {
		case '\\', '`', '*', '_', '[', ']', '<', '>', '|', '#', '!', '~', '&':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
		if r == '@' || r == '#' && i+1 < len(line) && line[i+1] >= '0' && line[i+1] <= '9' {
			b.WriteString(zeroWidthSpace)
		}
	}
	return b.String()
}

// zeroWidthSpace, as an entity, breaks a mention or a reference without
// showing.
const zeroWidthSpace = "&#8203;"
