package cli

import (
	"flag"
	"fmt"
	"strings"

	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/fix"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/security"
	"github.com/amilint/amilint/rules"
)

// hardenFlags are fix's --harden and --harden-catalog.
type hardenFlags struct {
	harden bool
	dirs   listFlag
}

func (h *hardenFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&h.harden, "harden", false, "also write the hardening catalog's drop-ins (/etc/systemd/system/UNIT.d/"+rules.DropInName+") for the services the image has and enables, or its boot starts or runs from a timer, socket or path it starts, with each one's exposure before and after")
	fs.Var(&h.dirs, "harden-catalog", "directory of hardening catalog entries (YAML) over the shipped ones, by id (disabled: true turns one off); repeatable; implies --harden")
}

func (h *hardenFlags) on() bool { return h.harden || len(h.dirs) > 0 }

// catalog loads the hardening catalog when --harden is on.
func (h *hardenFlags) catalog() ([]rules.Hardening, error) {
	if !h.on() {
		return nil, nil
	}
	return rules.LoadHardening(h.dirs...)
}

// printHardening lists the drop-ins of the plan with each hardened
// service's exposure before (as the audit scored the image) and after (the
// image as the plan leaves it), and, in a dry run, their text.
func printHardening(e *env, res *audit.Result, plan *fix.Plan, planned *rootfs.FS, dryRun bool) error {
	if len(plan.DropIns) == 0 {
		fmt.Fprintln(e.stdout, "hardening: no service of the hardening catalog is present and enabled, started at boot, or run by a started timer, socket or path")
		return nil
	}
	var names []string
	for _, d := range plan.DropIns {
		names = append(names, d.Scored())
	}
	after, err := security.ScoreImage(planned, security.Options{Systemd: res.Inventory.Systemd, Units: names})
	if err != nil {
		return fmt.Errorf("score the hardened services: %w", err)
	}
	fmt.Fprintf(e.stdout, "hardening %d services (exposure as systemd-analyze security of systemd %d scores it):\n", len(plan.DropIns), after.Tables)
	for i, d := range plan.DropIns {
		before := "-"
		if u := res.Facts.Units[d.Scored()]; u != nil && u.Security != nil && u.Security.Exposure != nil {
			before = fmt.Sprintf("%s %s", *u.Security.Exposure, u.Security.Level)
		}
		now := after.Units[i].Error
		if a := after.Units[i].Assessment; a != nil {
			now = fmt.Sprintf("%s %s", a.Exposure, a.Level)
		}
		state := ""
		if d.Unchanged {
			state = " (already there)"
		}
		name := d.Unit
		if len(d.Instances) > 0 {
			name = d.Scored()
		}
		fmt.Fprintf(e.stdout, "  %-28s %s → %s  %s%s\n", name, before, now, d.Path, state)
		if dryRun && !d.Unchanged {
			for _, l := range strings.Split(strings.TrimRight(d.Content, "\n"), "\n") {
				fmt.Fprintln(e.stdout, "      "+l)
			}
		}
	}
	return nil
}
