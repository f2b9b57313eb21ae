package diff

import (
	"bufio"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"strings"
	"sync"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/report"
	"github.com/amilint/amilint/internal/systemd/unit"
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
		return htmlWriter{failOn}, nil
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
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "## amilint diff: %s → %s\n\n**%s**\n", esc(d.Old), esc(d.New), verdict(d, m.failOn))
	if d.Empty() {
		fmt.Fprintln(bw, "\nNo differences.")
	}
	for _, l := range []struct {
		title string
		fs    []finding.Finding
	}{{"Findings added", d.FindingsAdded}, {"Findings resolved", d.FindingsResolved}} {
		if len(l.fs) == 0 {
			continue
		}
		fmt.Fprintf(bw, "\n### %s (%d)\n\n| severity | rule | unit | message |\n|---|---|---|---|\n", l.title, len(l.fs))
		for _, f := range l.fs {
			sev := f.Severity.String()
			if f.Waived {
				sev += " (waived)"
			}
			fmt.Fprintf(bw, "| %s | %s | %s | %s |\n", sev, report.CodeCell(f.RuleID), report.CodeCell(f.Unit), esc(f.Message))
		}
	}
	for _, s := range d.sections() {
		if len(s.Changes) == 0 {
			continue
		}
		fmt.Fprintf(bw, "\n### %s (%d)\n\n| unit | change |\n|---|---|\n", s.Title, len(s.Changes))
		for _, c := range s.Changes {
			fmt.Fprintf(bw, "| %s | %s |\n", report.CodeCell(c.Unit), esc(s.Detail(c)))
		}
	}
	return bw.Flush()
}

var htmlPage = `{{define "diff"}}{{template "head" printf "amilint diff: %s → %s" .Diff.Old .Diff.New}}
<h1>amilint diff</h1>
<div class="muted"><code>{{.Diff.Old}}</code> → <code>{{.Diff.New}}</code></div>
<div class="verdict {{.Verdict}}">{{.Summary}}</div>
<div class="tiles">
<div class="tile {{if .Diff.FindingsAdded}}high{{else}}ok{{end}}"><div class="n">{{len .Diff.FindingsAdded}}</div><div class="l">findings added</div></div>
<div class="tile ok"><div class="n">{{len .Diff.FindingsResolved}}</div><div class="l">findings resolved</div></div>
<div class="tile"><div class="n">{{len .Diff.NewlyStarted}}</div><div class="l">newly started at boot</div></div>
<div class="tile"><div class="n">{{len .Diff.NewlyEnabled}}</div><div class="l">newly enabled</div></div>
</div>
{{if .Diff.FindingsAdded}}<h2>Findings added</h2>{{range .Diff.FindingsAdded}}{{template "finding" .}}{{end}}{{end}}
{{if .Diff.FindingsResolved}}<h2>Findings resolved</h2>{{range .Diff.FindingsResolved}}{{template "finding" .}}{{end}}{{end}}
{{range .Sections}}<h2>{{.Title}} ({{len .Rows}})</h2>
<table><tr><th>unit</th><th>change</th></tr>
{{range .Rows}}<tr><td class="unit">{{.Unit}}</td><td>{{.Detail}}{{template "chain" .Chain}}</td></tr>
{{end}}</table>
{{end}}
{{if .Empty}}<p>No differences.</p>{{end}}
{{template "foot"}}{{end}}`

var diffTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(report.NewHTMLTemplate("diff", htmlPage))
})

type htmlRow struct {
	Unit   string
	Detail string
	Chain  []unit.Edge
}

type htmlSection struct {
	Title string
	Rows  []htmlRow
}

type htmlWriter struct{ failOn finding.Severity }

func (h htmlWriter) Write(w io.Writer, d *Diff) error {
	data := struct {
		Diff     *Diff
		Verdict  string
		Summary  string
		Empty    bool
		Sections []htmlSection
	}{Diff: d, Summary: verdict(d, h.failOn), Verdict: "PASS", Empty: d.Empty()}
	if ExitCode(d, h.failOn) != 0 {
		data.Verdict = "FAIL"
	}
	for _, s := range d.sections() {
		if len(s.Changes) == 0 {
			continue
		}
		hs := htmlSection{Title: s.Title}
		for _, c := range s.Changes {
			row := htmlRow{Unit: c.Unit, Detail: s.Detail(c)}
			if s.Title == "Newly started at boot" && c.New != nil && len(c.New.Chain) > 0 {
				row.Detail, row.Chain = "", c.New.Chain
			}
			hs.Rows = append(hs.Rows, row)
		}
		data.Sections = append(data.Sections, hs)
	}
	if err := diffTemplate().ExecuteTemplate(w, "diff", data); err != nil {
		return fmt.Errorf("write html diff: %w", err)
	}
	return nil
}
