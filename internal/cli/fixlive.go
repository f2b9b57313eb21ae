package cli

import (
	"fmt"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/audit/fix"
	"github.com/amilint/amilint/internal/host/live"
	"github.com/amilint/amilint/internal/host/livefix"
)

// rebootReminder is printed by every fix --live: disabling stops a leak,
// only a reboot frees what leaked.
const rebootReminder = "reminder: a reboot is what purges the zombie memory cgroups already leaked; disabling and stopping the unit only stops the leak"

// runFixLive implements `amilint fix --live [--dry-run]`: audit the running
// host as `amilint live` does, then, over D-Bus, disable or mask the units
// of the findings at or above --fail-on, reload the manager, stop those
// still running, and exit as a re-audit of the host does.
func runFixLive(e *env, af *auditFlags, lf *liveFlags, pos []string, dryRun bool) int {
	if len(pos) > 0 {
		return fail(e, "fix", fmt.Errorf("--live fixes the running host; it takes no TARGET (got %v)", pos))
	}
	failOn, err := finding.ParseSeverity(af.failOn)
	if err != nil {
		return fail(e, "fix", fmt.Errorf("--fail-on: %w", err))
	}
	cfg, err := af.config()
	if err != nil {
		return fail(e, "fix", err)
	}
	audit := func() (*live.Document, []finding.Finding, error) {
		// A new Host each time: the re-audit must see the unit files and
		// states as they are now, not a cached listing.
		host, _, err := lf.host(e, cfg)
		if err != nil {
			return nil, nil, err
		}
		defer host.Close()
		return host.Audit(e.ctx)
	}
	doc, fs, err := audit()
	if err != nil {
		return fail(e, "fix", err)
	}
	steps := fix.Steps(fix.Units(fs, failOn))
	if len(steps) == 0 {
		fmt.Fprintf(e.stdout, "nothing to change: no disable or mask remediation at or above %s\n", failOn)
	} else {
		cl, err := livefix.Dial(e.ctx, lf.bus)
		if err != nil {
			return fail(e, "fix", err)
		}
		res, err := cl.Apply(e.ctx, steps, dryRun)
		cl.Close()
		verb := "changed"
		if dryRun {
			verb = "would change (dry run)"
		}
		if res != nil {
			fmt.Fprintf(e.stdout, "%s %d:\n", verb, len(res.Changes))
			for _, c := range res.Changes {
				fmt.Fprintln(e.stdout, "  "+c.String())
			}
			for _, c := range res.Skipped {
				fmt.Fprintf(e.stderr, "amilint fix: skipped %s\n", c)
			}
		}
		if err != nil {
			return fail(e, "fix", err)
		}
	}
	if m := zombies(doc); m > 0 {
		fmt.Fprintf(e.stdout, "%s (%d now)\n", rebootReminder, m)
	} else {
		fmt.Fprintln(e.stdout, rebootReminder)
	}
	if dryRun || len(steps) == 0 {
		return finding.ExitCode(fs, failOn)
	}
	_, after, err := audit()
	if err != nil {
		return fail(e, "fix", err)
	}
	for _, f := range after {
		if f.Waived || f.Severity < failOn {
			continue
		}
		fmt.Fprintf(e.stdout, "remaining: %s %s %s (remediation %s)\n", f.Severity, f.RuleID, f.Unit, f.Remediation.Action)
	}
	code := finding.ExitCode(after, failOn)
	if code == ExitOK {
		fmt.Fprintf(e.stdout, "fixed: nothing at or above %s remains\n", failOn)
	}
	return code
}

func zombies(doc *live.Document) int {
	if doc == nil || doc.Live == nil || doc.Live.Cgroups == nil || doc.Live.Cgroups.Memory == nil {
		return 0
	}
	return doc.Live.Cgroups.Memory.Zombies
}
