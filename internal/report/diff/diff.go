// Package diff compares two images: which units a new image enables,
// starts at boot, masks or drops, which ExecStart lines and restart policies
// changed, which services got more or less exposed (systemd-analyze
// security), and which findings it adds or resolves. It works on a small
// inventory (Image) that the caller maps from the engine's facts, so it
// never reads an image itself.
package diff

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/report"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// Schema is the version tag of the JSON diff document.
const Schema = "amilint-diff/v1"

// Unit is what a diff needs to know about one unit file of an image.
type Unit struct {
	Name string `json:"name"`
	// State is spelled as systemctl list-unit-files spells it.
	State        string `json:"state"`
	StartsAtBoot bool   `json:"starts_at_boot"`
	// Chain is why it starts at boot, when it does (optional).
	Chain     []unit.Edge `json:"chain,omitempty"`
	ExecStart string      `json:"exec_start,omitempty"`
	Restart   string      `json:"restart,omitempty"`
	// RestartSec is in seconds.
	RestartSec float64 `json:"restart_sec"`
	// Exposure is a service's exposure as systemd-analyze security scores
	// it (0.0 to 10.0), nil when it has none.
	Exposure *float64 `json:"exposure,omitempty"`
}

// Image is one side of a diff: its name, its units and its audit report
// (nil when it was not audited).
type Image struct {
	Name   string
	Units  []Unit
	Report *finding.Report
}

// Change is a unit whose state or properties differ between the images.
// Old is nil for a unit only NEW has, New nil for one only OLD has.
type Change struct {
	Unit string `json:"unit"`
	Old  *Unit  `json:"old,omitempty"`
	New  *Unit  `json:"new,omitempty"`
}

// Diff is the difference from Old to New.
type Diff struct {
	Schema string `json:"schema"`
	Old    string `json:"old"`
	New    string `json:"new"`
	// Added are unit files only NEW has; Removed only OLD has.
	Added   []Change `json:"added"`
	Removed []Change `json:"removed"`
	// NewlyEnabled are enabled in NEW and not in OLD; Disabled are enabled
	// in OLD and present, neither enabled nor masked, in NEW.
	NewlyEnabled []Change `json:"newly_enabled"`
	Disabled     []Change `json:"disabled"`
	// NewlyStarted start at boot in NEW and not in OLD; NoLongerStarted
	// the reverse.
	NewlyStarted    []Change `json:"newly_started_at_boot"`
	NoLongerStarted []Change `json:"no_longer_started_at_boot"`
	// Masked are masked in NEW and not in OLD; Unmasked the reverse.
	Masked   []Change `json:"masked"`
	Unmasked []Change `json:"unmasked"`
	// ExecStartChanged and RestartChanged are units of both images, masked
	// in neither, whose ExecStart, or Restart/RestartSec, differ.
	ExecStartChanged []Change `json:"exec_start_changed"`
	RestartChanged   []Change `json:"restart_changed"`
	// MoreExposed and LessExposed are services of both images whose
	// exposure (systemd-analyze security) rose or fell.
	MoreExposed []Change `json:"more_exposed"`
	LessExposed []Change `json:"less_exposed"`
	// FindingsAdded are NEW's findings that OLD did not have (by rule and
	// unit); FindingsResolved are OLD's that NEW no longer has.
	FindingsAdded    []finding.Finding `json:"findings_added"`
	FindingsResolved []finding.Finding `json:"findings_resolved"`
}

// enabledStates are the states in which a unit file is hooked into the
// dependency tree by its [Install] section (or an alias of one that is).
var enabledStates = []string{"enabled", "enabled-runtime", "linked", "linked-runtime", "alias", "indirect"}

func enabled(u *Unit) bool { return u != nil && slices.Contains(enabledStates, u.State) }

func masked(u *Unit) bool { return u != nil && strings.HasPrefix(u.State, "masked") }

func boots(u *Unit) bool { return u != nil && u.StartsAtBoot }

// Compare computes the diff from old to new. Units are matched by name;
// findings by rule id and unit.
func Compare(old, new Image) *Diff {
	d := &Diff{Schema: Schema, Old: old.Name, New: new.Name}
	om, nm := index(old.Units), index(new.Units)
	names := make([]string, 0, len(om)+len(nm))
	for n := range om {
		names = append(names, n)
	}
	for n := range nm {
		if _, ok := om[n]; !ok {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	for _, n := range names {
		o, w := om[n], nm[n]
		c := Change{Unit: n, Old: o, New: w}
		switch {
		case o == nil:
			d.Added = append(d.Added, c)
		case w == nil:
			d.Removed = append(d.Removed, c)
		}
		if enabled(w) && !enabled(o) {
			d.NewlyEnabled = append(d.NewlyEnabled, c)
		}
		if enabled(o) && !enabled(w) && w != nil && !masked(w) {
			d.Disabled = append(d.Disabled, c)
		}
		if boots(w) && !boots(o) {
			d.NewlyStarted = append(d.NewlyStarted, c)
		}
		if boots(o) && !boots(w) {
			d.NoLongerStarted = append(d.NoLongerStarted, c)
		}
		if masked(w) && !masked(o) {
			d.Masked = append(d.Masked, c)
		}
		if masked(o) && !masked(w) && w != nil {
			d.Unmasked = append(d.Unmasked, c)
		}
		// A masked unit has no properties to compare.
		if o != nil && w != nil && !masked(o) && !masked(w) {
			if o.ExecStart != w.ExecStart {
				d.ExecStartChanged = append(d.ExecStartChanged, c)
			}
			if o.Restart != w.Restart || o.RestartSec != w.RestartSec {
				d.RestartChanged = append(d.RestartChanged, c)
			}
			if o.Exposure != nil && w.Exposure != nil {
				switch {
				case *w.Exposure > *o.Exposure:
					d.MoreExposed = append(d.MoreExposed, c)
				case *w.Exposure < *o.Exposure:
					d.LessExposed = append(d.LessExposed, c)
				}
			}
		}
	}
	d.FindingsAdded = subtract(findings(new.Report), findings(old.Report))
	d.FindingsResolved = subtract(findings(old.Report), findings(new.Report))
	d.normalize()
	return d
}

// normalize makes every list non-nil so the JSON has [] rather than null.
func (d *Diff) normalize() {
	for _, l := range []*[]Change{&d.Added, &d.Removed, &d.NewlyEnabled, &d.Disabled, &d.NewlyStarted,
		&d.NoLongerStarted, &d.Masked, &d.Unmasked, &d.ExecStartChanged, &d.RestartChanged, &d.MoreExposed, &d.LessExposed} {
		if *l == nil {
			*l = []Change{}
		}
	}
	if d.FindingsAdded == nil {
		d.FindingsAdded = []finding.Finding{}
	}
	if d.FindingsResolved == nil {
		d.FindingsResolved = []finding.Finding{}
	}
}

func index(us []Unit) map[string]*Unit {
	m := make(map[string]*Unit, len(us))
	for i := range us {
		m[us[i].Name] = &us[i]
	}
	return m
}

func findings(r *finding.Report) []finding.Finding {
	if r == nil {
		return nil
	}
	return r.Findings
}

func key(f finding.Finding) string { return f.RuleID + "\x00" + f.Unit }

// subtract returns the findings of a whose rule and unit b lacks, highest
// severity first.
func subtract(a, b []finding.Finding) []finding.Finding {
	have := make(map[string]bool, len(b))
	for _, f := range b {
		have[key(f)] = true
	}
	var out []finding.Finding
	for _, f := range a {
		if !have[key(f)] {
			out = append(out, f)
		}
	}
	slices.SortStableFunc(out, func(x, y finding.Finding) int {
		if x.Severity != y.Severity {
			return cmp.Compare(y.Severity, x.Severity)
		}
		return strings.Compare(key(x), key(y))
	})
	return out
}

// ExitCode is 1 when NEW adds an unwaived finding at or above failOn, else 0.
func ExitCode(d *Diff, failOn finding.Severity) int {
	return finding.ExitCode(d.FindingsAdded, failOn)
}

// Empty reports whether the images differ in nothing the diff tracks.
func (d *Diff) Empty() bool {
	return len(d.Added)+len(d.Removed)+len(d.NewlyEnabled)+len(d.Disabled)+len(d.NewlyStarted)+
		len(d.NoLongerStarted)+len(d.Masked)+len(d.Unmasked)+len(d.ExecStartChanged)+len(d.RestartChanged)+
		len(d.MoreExposed)+len(d.LessExposed)+
		len(d.FindingsAdded)+len(d.FindingsResolved) == 0
}

// section is one titled list of unit changes, in the order every format
// shows them.
type section struct {
	Title   string
	Changes []Change
	// Detail renders one change's detail ("enabled → masked").
	Detail func(Change) string
}

func (d *Diff) sections() []section {
	state := func(c Change) string { return stateOf(c.Old) + " → " + stateOf(c.New) }
	return []section{
		{"Newly enabled", d.NewlyEnabled, state},
		{"Newly started at boot", d.NewlyStarted, func(c Change) string {
			if c.New != nil && len(c.New.Chain) > 0 {
				return report.Chain(c.New.Chain)
			}
			return state(c)
		}},
		{"More exposed", d.MoreExposed, exposure},
		{"Masked", d.Masked, state},
		{"Removed", d.Removed, state},
		{"Added", d.Added, state},
		{"Disabled", d.Disabled, state},
		{"No longer started at boot", d.NoLongerStarted, state},
		{"Unmasked", d.Unmasked, state},
		{"ExecStart changed", d.ExecStartChanged, func(c Change) string {
			return quoteOr(c.Old.ExecStart) + " → " + quoteOr(c.New.ExecStart)
		}},
		{"Restart policy changed", d.RestartChanged, func(c Change) string {
			return restartOf(c.Old) + " → " + restartOf(c.New)
		}},
		{"Less exposed", d.LessExposed, exposure},
	}
}

// exposure renders a change of exposure: "exposure 6.2 → 9.6".
func exposure(c Change) string {
	return fmt.Sprintf("exposure %.1f → %.1f", *c.Old.Exposure, *c.New.Exposure)
}

func stateOf(u *Unit) string {
	if u == nil {
		return "absent"
	}
	s := u.State
	if s == "" {
		s = "unknown"
	}
	if u.StartsAtBoot {
		s += ", starts at boot"
	}
	return s
}

func quoteOr(s string) string {
	if s == "" {
		return "(none)"
	}
	return fmt.Sprintf("%q", s)
}

func restartOf(u *Unit) string {
	r := u.Restart
	if r == "" {
		r = "no"
	}
	return fmt.Sprintf("Restart=%s RestartSec=%gs", r, u.RestartSec)
}
