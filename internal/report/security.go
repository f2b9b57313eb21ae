//go:build !amilint_guest

package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/amilint/amilint/internal/systemd/security"
)

// SecuritySchema versions the JSON of `amilint security -o json`.
const SecuritySchema = "amilint/v1"

// SecurityDoc is the JSON document of `amilint security -o json`.
type SecurityDoc struct {
	Schema string `json:"schema"`
	Target string `json:"target"`
	*security.Report
}

// WriteSecurityJSON writes the assessment of an image's services as one
// JSON document: per unit its exposure, level and every check with
// systemd's json_field as id.
func WriteSecurityJSON(w io.Writer, target string, r *security.Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(SecurityDoc{Schema: SecuritySchema, Target: target, Report: r})
}

// WriteSecurityText writes the assessment as text: with detail, a table
// per unit as systemd-analyze prints it (the checks, worst first) and the
// overall line; without, one line per unit with its exposure, level and
// the three checks whose fix lowers it most.
func WriteSecurityText(w io.Writer, target string, r *security.Report, detail bool) error {
	tables := fmt.Sprintf("systemd %d", r.Tables)
	if r.Tables != r.Systemd.Major {
		tables += fmt.Sprintf("'s tables (the nearest amilint carries to the image's systemd %d)", r.Systemd.Major)
	}
	if detail {
		for i, u := range r.Units {
			if i > 0 {
				fmt.Fprintln(w)
			}
			if u.Assessment == nil {
				fmt.Fprintf(w, "%s: %s\n", u.Unit, u.Error)
				continue
			}
			if err := writeChecks(w, u.Assessment); err != nil {
				return err
			}
			fmt.Fprintf(w, "\n→ Overall exposure level for %s: %s %s\n", u.ID, u.Exposure, u.Level)
			for _, n := range u.Notes {
				fmt.Fprintf(w, "  note: %s\n", n)
			}
		}
	} else {
		tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "UNIT\tEXPOSURE\tLEVEL\tLOWERED MOST BY")
		for _, u := range r.Units {
			if u.Assessment == nil {
				fmt.Fprintf(tw, "%s\t-\t-\t%s\n", u.Unit, u.Error)
				continue
			}
			var top []string
			for _, c := range u.Top(3) {
				top = append(top, fmt.Sprintf("%s (%s)", c.Name, c.Exposure))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", u.Unit, u.Exposure, u.Level, strings.Join(top, ", "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	scored := 0
	for _, u := range r.Units {
		if u.Assessment != nil {
			scored++
		}
	}
	fmt.Fprintf(w, "\n%s: %d of %d services scored as systemd-analyze security --offline=true of %s does", target, scored, len(r.Units), tables)
	if r.Policy != "" {
		fmt.Fprintf(w, ", with the policy %s", r.Policy)
	}
	_, err := fmt.Fprintln(w, ".")
	for _, ig := range r.PolicyIgnored {
		fmt.Fprintf(w, "  policy: %s, ignored (as systemd ignores it)\n", ig)
	}
	return err
}

// writeChecks prints one unit's checks, the exposed ones first (largest
// contribution first), then the passing and the not applicable ones.
func writeChecks(w io.Writer, a *security.Assessment) error {
	checks := slices.Clone(a.Checks)
	rank := func(c security.Check) int {
		switch {
		case c.Set == nil:
			return 2
		case *c.Set:
			return 1
		}
		return 0
	}
	slices.SortStableFunc(checks, func(x, y security.Check) int {
		if r := rank(x) - rank(y); r != 0 {
			return r
		}
		if x.Exposure != nil && y.Exposure != nil && *x.Exposure != *y.Exposure {
			return cmp.Compare(*y.Exposure, *x.Exposure)
		}
		return strings.Compare(x.Name, y.Name)
	})
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	fmt.Fprintln(tw, "  NAME\tDESCRIPTION\tEXPOSURE")
	for _, c := range checks {
		mark, exp := " ", ""
		switch {
		case c.Set == nil:
		case *c.Set:
			mark = "✓"
		default:
			mark = "✗"
			exp = c.Exposure.String()
		}
		fmt.Fprintf(tw, "%s %s\t%s\t%s\n", mark, c.Name, c.Description, exp)
	}
	return tw.Flush()
}
