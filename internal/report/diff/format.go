package diff

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/report"
)

// Writer renders a diff.
type Writer interface {
	Write(w io.Writer, d *Diff) error
}

// Formats lists the names Get accepts.
var Formats = []string{"text", "json", "markdown", "html"}

// Get returns the writer for format; failOn is the severity the verdict
// line is computed against.
func Get(format string, failOn finding.Severity) (Writer, error) {
	switch format {
	case "text":
		return textWriter{failOn}, nil
	case "json":
		return jsonWriter{}, nil
	case "markdown", "md":
		return markdownWriter{failOn}, nil
	case "html":
		return htmlFormat(failOn)
	}
	return nil, fmt.Errorf("diff format %q: want one of %s", format, strings.Join(Formats, ", "))
}

func verdict(d *Diff, failOn finding.Severity) string {
	v := "PASS"
	if ExitCode(d, failOn) != 0 {
		v = "FAIL"
	}
	return fmt.Sprintf("%s: %d findings added, %d resolved; fail-on %s", v, len(d.FindingsAdded), len(d.FindingsResolved), failOn)
}

type jsonWriter struct{}

func (jsonWriter) Write(w io.Writer, d *Diff) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return fmt.Errorf("write json diff: %w", err)
	}
	return nil
}

type textWriter struct{ failOn finding.Severity }

func (t textWriter) Write(w io.Writer, d *Diff) error {
	bw := bufio.NewWriter(w)
	safe := report.Printable
	fmt.Fprintf(bw, "amilint diff %s → %s\n", safe(d.Old), safe(d.New))
	if d.Empty() {
		fmt.Fprintln(bw, "\nno differences")
	}
	for _, l := range []struct {
		title string
		fs    []finding.Finding
	}{{"Findings added", d.FindingsAdded}, {"Findings resolved", d.FindingsResolved}} {
		if len(l.fs) == 0 {
			continue
		}
		fmt.Fprintf(bw, "\n%s (%d)\n", l.title, len(l.fs))
		for _, f := range l.fs {
			fmt.Fprintf(bw, "  %-8s %s", f.Severity, safe(f.RuleID))
			if f.Unit != "" {
				fmt.Fprintf(bw, "  %s", safe(f.Unit))
			}
			if f.Waived {
				fmt.Fprint(bw, "  [waived]")
			}
			fmt.Fprintf(bw, "\n           %s\n", safe(strings.Join(strings.Fields(f.Message), " ")))
			if c := report.Chain(f.Chain); c != "" {
				fmt.Fprintf(bw, "           starts at boot: %s\n", safe(c))
			}
		}
	}
	for _, s := range d.sections() {
		if len(s.Changes) == 0 {
			continue
		}
		fmt.Fprintf(bw, "\n%s (%d)\n", s.Title, len(s.Changes))
		for _, c := range s.Changes {
			fmt.Fprintf(bw, "  %-40s %s\n", safe(c.Unit), safe(s.Detail(c)))
		}
	}
	fmt.Fprintf(bw, "\n%s\n", verdict(d, t.failOn))
	return bw.Flush()
}

type markdownWriter struct{ failOn finding.Severity }

func (m markdownWriter) Write(w io.Writer, d *Diff) error {
	esc := report.MarkdownEscape
	var head strings.Builder
	fmt.Fprintf(&head, "## amilint diff: %s → %s\n\n**%s**\n", esc(report.Clip(d.Old, 1024)), esc(report.Clip(d.New, 1024)), verdict(d, m.failOn))
	if d.Empty() {
		fmt.Fprintln(&head, "\nNo differences.")
	}
	// The tables in the order a reviewer reads them, each row one string,
	// so that a diff too long for a comment can keep its first rows.
	type table struct {
		title string
		rows  []string
	}
	var tables []table
	for _, l := range []struct {
		title string
		fs    []finding.Finding
	}{{"Findings added", d.FindingsAdded}, {"Findings resolved", d.FindingsResolved}} {
		if len(l.fs) == 0 {
			continue
		}
		t := table{title: fmt.Sprintf("\n### %s (%d)\n\n| severity | rule | unit | message |\n|---|---|---|---|\n", l.title, len(l.fs))}
		for _, f := range l.fs {
			sev := f.Severity.String()
			if f.Waived {
				sev += " (waived)"
			}
			t.rows = append(t.rows, fmt.Sprintf("| %s | %s | %s | %s |\n", sev, report.CodeCell(f.RuleID), report.CodeCell(f.Unit), esc(report.Clip(f.Message, report.MessageLimit))))
		}
		tables = append(tables, t)
	}
	for _, s := range d.sections() {
		if len(s.Changes) == 0 {
			continue
		}
		t := table{title: fmt.Sprintf("\n### %s (%d)\n\n| unit | change |\n|---|---|\n", s.Title, len(s.Changes))}
		for _, c := range s.Changes {
			t.rows = append(t.rows, fmt.Sprintf("| %s | %s |\n", report.CodeCell(c.Unit), esc(report.Clip(s.Detail(c), report.MessageLimit))))
		}
		tables = append(tables, t)
	}

	bw := bufio.NewWriter(w)
	bw.WriteString(head.String())
	// Within report.CommentLimit: rows in order while they fit, with room
	// kept for the note that counts the rows left out.
	budget := report.CommentLimit - head.Len() - 256
	used, shown, left := 0, 0, 0
	for _, t := range tables {
		title := t.title
		for _, r := range t.rows {
			if left > 0 || used+len(title)+len(r) > budget {
				left++
				continue
			}
			bw.WriteString(title + r)
			used += len(title) + len(r)
			title = ""
			shown++
		}
	}
	if left > 0 {
		fmt.Fprintf(bw, "\n_Shortened to fit a comment (a GitHub comment holds at most %d characters): %d of %d rows left out. `amilint diff -o html` or `-o json` gives them all._\n",
			report.CommentLimit, left, shown+left)
	}
	return bw.Flush()
}
