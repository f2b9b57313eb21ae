//go:build !amilint_guest

package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// fleet is three hosts: the incident image, a second host of it where only
// the ECS agent was flagged, and a hardened host.
func fleet() *Rollout {
	a := NewAggregator(finding.Medium)
	a.Add("reports/host-a.json", sampleReport())
	b := sampleReport()
	b.Target.Name = "dlami-ubuntu-20.04-b"
	b.Findings = b.Findings[:1]
	a.Add("reports/host-b.json", b)
	a.Add("reports/hardened.json", finding.NewReport(finding.Target{Name: "hardened-debian-12", Kind: "dir"}, nil))
	return a.Rollout()
}

func TestRolloutAggregates(t *testing.T) {
	r := fleet()
	assert.Equal(t, RolloutSchema, r.Schema)
	assert.Equal(t, 3, r.Summary.Reports)
	assert.Equal(t, 2, r.Summary.Failing)
	assert.Equal(t, map[string]int{"critical": 0, "high": 2, "medium": 1, "low": 1, "info": 0}, r.Summary.Findings)
	assert.Equal(t, 1, r.Summary.Waived)
	assert.Equal(t, 2, r.Summary.TargetsByHighest["high"])
	assert.Equal(t, 1, r.Summary.TargetsByHighest["none"])

	require.Len(t, r.Rules, 4)
	assert.Equal(t, RuleStat{RuleID: "ecs-agent-unused", Title: "Amazon ECS agent enabled without an ECS cluster",
		Highest: "high", Targets: 2, Findings: 2, Units: []string{"ecs.service"}}, r.Rules[0])
	last := r.Rules[len(r.Rules)-1]
	assert.Equal(t, "ssm-agent-unconfigured", last.RuleID, "a rule seen only waived has no highest severity and sorts last")
	assert.Equal(t, "", last.Highest)
	assert.Equal(t, 1, last.Waived)

	require.Len(t, r.Units, 2)
	assert.Equal(t, UnitStat{Unit: "ecs.service", Targets: 2, Findings: 3, Highest: "high",
		Rules: []string{"ecs-agent-unused", "restart-crash-loop"}}, r.Units[0])
	assert.Equal(t, "motd-news.service", r.Units[1].Unit)

	require.Len(t, r.Targets, 3)
	assert.Equal(t, "dlami-ubuntu-20.04", r.Targets[0].Name, "worst first: same highest, more findings")
	assert.Equal(t, "dlami-ubuntu-20.04-b", r.Targets[1].Name)
	assert.Equal(t, "hardened-debian-12", r.Targets[2].Name)
	assert.False(t, r.Targets[2].Failing)
	assert.Equal(t, "reports/hardened.json", r.Targets[2].Source)
}

func TestRolloutGolden(t *testing.T) {
	for _, f := range RolloutFormats {
		name := "rollout." + map[string]string{"json": "json", "markdown": "md", "html": "html"}[f]
		t.Run(name, func(t *testing.T) {
			w, err := GetRollout(f)
			require.NoError(t, err)
			var b bytes.Buffer
			require.NoError(t, w.Write(&b, fleet()))
			golden(t, name, b.Bytes())
		})
	}
	_, err := GetRollout("sarif")
	assert.Error(t, err)
}

func TestRolloutEmptyAndLimits(t *testing.T) {
	r := NewAggregator(finding.High).Rollout()
	var b bytes.Buffer
	require.NoError(t, rolloutJSON{}.Write(&b, r))
	var m map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &m))
	assert.Equal(t, []any{}, m["targets"])
	assert.Equal(t, []any{}, m["rules"])

	a := NewAggregator(finding.Medium)
	for _, raw := range generateReports(250) {
		rep, err := finding.Decode(raw)
		require.NoError(t, err)
		a.Add("gen", rep)
	}
	r = a.Rollout()
	b.Reset()
	require.NoError(t, rolloutMarkdown{}.Write(&b, r))
	assert.Contains(t, b.String(), "… and 150 more (see the JSON report).")
	b.Reset()
	require.NoError(t, rolloutHTML{}.Write(&b, r))
	assert.Contains(t, b.String(), "… and 150 more")
}

// generateReports makes n amilint/v1 JSON reports of a varied fleet: every
// host has a few of a dozen rules on a few dozen units, some waived.
func generateReports(n int) [][]byte {
	rules := []string{"ecs-agent-unused", "restart-crash-loop", "ssm-agent-unconfigured", "snapd-on-server",
		"motd-news", "apport", "modemmanager", "cups", "avahi", "multipathd", "fwupd-refresh", "missing-execstart"}
	out := make([][]byte, n)
	for i := range n {
		var fs []finding.Finding
		for j := range 2 + i%5 {
			rule := rules[(i*7+j*3)%len(rules)]
			unit := fmt.Sprintf("%s-%d.service", rule, (i+j)%40)
			fs = append(fs, finding.Finding{
				RuleID: rule, Title: "Rule " + rule, Severity: finding.Severity((i + j) % 5), Unit: unit,
				Message: unit + " starts at boot and is not needed on this host.",
				Chain:   ecsChain, Waived: (i+j)%11 == 0,
				Remediation: finding.Remediation{Action: "disable", Units: []string{unit}},
			})
		}
		r := finding.NewReport(finding.Target{Name: fmt.Sprintf("host-%05d", i), Kind: "live", OS: "Ubuntu 20.04.6 LTS"}, fs)
		b, err := json.Marshal(r)
		if err != nil {
			panic(err)
		}
		out[i] = b
	}
	return out
}

// BenchmarkRollout10k decodes 10,000 reports, aggregates them and writes
// the JSON and Markdown rollout: the work of amilint report minus file I/O.
func BenchmarkRollout10k(b *testing.B) {
	raw := generateReports(10_000)
	var size int
	for _, r := range raw {
		size += len(r)
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	for b.Loop() {
		a := NewAggregator(finding.Medium)
		for _, r := range raw {
			rep, err := finding.Decode(r)
			if err != nil {
				b.Fatal(err)
			}
			a.Add("gen", rep)
		}
		ro := a.Rollout()
		if err := (rolloutJSON{}).Write(io.Discard, ro); err != nil {
			b.Fatal(err)
		}
		if err := (rolloutMarkdown{}).Write(io.Discard, ro); err != nil {
			b.Fatal(err)
		}
	}
}

// datedFleet is a fleet audited on three days: dlami gets better (its
// ecs.service finding is fixed on the third day), b is reported twice on
// the second day (the later report counts), and an undated report counts
// in the tables but not in the trend.
func datedFleet() *Rollout {
	a := NewAggregator(finding.Medium)
	day := func(r *finding.Report, at string) *finding.Report { r.Generated = at; return r }
	fixed := sampleReport()
	fixed.Findings = fixed.Findings[1:]
	b := func(n int) *finding.Report {
		r := sampleReport()
		r.Target.Name = "dlami-ubuntu-20.04-b"
		r.Findings = r.Findings[:n]
		return r
	}
	a.Add("d1/a.json", day(sampleReport(), "2026-11-23T08:00:00Z"))
	a.Add("d1/b.json", day(b(1), "2026-11-23T09:00:00Z"))
	a.Add("d2/a.json", day(sampleReport(), "2026-11-24T08:00:00Z"))
	a.Add("d2/b-late.json", day(b(1), "2026-11-24T20:00:00+02:00")) // 18:00 UTC
	a.Add("d2/b-early.json", day(b(3), "2026-11-24T10:00:00Z"))
	a.Add("d3/a.json", day(fixed, "2026-11-25T08:00:00Z"))
	a.Add("undated.json", finding.NewReport(finding.Target{Name: "hardened-debian-12", Kind: "dir"}, nil))
	return a.Rollout()
}

func TestRolloutTrend(t *testing.T) {
	r := datedFleet()
	require.Len(t, r.Trend, 3)
	assert.Equal(t, TrendPoint{Date: "2026-11-23", Reports: 2, Targets: 2,
		Findings: map[string]int{"critical": 0, "high": 2, "medium": 1, "low": 1, "info": 0}}, r.Trend[0])
	assert.Equal(t, TrendPoint{Date: "2026-11-24", Reports: 3, Targets: 2,
		Findings: map[string]int{"critical": 0, "high": 2, "medium": 1, "low": 1, "info": 0}}, r.Trend[1], "b's later report of the day counts, not its earlier one")
	assert.Equal(t, TrendPoint{Date: "2026-11-25", Reports: 1, Targets: 1,
		Findings: map[string]int{"critical": 0, "high": 0, "medium": 1, "low": 1, "info": 0}}, r.Trend[2])
	assert.Equal(t, 7, r.Summary.Reports, "the undated report is in the tables")
	assert.Empty(t, fleet().Trend, "no dates, no trend")

	var b bytes.Buffer
	require.NoError(t, rolloutJSON{}.Write(&b, r))
	assert.Contains(t, b.String(), `"trend": [`)
	assert.Contains(t, b.String(), `"generated": "2026-11-25T08:00:00Z"`)
}

func TestDecodeRefusesABadDate(t *testing.T) {
	_, err := finding.Decode([]byte(`{"schema":"amilint/v1","generated":"yesterday","target":{"name":"x","kind":"dir"}}`))
	assert.ErrorContains(t, err, `generated "yesterday": not an RFC 3339 time`)
	r, err := finding.Decode([]byte(`{"schema":"amilint/v1","generated":"2026-11-25T08:00:00Z","target":{"name":"x","kind":"dir"}}`))
	require.NoError(t, err)
	assert.Equal(t, "2026-11-25T08:00:00Z", r.Generated)
}

func TestGridStep(t *testing.T) {
	for peak, want := range map[int]int{0: 1, 1: 1, 3: 1, 4: 1, 5: 2, 8: 2, 9: 5, 20: 5, 21: 10, 70071: 20000} {
		step := gridStep(peak)
		assert.Equal(t, want, step, "peak %d", peak)
		assert.GreaterOrEqual(t, 4*step, peak)
	}
}

func TestCharts(t *testing.T) {
	r := datedFleet()
	c := targetChart(r)
	require.Len(t, c.Bars, len(r.Targets))
	assert.Empty(t, c.Note)
	top := c.Bars[0]
	assert.Equal(t, sum(r.Targets[0].BySeverity), top.Total)
	require.NotEmpty(t, top.Segs)
	assert.Equal(t, "high", top.Segs[0].Class, "the worst severity first")
	for i := 1; i < len(top.Segs); i++ {
		assert.Equal(t, top.Segs[i-1].X+top.Segs[i-1].W, top.Segs[i].X, "segments are stacked")
	}
	// A bar's length is its total on the chart's scale.
	scale := 4 * gridStep(3)
	assert.Equal(t, 560*1/scale*3, top.Segs[len(top.Segs)-1].X+top.Segs[len(top.Segs)-1].W-top.Segs[0].X)

	tr := trendChart(r.Trend)
	require.Len(t, tr.Bars, 3)
	assert.Equal(t, []int{4, 4, 2}, []int{tr.Bars[0].Total, tr.Bars[1].Total, tr.Bars[2].Total})
	assert.Greater(t, tr.Bars[2].Segs[len(tr.Bars[2].Segs)-1].Y, tr.Bars[0].Segs[len(tr.Bars[0].Segs)-1].Y, "fewer findings, a shorter column")

	// Many targets: the worst chartBars, said so.
	a := NewAggregator(finding.High)
	for i := range 55 {
		rep := sampleReport()
		rep.Target.Name = fmt.Sprintf("host-%02d", i)
		a.Add("", rep)
	}
	many := targetChart(a.Rollout())
	assert.Len(t, many.Bars, chartBars)
	assert.Contains(t, many.Note, "The 40 worst of 55 targets")
}

// TestRolloutMarkdownHostileNames: rule ids and unit names come from
// reports read from anywhere; in the Markdown tables they stay in their
// cell (no pipe ends it, no backtick ends the code span, no line break
// starts a new block) and carry no terminal escape.
func TestRolloutMarkdownHostileNames(t *testing.T) {
	a := NewAggregator(finding.High)
	a.Add("x.json", finding.NewReport(finding.Target{Name: "t"}, []finding.Finding{
		{RuleID: "r`|x", Severity: finding.High, Unit: "u`|<b>x</b>\n# h\x1b[31m", Message: "m"},
	}))
	var b bytes.Buffer
	require.NoError(t, rolloutMarkdown{}.Write(&b, a.Rollout()))
	out := b.String()
	assert.NotContains(t, out, "\n# h")
	assert.NotContains(t, out, "\x1b")
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "| `r") {
			assert.Equal(t, 7, strings.Count(l, "|")-strings.Count(l, `\|`), "one row of 6 cells: %s", l)
		}
		if strings.HasPrefix(l, "| `u") {
			assert.Equal(t, 6, strings.Count(l, "|")-strings.Count(l, `\|`), "one row of 5 cells: %s", l)
		}
	}
	assert.Contains(t, out, "| `r'\\|x` |")
	assert.Contains(t, out, "| `u'\\|<b>x</b> # h\uFFFD[31m` |")
}

// TestHTMLShowsBidi: the pages a browser lays out show every
// bidirectional formatting character of the data as [U+XXXX] rather than
// let it reorder the page ("ecivres.sce" shown as "ecs.service").
func TestHTMLShowsBidi(t *testing.T) {
	r := finding.NewReport(finding.Target{Name: "img\u2066"}, []finding.Finding{{
		RuleID: "r", Severity: finding.High, Unit: "x\u202eecivres.sce.service", Message: "m \u202eecivres.sce\u202c \u200f\u061c",
		Chain: []unit.Edge{{From: "default.target", To: "x\u202eecivres.sce.service", Kind: ".wants", Source: "/etc/\u2067"}},
	}})
	a := NewAggregator(finding.High)
	a.Add("x.json", r)
	var rollout bytes.Buffer
	require.NoError(t, rolloutHTML{}.Write(&rollout, a.Rollout()))
	for name, out := range map[string]string{"report": string(render(t, "html", r)), "rollout": rollout.String()} {
		assert.Equal(t, -1, strings.IndexFunc(out, finding.IsBidi), "%s: a bidirectional formatting character is left", name)
		assert.Contains(t, out, "x[U+202E]ecivres.sce.service", name)
	}
	assert.Contains(t, string(render(t, "html", r)), "m [U+202E]ecivres.sce[U+202C] [U+200F][U+061C]")
}
