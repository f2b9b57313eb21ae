package report

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/amilint/amilint/internal/audit/finding"
)

// RolloutSchema is the version tag of the aggregated rollout report.
const RolloutSchema = "amilint-rollout/v1"

// Rollout is many reports (a fleet's hosts, a pipeline's images) folded
// into one: findings by rule across targets, targets by highest severity,
// and the units that fail on the most targets.
type Rollout struct {
	Schema  string         `json:"schema"`
	FailOn  string         `json:"fail_on"`
	Summary RolloutSummary `json:"summary"`
	Rules   []RuleStat     `json:"rules"`
	Targets []TargetStat   `json:"targets"`
	Units   []UnitStat     `json:"units"`
	// Trend is, per day the dated reports cover, the findings of the
	// targets reported that day (a target's last report of the day).
	Trend []TrendPoint `json:"trend,omitempty"`
}

// TrendPoint is one day of the trend.
type TrendPoint struct {
	// Date is the UTC day, 2006-01-02.
	Date    string `json:"date"`
	Reports int    `json:"reports"`
	Targets int    `json:"targets"`
	// Findings counts the unwaived findings by severity.
	Findings map[string]int `json:"findings"`
}

// RolloutSummary counts across all reports.
type RolloutSummary struct {
	Reports int `json:"reports"`
	// Failing is the number of targets with an unwaived finding at or
	// above fail-on.
	Failing int `json:"failing"`
	// Findings counts unwaived findings by severity; Waived the others.
	Findings map[string]int `json:"findings"`
	Waived   int            `json:"waived"`
	// TargetsByHighest counts targets by their highest unwaived severity,
	// "none" for clean ones.
	TargetsByHighest map[string]int `json:"targets_by_highest"`
}

// RuleStat is one rule across targets.
type RuleStat struct {
	RuleID string `json:"rule_id"`
	Title  string `json:"title,omitempty"`
	// Highest is the highest severity the rule was reported at.
	Highest  string `json:"highest"`
	Targets  int    `json:"targets"`
	Findings int    `json:"findings"`
	Waived   int    `json:"waived"`
	// Units are the units it was reported on, sorted.
	Units []string `json:"units"`
}

// TargetStat is one report's target.
type TargetStat struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
	OS   string `json:"os,omitempty"`
	// Source is the file the report was read from.
	Source string `json:"source,omitempty"`
	// Generated is when the report was made, if it says.
	Generated string `json:"generated,omitempty"`
	// Highest is the highest unwaived severity, "" when clean.
	Highest    string         `json:"highest"`
	Failing    bool           `json:"failing"`
	BySeverity map[string]int `json:"by_severity"`
	Waived     int            `json:"waived"`
}

// UnitStat is one unit across targets: on how many it has an unwaived
// finding, and which rules flag it.
type UnitStat struct {
	Unit     string   `json:"unit"`
	Targets  int      `json:"targets"`
	Findings int      `json:"findings"`
	Highest  string   `json:"highest"`
	Rules    []string `json:"rules"`
}

// Aggregator folds reports into a Rollout one at a time, so a fleet's
// reports never need to be held in memory together.
type Aggregator struct {
	failOn  finding.Severity
	sum     RolloutSummary
	rules   map[string]*ruleAcc
	units   map[string]*unitAcc
	targets []TargetStat
	days    map[string]*dayAcc
}

// dayAcc is one day of the trend: each target's last report that day.
type dayAcc struct {
	reports int
	last    map[string]dayReport
}

type dayReport struct {
	at     time.Time
	counts map[string]int
}

type ruleAcc struct {
	stat    RuleStat
	highest finding.Severity
	units   map[string]bool
}

type unitAcc struct {
	stat    UnitStat
	highest finding.Severity
	rules   map[string]bool
}

// NewAggregator returns an empty aggregator; failOn decides which targets
// count as failing.
func NewAggregator(failOn finding.Severity) *Aggregator {
	return &Aggregator{failOn: failOn, rules: map[string]*ruleAcc{}, units: map[string]*unitAcc{}, days: map[string]*dayAcc{},
		sum: RolloutSummary{Findings: zeroCounts(), TargetsByHighest: map[string]int{"none": 0}}}
}

func zeroCounts() map[string]int {
	m := make(map[string]int, 5)
	for s := finding.Info; s <= finding.Critical; s++ {
		m[s.String()] = 0
	}
	return m
}

// Add folds one report in; source names where it came from.
func (a *Aggregator) Add(source string, r *finding.Report) {
	a.sum.Reports++
	t := TargetStat{Name: r.Target.Name, Kind: r.Target.Kind, OS: r.Target.OS, Source: source, Generated: r.Generated, BySeverity: zeroCounts()}
	highest := finding.Severity(-1)
	seenRule := map[string]bool{}
	seenUnit := map[string]bool{}
	for _, f := range r.Findings {
		ra := a.rules[f.RuleID]
		if ra == nil {
			ra = &ruleAcc{stat: RuleStat{RuleID: f.RuleID, Title: f.Title}, highest: -1, units: map[string]bool{}}
			a.rules[f.RuleID] = ra
		}
		if ra.stat.Title == "" {
			ra.stat.Title = f.Title
		}
		if !seenRule[f.RuleID] {
			seenRule[f.RuleID] = true
			ra.stat.Targets++
		}
		if f.Unit != "" {
			ra.units[f.Unit] = true
		}
		if f.Waived {
			t.Waived++
			a.sum.Waived++
			ra.stat.Waived++
			continue
		}
		ra.stat.Findings++
		ra.highest = max(ra.highest, f.Severity)
		t.BySeverity[f.Severity.String()]++
		a.sum.Findings[f.Severity.String()]++
		highest = max(highest, f.Severity)
		if f.Unit == "" {
			continue
		}
		ua := a.units[f.Unit]
		if ua == nil {
			ua = &unitAcc{stat: UnitStat{Unit: f.Unit}, highest: -1, rules: map[string]bool{}}
			a.units[f.Unit] = ua
		}
		if !seenUnit[f.Unit] {
			seenUnit[f.Unit] = true
			ua.stat.Targets++
		}
		ua.stat.Findings++
		ua.highest = max(ua.highest, f.Severity)
		ua.rules[f.RuleID] = true
	}
	if highest >= 0 {
		t.Highest = highest.String()
		a.sum.TargetsByHighest[t.Highest]++
		if highest >= a.failOn {
			t.Failing = true
			a.sum.Failing++
		}
	} else {
		a.sum.TargetsByHighest["none"]++
	}
	a.targets = append(a.targets, t)
	a.addDay(t)
}

// addDay counts a dated report in its UTC day; a target reported twice
// that day counts with its later report.
func (a *Aggregator) addDay(t TargetStat) {
	at, err := time.Parse(time.RFC3339, t.Generated)
	if err != nil {
		return
	}
	at = at.UTC()
	day := at.Format(time.DateOnly)
	d := a.days[day]
	if d == nil {
		d = &dayAcc{last: map[string]dayReport{}}
		a.days[day] = d
	}
	d.reports++
	if prev, ok := d.last[t.Name]; !ok || !at.Before(prev.at) {
		d.last[t.Name] = dayReport{at: at, counts: t.BySeverity}
	}
}

// trend is the days in order.
func (a *Aggregator) trend() []TrendPoint {
	var out []TrendPoint
	for day, d := range a.days {
		p := TrendPoint{Date: day, Reports: d.reports, Targets: len(d.last), Findings: zeroCounts()}
		for _, r := range d.last {
			for s, n := range r.counts {
				p.Findings[s] += n
			}
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(x, y TrendPoint) int { return cmp.Compare(x.Date, y.Date) })
	return out
}

func sevRank(s string) int {
	if s == "" {
		return -1
	}
	v, err := finding.ParseSeverity(s)
	if err != nil {
		return -1
	}
	return int(v)
}

func sevName(s finding.Severity) string {
	if s < 0 {
		return ""
	}
	return s.String()
}

// Rollout returns the aggregate: rules by highest severity then reach,
// targets worst first, units by how many targets they fail on.
func (a *Aggregator) Rollout() *Rollout {
	r := &Rollout{Schema: RolloutSchema, FailOn: a.failOn.String(), Summary: a.sum,
		Rules: make([]RuleStat, 0, len(a.rules)), Units: make([]UnitStat, 0, len(a.units)), Targets: slices.Clone(a.targets)}
	for _, ra := range a.rules {
		s := ra.stat
		s.Highest = sevName(ra.highest)
		s.Units = sortedKeys(ra.units)
		r.Rules = append(r.Rules, s)
	}
	slices.SortFunc(r.Rules, func(x, y RuleStat) int {
		return cmp.Or(cmp.Compare(sevRank(y.Highest), sevRank(x.Highest)), cmp.Compare(y.Targets, x.Targets),
			cmp.Compare(x.RuleID, y.RuleID))
	})
	for _, ua := range a.units {
		s := ua.stat
		s.Highest = sevName(ua.highest)
		s.Rules = sortedKeys(ua.rules)
		r.Units = append(r.Units, s)
	}
	slices.SortFunc(r.Units, func(x, y UnitStat) int {
		return cmp.Or(cmp.Compare(y.Targets, x.Targets), cmp.Compare(sevRank(y.Highest), sevRank(x.Highest)),
			cmp.Compare(y.Findings, x.Findings), cmp.Compare(x.Unit, y.Unit))
	})
	if r.Targets == nil {
		r.Targets = []TargetStat{}
	}
	r.Trend = a.trend()
	slices.SortStableFunc(r.Targets, func(x, y TargetStat) int {
		return cmp.Or(cmp.Compare(sevRank(y.Highest), sevRank(x.Highest)), cmp.Compare(total(y), total(x)),
			cmp.Compare(x.Name, y.Name), cmp.Compare(x.Source, y.Source))
	})
	return r
}

func total(t TargetStat) int {
	n := 0
	for _, v := range t.BySeverity {
		n += v
	}
	return n
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// RolloutWriter renders a rollout report.
type RolloutWriter interface {
	Write(w io.Writer, r *Rollout) error
}

// RolloutFormats lists the names GetRollout accepts.
var RolloutFormats = []string{"json", "markdown", "html"}

// rolloutListLimit bounds the tables of the human formats; JSON is complete.
const rolloutListLimit = 100

// GetRollout returns the writer for a rollout format: "json", "markdown"
// or "html".
func GetRollout(format string) (RolloutWriter, error) {
	switch format {
	case "json":
		return rolloutJSON{}, nil
	case "markdown", "md":
		return rolloutMarkdown{}, nil
	case "html":
		return rolloutHTMLFormat()
	}
	return nil, fmt.Errorf("rollout format %q: want one of %s", format, strings.Join(RolloutFormats, ", "))
}

type rolloutJSON struct{}

func (rolloutJSON) Write(w io.Writer, r *Rollout) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("write json rollout: %w", err)
	}
	return nil
}

type rolloutMarkdown struct{}

func (rolloutMarkdown) Write(w io.Writer, r *Rollout) error {
	esc := MarkdownEscape
	bw := bufio.NewWriter(w)
	s := r.Summary
	fmt.Fprintf(bw, "## amilint rollout report\n\n**%d of %d targets fail at %s or above.**\n\n", s.Failing, s.Reports, r.FailOn)
	fmt.Fprintln(bw, "| highest severity | targets | findings |\n|---|---:|---:|")
	for sev := finding.Critical; sev >= finding.Info; sev-- {
		fmt.Fprintf(bw, "| %s %s | %d | %d |\n", severityIcon[sev.String()], sev, s.TargetsByHighest[sev.String()], s.Findings[sev.String()])
	}
	fmt.Fprintf(bw, "| ✅ none | %d | |\n| %s waived | | %d |\n", s.TargetsByHighest["none"], severityIcon["waived"], s.Waived)

	fmt.Fprintf(bw, "\n### Findings by rule (%d)\n\n| rule | highest | targets | findings | waived | units |\n|---|---|---:|---:|---:|---|\n", len(r.Rules))
	for _, ru := range head(r.Rules) {
		h := ru.Highest
		if h == "" {
			h = "waived"
		}
		fmt.Fprintf(bw, "| %s %s | %s | %d | %d | %d | %s |\n", CodeCell(ru.RuleID), esc(ru.Title), h, ru.Targets, ru.Findings, ru.Waived, codeList(ru.Units))
	}
	more(bw, len(r.Rules))
	fmt.Fprintf(bw, "\n### Units that fail most (%d)\n\n| unit | targets | findings | highest | rules |\n|---|---:|---:|---|---|\n", len(r.Units))
	for _, u := range head(r.Units) {
		fmt.Fprintf(bw, "| %s | %d | %d | %s | %s |\n", CodeCell(u.Unit), u.Targets, u.Findings, u.Highest, codeList(u.Rules))
	}
	more(bw, len(r.Units))
	fmt.Fprintf(bw, "\n### Targets by severity (%d)\n\n| target | highest | critical | high | medium | low | info | waived |\n|---|---|---:|---:|---:|---:|---:|---:|\n", len(r.Targets))
	for _, t := range head(r.Targets) {
		h := t.Highest
		if h == "" {
			h = "none"
		}
		fmt.Fprintf(bw, "| %s | %s | %d | %d | %d | %d | %d | %d |\n", esc(t.Name), h, t.BySeverity["critical"], t.BySeverity["high"],
			t.BySeverity["medium"], t.BySeverity["low"], t.BySeverity["info"], t.Waived)
	}
	more(bw, len(r.Targets))
	return bw.Flush()
}

func head[T any](s []T) []T { return s[:min(len(s), rolloutListLimit)] }

func more(w io.Writer, n int) {
	if n > rolloutListLimit {
		fmt.Fprintf(w, "\n… and %d more (see the JSON report).\n", n-rolloutListLimit)
	}
}

func codeList(s []string) string {
	if len(s) == 0 {
		return ""
	}
	shown := make([]string, min(len(s), 8))
	for i := range shown {
		shown[i] = CodeCell(s[i])
	}
	out := strings.Join(shown, ", ")
	if len(s) > len(shown) {
		out += fmt.Sprintf(" +%d", len(s)-len(shown))
	}
	return out
}
