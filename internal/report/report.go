// Package report owns how audit results are shown: it renders an amilint/v1
// report (finding.Report) as text, JSON, SARIF 2.1.0, JUnit XML,
// self-contained HTML or Markdown, and aggregates many reports into one
// rollout report. It only formats data it is given: it never reads an image,
// never evaluates policy and never decides an exit code.
//
// A Writer is chosen by name with Get, one switch in one function:
//
//	w, err := report.Get("sarif", report.WithRules(meta))
//	err = w.Write(os.Stdout, rep)
package report

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// Writer renders one report.
type Writer interface {
	Write(w io.Writer, r *finding.Report) error
}

// Formats lists the names Get accepts, in the order help texts show them.
var Formats = []string{"text", "json", "sarif", "junit", "html", "markdown"}

// Get returns the writer for format ("text", "json", "sarif", "junit",
// "html", "markdown"), configured by opts.
func Get(format string, opts ...Option) (Writer, error) {
	o := options{failOn: finding.High, color: ColorAuto}
	for _, opt := range opts {
		opt(&o)
	}
	switch format {
	case "text":
		return &textWriter{o}, nil
	case "json":
		return &jsonWriter{o}, nil
	case "sarif":
		return &sarifWriter{o}, nil
	case "junit":
		return &junitWriter{o}, nil
	case "html":
		return htmlFormat(o)
	case "markdown", "md":
		return &markdownWriter{o}, nil
	}
	return nil, fmt.Errorf("report format %q: want one of %s", format, strings.Join(Formats, ", "))
}

// ColorMode says when the text writer colors its output.
type ColorMode int

// Color modes.
const (
	// ColorAuto colors only when writing to a terminal and NO_COLOR is unset.
	ColorAuto ColorMode = iota
	ColorAlways
	ColorNever
)

// RuleMeta is what the rule catalog knows about a rule, for formats that
// describe rules (SARIF). Writers fall back to the findings' own title and
// references for rules they are not told about.
type RuleMeta struct {
	Title     string
	Rationale string
	// HelpURI is an absolute URL documenting the rule.
	HelpURI  string
	Severity finding.Severity
}

// Live is what a live audit adds to a report: the per-core CPU picture and
// the memory cgroup counts of the incident the tool exists for. The HTML,
// Markdown and text writers render it; the JSON writer adds it as the
// optional top-level "live" field.
type Live struct {
	Host string `json:"host,omitempty"`
	// Cores are per-CPU utilisation ratios (0..1) over one sample.
	Cores []Core `json:"cores"`
	// Memcg is nil when the host has no memory controller.
	Memcg *Memcg `json:"memcg,omitempty"`
}

// Core is one CPU's utilisation over a sample, as ratios of its time.
type Core struct {
	CPU     int      `json:"cpu"`
	User    float64  `json:"user"`
	System  float64  `json:"system"`
	IRQ     float64  `json:"irq"`
	SoftIRQ float64  `json:"softirq"`
	NICs    []string `json:"nics,omitempty"`
}

// Busy is the core's non-idle share.
func (c Core) Busy() float64 { return c.User + c.System + c.IRQ + c.SoftIRQ }

// Memcg counts memory cgroups: the kernel tracks Tracked, the hierarchy
// holds Present directories, and Zombies are removed but never freed.
type Memcg struct {
	Tracked int    `json:"tracked"`
	Present int    `json:"present"`
	Zombies int    `json:"zombies"`
	Leaking string `json:"leaking,omitempty"`
}

// Option configures a writer.
type Option func(*options)

type options struct {
	failOn  finding.Severity
	color   ColorMode
	rules   map[string]RuleMeta
	live    *Live
	version string
}

// WithFailOn sets the severity at or above which an unwaived finding fails
// (JUnit failures, the text summary's verdict). The default is high, as --fail-on's.
func WithFailOn(s finding.Severity) Option { return func(o *options) { o.failOn = s } }

// WithColor sets when the text writer uses ANSI colors.
func WithColor(m ColorMode) Option { return func(o *options) { o.color = m } }

// WithRules gives the rule catalog's metadata by rule id.
func WithRules(m map[string]RuleMeta) Option { return func(o *options) { o.rules = m } }

// WithLive adds a live audit's host data.
func WithLive(l *Live) Option { return func(o *options) { o.live = l } }

// WithVersion sets the tool version that SARIF and JUnit record.
func WithVersion(v string) Option { return func(o *options) { o.version = v } }

// IsTerminal reports whether w is a character device (a terminal).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// ChainUnits lists the units of a chain in order: the first edge's From,
// then every To ("default.target", "multi-user.target", "ecs.service").
func ChainUnits(chain []unit.Edge) []string {
	if len(chain) == 0 {
		return nil
	}
	out := []string{chain[0].From}
	for _, e := range chain {
		if out[len(out)-1] != e.From {
			out = append(out, e.From)
		}
		out = append(out, e.To)
	}
	return out
}

// ChainSources lists the distinct files that declare the chain's edges, in
// chain order (the .wants links and unit files).
func ChainSources(chain []unit.Edge) []string {
	var out []string
	for _, e := range chain {
		if e.Source != "" && !slices.Contains(out, e.Source) {
			out = append(out, e.Source)
		}
	}
	return out
}

// Chain spells a chain on one line: "default.target → multi-user.target →
// ecs.service  (via /etc/systemd/system/multi-user.target.wants/ecs.service)",
// and what the model assumed of the machine for an edge of it, if it did.
// It is "" for an empty chain.
func Chain(chain []unit.Edge) string {
	units := ChainUnits(chain)
	if len(units) == 0 {
		return ""
	}
	s := strings.Join(units, " → ")
	if src := ChainSources(chain); len(src) > 0 {
		s += "  (via " + strings.Join(src, ", ") + ")"
	}
	for _, e := range chain {
		if e.Assumes != "" {
			s += "  (" + e.Assumes + ")"
			break
		}
	}
	return s
}

// FixCommands are the exact commands that fix a finding: the remediation's
// own commands, else "systemctl disable|mask UNIT" derived from its action
// and units. Nil when the remediation is not a command.
func FixCommands(f finding.Finding) []string {
	if len(f.Remediation.Commands) > 0 {
		return f.Remediation.Commands
	}
	units := f.Remediation.Units
	if len(units) == 0 && f.Unit != "" {
		units = []string{f.Unit}
	}
	switch f.Remediation.Action {
	case "disable", "mask":
		var out []string
		for _, u := range units {
			out = append(out, "systemctl "+f.Remediation.Action+" "+u)
		}
		return out
	}
	return nil
}

// group is the findings of one severity, or the waived ones.
type group struct {
	Severity finding.Severity
	Waived   bool
	Findings []finding.Finding
}

// groups groups findings by severity, highest first, keeping each group's
// order; waived findings form their own group at the end.
func groups(fs []finding.Finding) []group {
	var out []group
	for s := finding.Critical; s >= finding.Info; s-- {
		g := group{Severity: s}
		for _, f := range fs {
			if !f.Waived && f.Severity == s {
				g.Findings = append(g.Findings, f)
			}
		}
		if len(g.Findings) > 0 {
			out = append(out, g)
		}
	}
	w := group{Waived: true}
	for _, f := range fs {
		if f.Waived {
			w.Findings = append(w.Findings, f)
		}
	}
	if len(w.Findings) > 0 {
		out = append(out, w)
	}
	return out
}

// sortedFindings returns the report's findings highest severity first, then
// by rule and unit, without changing the report.
func sortedFindings(r *finding.Report) []finding.Finding {
	fs := slices.Clone(r.Findings)
	slices.SortStableFunc(fs, func(a, b finding.Finding) int {
		if a.Severity != b.Severity {
			return int(b.Severity) - int(a.Severity)
		}
		if c := strings.Compare(a.RuleID, b.RuleID); c != 0 {
			return c
		}
		return strings.Compare(a.Unit, b.Unit)
	})
	return fs
}

// summaryLine is the one-line verdict every human format ends with.
func summaryLine(r *finding.Report, failOn finding.Severity) string {
	s := finding.Summarize(r.Findings)
	var parts []string
	for sev := finding.Critical; sev >= finding.Info; sev-- {
		if n := s.BySeverity[sev.String()]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, sev))
		}
	}
	counts := "no findings"
	if len(parts) > 0 {
		counts = strings.Join(parts, ", ")
	}
	verdict := "PASS"
	if finding.ExitCode(r.Findings, failOn) != 0 {
		verdict = "FAIL"
	}
	return fmt.Sprintf("%s: %d findings (%s), %d waived; fail-on %s", verdict, s.Total, counts, s.Waived, failOn)
}

// severityLabel names a group: its severity, or "waived".
func severityLabel(g group) string {
	if g.Waived {
		return "waived"
	}
	return g.Severity.String()
}
