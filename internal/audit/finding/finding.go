// Package finding owns the result model of an audit: findings, severities
// and the report document whose JSON form is the amilint/v1 contract that
// scripts and CI gates read. It imports only the unit model (a finding's
// chain is a list of unit.Edge) and does no I/O.
package finding

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// Schema is the version tag of the JSON report.
const Schema = "amilint/v1"

// Severity orders how bad a finding is.
type Severity int

// Severities, lowest first.
const (
	Info Severity = iota
	Low
	Medium
	High
	Critical
)

var severityNames = []string{"info", "low", "medium", "high", "critical"}

// ParseSeverity parses a severity as spelled in reports and --fail-on.
func ParseSeverity(s string) (Severity, error) {
	i := slices.Index(severityNames, s)
	if i < 0 {
		return 0, fmt.Errorf("parse severity %q: want one of info, low, medium, high, critical", s)
	}
	return Severity(i), nil
}

func (s Severity) String() string {
	if s < 0 || int(s) >= len(severityNames) {
		return fmt.Sprintf("severity(%d)", int(s))
	}
	return severityNames[s]
}

// MarshalText spells the severity.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses a spelled severity.
func (s *Severity) UnmarshalText(b []byte) error {
	v, err := ParseSeverity(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Remediation is what fixes a finding.
type Remediation struct {
	// Action is "disable", "mask", "configure" or "none".
	Action string `json:"action"`
	// Units are the units the action applies to.
	Units []string `json:"units,omitempty"`
	// Commands are the exact commands a person would run.
	Commands []string `json:"commands,omitempty"`
	// Text explains the remediation.
	Text string `json:"text,omitempty"`
}

// Waiver records why a finding is waived.
type Waiver struct {
	Reason  string `json:"reason"`
	Expires string `json:"expires,omitempty"`
}

// Finding is one thing an audit found. Findings are data, not errors.
type Finding struct {
	RuleID      string         `json:"rule_id"`
	Title       string         `json:"title,omitempty"`
	Severity    Severity       `json:"severity"`
	Unit        string         `json:"unit,omitempty"`
	Message     string         `json:"message"`
	Chain       []unit.Edge    `json:"chain"`
	Remediation Remediation    `json:"remediation"`
	Waived      bool           `json:"waived"`
	Waiver      *Waiver        `json:"waiver,omitempty"`
	References  []string       `json:"references,omitempty"`
	Evidence    map[string]any `json:"evidence,omitempty"`
}

// Target identifies what was audited.
type Target struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	// OS is os-release's PRETTY_NAME when known.
	OS string `json:"os,omitempty"`
}

// Summary counts findings.
type Summary struct {
	Total      int            `json:"total"`
	Waived     int            `json:"waived"`
	BySeverity map[string]int `json:"by_severity"`
	// Highest is the highest severity of an unwaived finding, or "" if none.
	Highest string `json:"highest,omitempty"`
}

// Report is one audit's result, the amilint/v1 document.
type Report struct {
	Schema string `json:"schema"`
	Tool   string `json:"tool,omitempty"`
	// Generated is when the audit ran (RFC 3339, UTC); rollout reports
	// draw their trend from it. Reports made before it existed lack it.
	Generated string    `json:"generated,omitempty"`
	Target    Target    `json:"target"`
	Summary   Summary   `json:"summary"`
	Findings  []Finding `json:"findings"`
}

// NewReport builds a report over findings, sorting them (highest severity
// first, then rule and unit) and computing the summary.
func NewReport(t Target, fs []Finding) *Report {
	out := slices.Clone(fs)
	if out == nil {
		out = []Finding{}
	}
	for i := range out {
		if out[i].Chain == nil {
			out[i].Chain = []unit.Edge{}
		}
	}
	slices.SortStableFunc(out, func(a, b Finding) int {
		if a.Severity != b.Severity {
			return int(b.Severity) - int(a.Severity)
		}
		if a.RuleID != b.RuleID {
			if a.RuleID < b.RuleID {
				return -1
			}
			return 1
		}
		switch {
		case a.Unit < b.Unit:
			return -1
		case a.Unit > b.Unit:
			return 1
		}
		return 0
	})
	return &Report{Schema: Schema, Tool: "amilint", Target: t, Summary: Summarize(out), Findings: out}
}

// Summarize counts findings by severity; waived ones count only as waived.
func Summarize(fs []Finding) Summary {
	s := Summary{BySeverity: map[string]int{}}
	for _, n := range severityNames {
		s.BySeverity[n] = 0
	}
	highest := Severity(-1)
	for _, f := range fs {
		s.Total++
		if f.Waived {
			s.Waived++
			continue
		}
		s.BySeverity[f.Severity.String()]++
		if f.Severity > highest {
			highest = f.Severity
		}
	}
	if highest >= 0 {
		s.Highest = highest.String()
	}
	return s
}

// ExitCode is the one place exit codes are computed from findings: 1 when an
// unwaived finding is at or above failOn, else 0.
func ExitCode(fs []Finding, failOn Severity) int {
	for _, f := range fs {
		if !f.Waived && f.Severity >= failOn {
			return 1
		}
	}
	return 0
}

// Decode reads an amilint/v1 JSON report, refusing other schemas.
func Decode(b []byte) (*Report, error) {
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decode report: %w", err)
	}
	if r.Schema != Schema {
		return nil, fmt.Errorf("decode report: schema %q, want %q", r.Schema, Schema)
	}
	if r.Generated != "" {
		if _, err := time.Parse(time.RFC3339, r.Generated); err != nil {
			return nil, fmt.Errorf("decode report: generated %q: not an RFC 3339 time", r.Generated)
		}
	}
	return &r, nil
}
