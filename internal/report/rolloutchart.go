//go:build !amilint_guest

package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/amilint/amilint/internal/audit/finding"
)

// The rollout page's pictures are inline SVG drawn from these shapes by
// the "barchart" template: no script, no external asset, and every number
// also in a <title> the browser shows on hover.

// chartBars bounds the bars of one chart; the tables and the JSON report
// hold the rest.
const chartBars = 40

// severitiesDown is the stacking order: the worst first.
var severitiesDown = []finding.Severity{finding.Critical, finding.High, finding.Medium, finding.Low, finding.Info}

// svgChart is one stacked bar chart.
type svgChart struct {
	// Label is the chart's accessible name (aria-label).
	Label         string
	Width, Height int
	Bars          []svgBar
	Grid          []svgTick
	// Note says what the chart leaves out, when it does.
	Note string
}

// svgBar is one bar: a target or a day, its segments one per severity.
type svgBar struct {
	Label   string
	LX, LY  int
	Anchor  string
	Segs    []svgSeg
	Total   int
	TX, TY  int
	TAnchor string
	Title   string
	Dim     bool
}

// svgSeg is one severity's part of a bar.
type svgSeg struct {
	Class      string
	X, Y, W, H int
	Title      string
}

// svgTick is a grid line with its value.
type svgTick struct {
	X1, Y1, X2, Y2 int
	TX, TY         int
	Anchor         string
	Value          int
}

// legendItems are the severities as the charts color them.
func legendItems() []string {
	out := make([]string, 0, len(severitiesDown))
	for _, s := range severitiesDown {
		out = append(out, s.String())
	}
	return out
}

// gridStep is the value between two of a chart's four grid lines: 1, 2
// or 5 times a power of ten, so that four steps reach peak and the grid
// reads in round numbers.
func gridStep(peak int) int {
	need := max(1, (peak+3)/4)
	for p := 1; ; p *= 10 {
		for _, m := range []int{1, 2, 5} {
			if m*p >= need {
				return m * p
			}
		}
	}
}

// severityTitle spells counts as "high 2, medium 1".
func severityTitle(counts map[string]int) string {
	var parts []string
	for _, s := range severitiesDown {
		if n := counts[s.String()]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", s, n))
		}
	}
	if len(parts) == 0 {
		return "no findings"
	}
	return strings.Join(parts, ", ")
}

func sum(counts map[string]int) int {
	n := 0
	for _, s := range severitiesDown {
		n += counts[s.String()]
	}
	return n
}

// shorten cuts s to n runes with an ellipsis.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// targetChart draws the findings per severity of each target, worst
// first (the order of the targets table): one horizontal stacked bar each.
func targetChart(r *Rollout) svgChart {
	const labelW, barW, rowH, top = 290, 560, 24, 28
	targets := r.Targets[:min(len(r.Targets), chartBars)]
	c := svgChart{Label: "Unwaived findings per severity, by target", Width: labelW + barW + 60, Height: top + rowH*len(targets) + 8}
	if n := len(r.Targets) - len(targets); n > 0 {
		c.Note = fmt.Sprintf("The %d worst of %d targets; the table and the JSON report list all.", len(targets), len(r.Targets))
	}
	peak := 0
	for _, t := range targets {
		peak = max(peak, sum(t.BySeverity))
	}
	step := gridStep(peak)
	scale := 4 * step
	for i := 0; i <= 4; i++ {
		x := labelW + barW*i/4
		c.Grid = append(c.Grid, svgTick{X1: x, Y1: top - 6, X2: x, Y2: c.Height - 8, TX: x, TY: top - 10, Anchor: "middle", Value: step * i})
	}
	for i, t := range targets {
		y := top + rowH*i
		label := shorten(t.Name, 40)
		if len(t.Generated) >= len(time.DateOnly) {
			label = shorten(t.Name, 29) + " " + t.Generated[:len(time.DateOnly)]
		}
		b := svgBar{Label: label, LX: labelW - 8, LY: y + 16, Anchor: "end", Total: sum(t.BySeverity),
			Title: t.Name + ": " + severityTitle(t.BySeverity), Dim: t.Highest == ""}
		x := labelW
		for _, s := range severitiesDown {
			n := t.BySeverity[s.String()]
			if n == 0 {
				continue
			}
			w := max(1, barW*n/scale)
			b.Segs = append(b.Segs, svgSeg{Class: s.String(), X: x, Y: y + 4, W: w, H: rowH - 8, Title: fmt.Sprintf("%s: %d %s", t.Name, n, s)})
			x += w
		}
		b.TX, b.TY, b.TAnchor = x+6, y+16, "start"
		c.Bars = append(c.Bars, b)
	}
	return c
}

// trendChart draws the findings per severity of each day the dated
// reports cover: one stacked column per day, the last chartBars days.
func trendChart(trend []TrendPoint) svgChart {
	const left, plotH, top, bottom, width = 48, 220, 20, 44, 860
	days := trend[max(0, len(trend)-chartBars):]
	c := svgChart{Label: "Unwaived findings per severity over time", Width: width, Height: top + plotH + bottom}
	if n := len(trend) - len(days); n > 0 {
		c.Note = fmt.Sprintf("The last %d of %d days.", len(days), len(trend))
	}
	peak := 0
	for _, d := range days {
		peak = max(peak, sum(d.Findings))
	}
	step := gridStep(peak)
	scale := 4 * step
	plotW := width - left - 12
	for i := 0; i <= 4; i++ {
		y := top + plotH - plotH*i/4
		c.Grid = append(c.Grid, svgTick{X1: left, Y1: y, X2: left + plotW, Y2: y, TX: left - 6, TY: y + 4, Anchor: "end", Value: step * i})
	}
	slot := plotW / max(1, len(days))
	colW := max(4, min(48, slot*7/10))
	every := max(1, (len(days)*64+plotW-1)/plotW) // a label every ~64px
	for i, d := range days {
		x := left + slot*i + (slot-colW)/2
		b := svgBar{Total: sum(d.Findings), Title: fmt.Sprintf("%s: %d targets, %s", d.Date, d.Targets, severityTitle(d.Findings))}
		if i%every == 0 || i == len(days)-1 {
			b.Label, b.LX, b.LY, b.Anchor = d.Date, x+colW/2, top+plotH+16, "middle"
		}
		y := top + plotH
		for _, s := range severitiesDown {
			n := d.Findings[s.String()]
			if n == 0 {
				continue
			}
			h := max(1, plotH*n/scale)
			y -= h
			b.Segs = append(b.Segs, svgSeg{Class: s.String(), X: x, Y: y, W: colW, H: h, Title: fmt.Sprintf("%s: %d %s", d.Date, n, s)})
		}
		b.TX, b.TY, b.TAnchor = x+colW/2, y-4, "middle"
		c.Bars = append(c.Bars, b)
	}
	return c
}
