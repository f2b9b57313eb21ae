package fix

import (
	"github.com/amilint/amilint/internal/audit/finding"
)

// Units returns the remediations worth applying: the units of unwaived
// findings at or above failOn whose action is disable or mask, by action,
// each list sorted and without duplicates. A unit both to mask and to
// disable is only masked.
func Units(findings []finding.Finding, failOn finding.Severity) map[string][]string {
	byAction := map[string]map[string]bool{Disable: {}, Mask: {}}
	for _, f := range findings {
		if f.Waived || f.Severity < failOn {
			continue
		}
		set, ok := byAction[f.Remediation.Action]
		if !ok {
			continue
		}
		for _, u := range f.Remediation.Units {
			set[u] = true
		}
	}
	out := map[string][]string{}
	for action, set := range byAction {
		var units []string
		for u := range set {
			if action == Disable && byAction[Mask][u] {
				continue
			}
			units = append(units, u)
		}
		if len(units) > 0 {
			out[action] = sorted(units)
		}
	}
	return out
}

// Steps orders the remediations as fix runs them: disable, then mask.
func Steps(units map[string][]string) []Step {
	var out []Step
	for _, a := range []string{Disable, Mask} {
		if len(units[a]) > 0 {
			out = append(out, Step{Action: a, Units: units[a]})
		}
	}
	return out
}
