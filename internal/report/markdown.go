package report

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/amilint/amilint/internal/audit/finding"
)

// markdownWriter writes GitHub-flavoured Markdown for a pull-request
// comment: a summary table, then each finding with its chain and fix.
type markdownWriter struct{ o options }

var severityIcon = map[string]string{
	"critical": "🟣", "high": "🔴", "medium": "🟠", "low": "🔵", "info": "⚪", "waived": "⚫",
}

// CommentLimit is the most a Markdown report holds, in bytes: GitHub
// refuses a comment body over 65,536 characters, and no character is
// shorter than a byte. A report that would be longer gives its
// lowest-severity findings in brief (rule and unit), then leaves the rest
// out, and says how many of each.
const CommentLimit = 65536

// headLimit bounds each line of the heading that comes from outside: the
// target's name, and its kind and OS (from the image's os-release).
const headLimit = 1024

func (m *markdownWriter) Write(w io.Writer, r *finding.Report) error {
	var head strings.Builder
	fmt.Fprintf(&head, "## amilint: %s\n\n", MarkdownEscape(clip(r.Target.Name, headLimit)))
	var about []string
	for _, s := range []string{r.Target.Kind, r.Target.OS} {
		if s != "" {
			about = append(about, MarkdownEscape(clip(s, headLimit)))
		}
	}
	if len(about) > 0 {
		fmt.Fprintf(&head, "%s\n\n", strings.Join(about, " · "))
	}
	fmt.Fprintf(&head, "**%s**\n\n", summaryLine(r, m.o.failOn))
	s := finding.Summarize(r.Findings)
	fmt.Fprintln(&head, "| severity | findings |")
	fmt.Fprintln(&head, "|---|---:|")
	for sev := finding.Critical; sev >= finding.Info; sev-- {
		fmt.Fprintf(&head, "| %s %s | %d |\n", severityIcon[sev.String()], sev, s.BySeverity[sev.String()])
	}
	fmt.Fprintf(&head, "| %s waived | %d |\n", severityIcon["waived"], s.Waived)

	gs := groups(sortedFindings(r))
	titles := make([]string, len(gs))
	full := make([][]string, len(gs))
	size := head.Len()
	for i, g := range gs {
		label := severityLabel(g)
		titles[i] = fmt.Sprintf("\n### %s %s (%d)\n", severityIcon[label], label, len(g.Findings))
		size += len(titles[i])
		for _, f := range g.Findings {
			e := markdownFinding(f, g.Waived)
			full[i] = append(full[i], e)
			size += len(e)
		}
	}
	live := m.liveSection()

	bw := bufio.NewWriter(w)
	bw.WriteString(head.String())
	if size+len(live) <= CommentLimit {
		for i := range gs {
			bw.WriteString(titles[i])
			for _, e := range full[i] {
				bw.WriteString(e)
			}
		}
		bw.WriteString(live)
		return bw.Flush()
	}
	// Too long. The findings go in order, highest severity first: in
	// full while that leaves room for the rest in brief (rule and unit),
	// or for half the room when even the briefs would not fit; then in
	// brief; then, once the room is spent, they are left out. Room is
	// kept for the live section and the note that says what was
	// shortened.
	budget := CommentLimit - head.Len() - len(live) - noteRoom
	type entry struct{ title, full, brief string }
	var es []entry
	for i, g := range gs {
		for j, f := range g.Findings {
			e := entry{full: full[i][j], brief: markdownBrief(f, g.Waived)}
			if j == 0 {
				e.title = titles[i]
			}
			es = append(es, e)
		}
	}
	after := make([]int, len(es)+1) // size of the briefs after each entry
	for i := len(es) - 1; i >= 0; i-- {
		after[i] = after[i+1] + len(es[i].title) + len(es[i].brief)
	}
	used, shortened, left, inFull := 0, 0, 0, true
	title := ""
	for i, e := range es {
		if e.title != "" {
			title = e.title
		}
		if inFull && used+len(title)+len(e.full)+min(after[i+1], budget/2) > budget {
			inFull = false
		}
		out := e.brief
		if inFull {
			out = e.full
		}
		if left > 0 || used+len(title)+len(out) > budget {
			left++
			continue
		}
		if !inFull {
			shortened++
		}
		bw.WriteString(title + out)
		used += len(title) + len(out)
		title = ""
	}
	fmt.Fprintf(bw, "\n_Shortened to fit a comment (a GitHub comment holds at most %d characters): %d of %d findings in brief, %d left out. `amilint scan -o html` or `-o json` gives them all._\n",
		CommentLimit, shortened, len(r.Findings), left)
	bw.WriteString(live)
	return bw.Flush()
}

// messageLimit bounds a finding's message and waiver reason, so that no
// one finding (a unit description a hostile image made huge) takes the
// room of the others.
const messageLimit = 4096

// Clip cuts s to at most n bytes at a character boundary, marking the
// cut with an ellipsis; for the Markdown writers of other packages.
func Clip(s string, n int) string { return clip(s, n) }

// MessageLimit is messageLimit for the Markdown writers of other packages.
const MessageLimit = messageLimit

// noteRoom is room kept for the note of a shortened report.
const noteRoom = 256

// markdownFinding is one finding in full: rule, unit, title, message, the
// chain that starts the unit, the waiver and the fix.
func markdownFinding(f finding.Finding, waived bool) string {
	var b strings.Builder
	b.WriteString("\n- **" + markdownHead(f, waived) + "**")
	if f.Title != "" {
		fmt.Fprintf(&b, " — %s", MarkdownEscape(f.Title))
	}
	fmt.Fprintf(&b, "\n  %s\n", MarkdownEscape(clip(oneLine(f.Message), messageLimit)))
	if units := ChainUnits(f.Chain); len(units) > 0 {
		fmt.Fprintf(&b, "  - starts at boot: %s", Code(strings.Join(units, " → ")))
		for i, src := range ChainSources(f.Chain) {
			sep := ", "
			if i == 0 {
				sep = " via "
			}
			fmt.Fprintf(&b, "%s%s", sep, Code(src))
		}
		b.WriteString("\n")
	}
	if f.Waived && f.Waiver != nil {
		fmt.Fprintf(&b, "  - waived: %s", MarkdownEscape(clip(oneLine(f.Waiver.Reason), messageLimit)))
		if f.Waiver.Expires != "" {
			fmt.Fprintf(&b, " (expires %s)", MarkdownEscape(f.Waiver.Expires))
		}
		b.WriteString("\n")
	}
	if cmds := FixCommands(f); len(cmds) > 0 {
		b.WriteString("  - fix:\n    ```sh\n")
		for _, c := range cmds {
			fmt.Fprintf(&b, "    %s\n", strings.ReplaceAll(oneLine(c), "```", "'''"))
		}
		b.WriteString("    ```\n")
	}
	return b.String()
}

// markdownBrief is one finding in brief: its rule and unit.
func markdownBrief(f finding.Finding, waived bool) string {
	return "- " + markdownHead(f, waived) + "\n"
}

func markdownHead(f finding.Finding, waived bool) string {
	head := Code(clip(f.RuleID, headLimit))
	if f.Unit != "" {
		head += " · " + Code(clip(f.Unit, headLimit))
	}
	if waived {
		head += " · " + f.Severity.String()
	}
	return head
}

func (m *markdownWriter) liveSection() string {
	l := m.o.live
	if l == nil {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n### Live host\n\n")
	if l.Memcg != nil {
		fmt.Fprintf(&b, "- memory cgroups: **%d zombies** (%d tracked by the kernel, %d present)\n",
			l.Memcg.Zombies, l.Memcg.Tracked, l.Memcg.Present)
	}
	for _, c := range hotCores(l.Cores, 0.5) {
		fmt.Fprintf(&b, "- cpu%d: %.0f%% busy, %.0f%% system", c.CPU, 100*c.Busy(), 100*c.System)
		if len(c.NICs) > 0 {
			fmt.Fprintf(&b, ", serves %s", MarkdownEscape(clip(strings.Join(c.NICs, ", "), headLimit)))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// clip cuts s to at most n bytes, at a character boundary, marking the cut
// with an ellipsis.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
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
