//go:build !amilint_guest

package report

import (
	"embed"
	"fmt"
	"html/template"
	"io"
	"strings"
	"sync"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/systemd/unit"
)

//go:embed templates/*.html.tmpl
var templateFS embed.FS

// htmlFuncs are the functions every amilint HTML template may call.
var htmlFuncs = template.FuncMap{
	"chainUnits":   ChainUnits,
	"chainSources": ChainSources,
	"fixCommands":  FixCommands,
	"join":         strings.Join,
	"last":         func(i int, s []string) bool { return i == len(s)-1 },
	"pct":          func(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) },
}

// NewHTMLTemplate parses text (which must define a template named name)
// together with the shared layout: "head" (takes the page title), "foot",
// "chain" (takes a []unit.Edge) and "finding" (takes a finding.Finding).
// Pages built on it are self-contained: inline CSS, no external assets.
func NewHTMLTemplate(name, text string) (*template.Template, error) {
	t, err := template.New(name).Funcs(htmlFuncs).ParseFS(templateFS, "templates/base.html.tmpl")
	if err != nil {
		return nil, fmt.Errorf("parse html layout: %w", err)
	}
	if _, err := t.New(name + ".page").Parse(text); err != nil {
		return nil, fmt.Errorf("parse html template %s: %w", name, err)
	}
	return t, nil
}

// ExecuteHTML runs the template name of t with data into w, every
// bidirectional formatting character shown as [U+XXXX]
// (finding.ShowBidi): a browser would otherwise let a unit's description
// reorder what the page shows ("Trojan Source"). The templates hold no
// such character, so every one comes from the data.
func ExecuteHTML(w io.Writer, t *template.Template, name string, data any) error {
	var b strings.Builder
	if err := t.ExecuteTemplate(&b, name, data); err != nil {
		return err
	}
	_, err := io.WriteString(w, finding.ShowBidi(b.String()))
	return err
}

// reportTemplate is parsed on first use, not at program start: most runs
// never write HTML.
var reportTemplate = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Funcs(htmlFuncs).ParseFS(templateFS, "templates/*.html.tmpl"))
})

// htmlWriter writes one self-contained HTML page.
type htmlWriter struct{ o options }

type htmlTile struct {
	N     int
	Label string
	Class string
}

type htmlGroup struct {
	Label    string
	Findings []finding.Finding
}

type htmlFlagged struct {
	Unit  string
	Chain []unit.Edge
}

type htmlReport struct {
	Report  *finding.Report
	Verdict string
	Summary string
	Tiles   []htmlTile
	Groups  []htmlGroup
	Flagged []htmlFlagged
	Live    *Live
	Chart   *cpuChart
}

func (h *htmlWriter) Write(w io.Writer, r *finding.Report) error {
	fs := sortedFindings(r)
	s := finding.Summarize(fs)
	d := htmlReport{Report: r, Summary: summaryLine(r, h.o.failOn), Verdict: "PASS", Live: h.o.live}
	if finding.ExitCode(fs, h.o.failOn) != 0 {
		d.Verdict = "FAIL"
	}
	for sev := finding.Critical; sev >= finding.Info; sev-- {
		d.Tiles = append(d.Tiles, htmlTile{N: s.BySeverity[sev.String()], Label: sev.String(), Class: sev.String()})
	}
	d.Tiles = append(d.Tiles, htmlTile{N: s.Waived, Label: "waived", Class: "waived"})
	seen := map[string]bool{}
	for _, g := range groups(fs) {
		d.Groups = append(d.Groups, htmlGroup{Label: severityLabel(g), Findings: g.Findings})
		if g.Waived {
			continue
		}
		for _, f := range g.Findings {
			if f.Unit != "" && len(f.Chain) > 0 && !seen[f.Unit] {
				seen[f.Unit] = true
				d.Flagged = append(d.Flagged, htmlFlagged{Unit: f.Unit, Chain: f.Chain})
			}
		}
	}
	if h.o.live != nil && len(h.o.live.Cores) > 0 {
		d.Chart = newCPUChart(h.o.live.Cores)
	}
	if err := ExecuteHTML(w, reportTemplate(), "report", d); err != nil {
		return fmt.Errorf("write html report: %w", err)
	}
	return nil
}

// cpuChart lays out a stacked bar per core as inline SVG geometry.
type cpuChart struct {
	Width, Height               int
	Left, Right, Top, Mid, Base float64
	Bars                        []cpuBar
	Legend                      []chartSeries
	Hot                         []Core
}

type cpuBar struct {
	Title          string
	Segments       []rect
	Label          string
	LabelX, LabelY float64
}

type rect struct {
	X, Y, W, H float64
	Fill       string
}

type chartSeries struct {
	Name string
	Fill string
}

var cpuSeries = []chartSeries{
	{"system", "#c62828"}, {"user", "#1565c0"}, {"irq", "#6a1b9a"}, {"softirq", "#ef6c00"},
}

func newCPUChart(cores []Core) *cpuChart {
	const width, height = 1200, 260
	c := &cpuChart{Width: width, Height: height, Left: 44, Right: width - 8, Top: 12, Base: height - 28,
		Legend: cpuSeries, Hot: hotCores(cores, 0.9)}
	c.Mid = (c.Top + c.Base) / 2
	plot := c.Base - c.Top
	step := (c.Right - c.Left) / float64(len(cores))
	barW := step * 0.8
	labelEvery := 1 + len(cores)/32
	for i, core := range cores {
		x := round2(c.Left + float64(i)*step + step*0.1)
		y := c.Base
		b := cpuBar{Title: fmt.Sprintf("cpu%d: %.0f%% system, %.0f%% user, %.0f%% irq, %.0f%% softirq",
			core.CPU, 100*core.System, 100*core.User, 100*core.IRQ, 100*core.SoftIRQ)}
		for j, v := range []float64{core.System, core.User, core.IRQ, core.SoftIRQ} {
			v = min(max(v, 0), 1)
			hgt := v * plot
			if y-hgt < c.Top {
				hgt = y - c.Top
			}
			if hgt <= 0 {
				continue
			}
			y -= hgt
			b.Segments = append(b.Segments, rect{X: x, Y: round2(y), W: round2(barW), H: round2(hgt), Fill: cpuSeries[j].Fill})
		}
		if i%labelEvery == 0 {
			b.Label = fmt.Sprint(core.CPU)
			b.LabelX = round2(x + barW/2)
			b.LabelY = c.Base + 14
		}
		c.Bars = append(c.Bars, b)
	}
	return c
}

func round2(f float64) float64 { return float64(int(f*100+0.5)) / 100 }

type rolloutHTML struct{}

type rolloutPage struct {
	R       *Rollout
	Tiles   []htmlTile
	Rules   []RuleStat
	Units   []UnitStat
	Targets []TargetStat
	More    map[string]int
	// ByTarget and Trend are the pictures: findings per severity by
	// target, and over time when reports carry dates (nil otherwise).
	ByTarget svgChart
	Trend    *svgChart
	Legend   []string
}

func (rolloutHTML) Write(w io.Writer, r *Rollout) error {
	p := rolloutPage{R: r, Rules: head(r.Rules), Units: head(r.Units), Targets: head(r.Targets),
		More: map[string]int{"rules": len(r.Rules) - rolloutListLimit, "units": len(r.Units) - rolloutListLimit,
			"targets": len(r.Targets) - rolloutListLimit}}
	for sev := finding.Critical; sev >= finding.Info; sev-- {
		p.Tiles = append(p.Tiles, htmlTile{N: r.Summary.TargetsByHighest[sev.String()], Label: "targets at " + sev.String(), Class: sev.String()})
	}
	p.Tiles = append(p.Tiles, htmlTile{N: r.Summary.TargetsByHighest["none"], Label: "clean targets", Class: "ok"})
	p.ByTarget, p.Legend = targetChart(r), legendItems()
	if len(r.Trend) > 0 {
		c := trendChart(r.Trend)
		p.Trend = &c
	}
	if err := ExecuteHTML(w, reportTemplate(), "rollout", p); err != nil {
		return fmt.Errorf("write html rollout: %w", err)
	}
	return nil
}
