// Package waiver owns waivers: a file of entries that each silence one
// rule's findings on matching units and targets, with a reason and an
// expiry date. Waived findings stay in the report, marked waived; an
// expired waiver waives nothing and is itself a finding. The package reads
// only the waiver file it is given and never the image.
package waiver

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/audit/userfile"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// ExpiredRuleID is the rule id of the finding an expired waiver makes.
const ExpiredRuleID = "waiver-expired"

// DateLayout is how expiry dates are written.
const DateLayout = "2006-01-02"

// Waiver is one entry of a waivers file.
type Waiver struct {
	// RuleID is the rule the waiver silences (a glob: "*" and "?" match).
	RuleID string `yaml:"rule_id"`
	// Unit limits the waiver to matching units (a glob); empty means every
	// finding of the rule, with a unit or not.
	Unit string `yaml:"unit,omitempty"`
	// Target is a glob over the audited target's name ("ami-*", "*").
	Target string `yaml:"target"`
	// Reason says why; it is shown with the waived finding.
	Reason string `yaml:"reason"`
	// Expires is the last day (UTC, YYYY-MM-DD) the waiver is in force.
	Expires string `yaml:"expires"`

	expires            time.Time
	rule, unit, target *regexp.Regexp
}

// File is a waivers file: a YAML document with a "waivers" list.
type File struct {
	Waivers []*Waiver `yaml:"waivers"`
}

// Load reads and validates a waivers file.
func Load(path string) (*File, error) {
	b, err := userfile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("read waivers %s: %w", path, err)
	}
	f, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("read waivers %s: %w", path, err)
	}
	return f, nil
}

// Parse decodes a waivers file strictly (unknown keys are errors) and
// validates every entry, reporting every problem at once.
func Parse(b []byte) (*File, error) {
	var f File
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("parse waivers: %w", err)
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	return &f, nil
}

// Validate checks every entry: rule_id, target, reason and expires are
// required, expires is a YYYY-MM-DD date, globs are well formed.
func (f *File) Validate() error {
	var errs []error
	for i, w := range f.Waivers {
		if w == nil {
			errs = append(errs, fmt.Errorf("waiver %d: empty entry", i+1))
			continue
		}
		if err := w.compile(); err != nil {
			errs = append(errs, fmt.Errorf("waiver %d (%s): %w", i+1, w.RuleID, err))
		}
	}
	return errors.Join(errs...)
}

func (w *Waiver) compile() error {
	var errs []error
	if strings.TrimSpace(w.RuleID) == "" {
		errs = append(errs, errors.New("rule_id is required"))
	}
	if strings.TrimSpace(w.Target) == "" {
		errs = append(errs, errors.New(`target is required (use "*" for every target)`))
	}
	if strings.TrimSpace(w.Reason) == "" {
		errs = append(errs, errors.New("reason is required"))
	}
	if w.Expires == "" {
		errs = append(errs, errors.New("expires is required (YYYY-MM-DD)"))
	} else if t, err := time.Parse(DateLayout, w.Expires); err != nil {
		errs = append(errs, fmt.Errorf("expires %q is not a YYYY-MM-DD date", w.Expires))
	} else {
		w.expires = t
	}
	var err error
	if w.rule, err = compileGlob(w.RuleID); err != nil {
		errs = append(errs, fmt.Errorf("rule_id: %w", err))
	}
	if w.unit, err = compileGlob(w.Unit); err != nil {
		errs = append(errs, fmt.Errorf("unit: %w", err))
	}
	if w.target, err = compileGlob(w.Target); err != nil {
		errs = append(errs, fmt.Errorf("target: %w", err))
	}
	return errors.Join(errs...)
}

// Expired reports whether the waiver is past its last day at now.
func (w *Waiver) Expired(now time.Time) bool {
	y, m, d := now.UTC().Date()
	today := time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
	return today.After(w.expires)
}

// matches reports whether the waiver covers f on target.
func (w *Waiver) matches(f *finding.Finding, target string) bool {
	if !w.target.MatchString(target) || !w.rule.MatchString(f.RuleID) {
		return false
	}
	return w.Unit == "" || w.unit.MatchString(f.Unit)
}

// Apply marks the findings that an in-force waiver of f covers on target
// as waived, and appends one waiver-expired finding (severity medium) per
// expired waiver whose target pattern matches target; expired waivers
// waive nothing. It returns a new slice; findings are not modified.
func (f *File) Apply(findings []finding.Finding, target string, now time.Time) []finding.Finding {
	out := make([]finding.Finding, 0, len(findings))
	for _, fd := range findings {
		if !fd.Waived {
			for _, w := range f.Waivers {
				if w.Expired(now) || !w.matches(&fd, target) {
					continue
				}
				fd.Waived = true
				fd.Waiver = &finding.Waiver{Reason: w.Reason, Expires: w.Expires}
				break
			}
		}
		out = append(out, fd)
	}
	for _, w := range f.Waivers {
		if !w.Expired(now) || !w.target.MatchString(target) {
			continue
		}
		scope := "rule " + w.RuleID
		if w.Unit != "" {
			scope += ", unit " + w.Unit
		}
		out = append(out, finding.Finding{
			RuleID:   ExpiredRuleID,
			Title:    "Expired waiver",
			Severity: finding.Medium,
			Unit:     "",
			Message: fmt.Sprintf("the waiver for %s on target %s expired on %s and no longer waives anything (reason was: %s)",
				scope, w.Target, w.Expires, w.Reason),
			Chain: []unit.Edge{},
			Remediation: finding.Remediation{
				Action: "none",
				Text:   "Fix what the waiver covered, or renew the waiver with a new expires date and a current reason.",
			},
			Evidence: map[string]any{"rule_id": w.RuleID, "unit": w.Unit, "target": w.Target, "expires": w.Expires},
		})
	}
	return out
}

// compileGlob turns a glob ("*" any run, "?" one character, "[...]" a
// class, "\" escapes) into an anchored regexp. "" compiles to match "".
func compileGlob(g string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(g); i++ {
		switch c := g[i]; c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '\\':
			if i+1 >= len(g) {
				return nil, fmt.Errorf("glob %q ends in a backslash", g)
			}
			i++
			b.WriteString(regexp.QuoteMeta(g[i : i+1]))
		case '[':
			j := strings.IndexByte(g[i+1:], ']')
			if j < 0 {
				return nil, fmt.Errorf("glob %q has an unterminated [", g)
			}
			class := g[i+1 : i+1+j]
			if class == "" || class == "!" || class == "^" {
				return nil, fmt.Errorf("glob %q has an empty class", g)
			}
			if class[0] == '!' {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += j + 1
		default:
			b.WriteString(regexp.QuoteMeta(g[i : i+1]))
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		return nil, fmt.Errorf("glob %q: %w", g, err)
	}
	return re, nil
}
