//go:build !amilint_guest

package diff

import (
	"fmt"
	"html/template"
	"io"
	"sync"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/report"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// htmlFormat returns the HTML writer.
func htmlFormat(failOn finding.Severity) (Writer, error) { return htmlWriter{failOn}, nil }

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
	if err := report.ExecuteHTML(w, diffTemplate(), "diff", data); err != nil {
		return fmt.Errorf("write html diff: %w", err)
	}
	return nil
}
