package cli

import (
	"errors"
	"flag"
	"fmt"
	"slices"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/audit/fix"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/image/target"
)

// runFix implements `amilint fix TARGET [--dry-run]`: audit, plan the
// disable/mask remediations of the findings at or above --fail-on as
// systemctl --root would carry them out, apply them to the image directory,
// and exit as a re-audit does.
func runFix(e *env, args []string) int {
	fs := newFlags(e, "fix")
	var af auditFlags
	af.register(fs)
	dryRun := fs.Bool("dry-run", false, "print the plan without writing")
	var hf hardenFlags
	hf.register(fs)
	liveMode := fs.Bool("live", false, "fix the running host over D-Bus instead of an image directory")
	var lf liveFlags
	lf.registerHost(fs)
	pos, err := parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return usageOf(e, fs, "amilint fix DIR [image flags] [policy flags] [--dry-run] [--harden [--harden-catalog DIR]]\n       amilint fix --live [--live flags] [policy flags] [--dry-run]")
	}
	if err != nil {
		return fail(e, "fix", err)
	}
	if *liveMode {
		if hf.on() {
			return fail(e, "fix", errors.New("--harden writes drop-ins into an image directory; it does not apply to --live"))
		}
		return runFixLive(e, &af, &lf, pos, *dryRun)
	}
	catalog, err := hf.catalog()
	if err != nil {
		return fail(e, "fix", err)
	}
	if len(pos) == 0 {
		return fail(e, "fix", fmt.Errorf("a TARGET directory is required: fix writes to the image (the default %s is read-only; unpack it first)", target.DefaultTarget))
	}
	if pos[0] == target.StdinTarget {
		return fail(e, "fix", fmt.Errorf("-: a tarball on standard input is read-only; fix writes only to an unpacked image directory (unpack it, e.g. tar -x -C DIR, fix DIR, then repack)"))
	}
	if target.IsContainerImage(pos[0]) {
		return fail(e, "fix", fmt.Errorf("%s: a container image is read-only; fix writes only to an unpacked image directory (fix the Containerfile, or unpack the image, fix DIR, and build from it)", pos[0]))
	}
	aud, failOn, err := af.auditor()
	if err != nil {
		return fail(e, "fix", err)
	}
	im, err := openTarget(e, pos, af.disk)
	if err != nil {
		return fail(e, "fix", err)
	}
	defer im.Close()
	if im.Dir == "" {
		return fail(e, "fix", fmt.Errorf("%s: a %s target is read-only; fix writes only to an unpacked image directory (unpack it, e.g. tar -x -C DIR, fix DIR, then repack)", im.Name, im.Kind))
	}
	// Lock the image against another fix and remove what a stopped fix
	// left, before the audit reads the tree.
	var tree *fix.Tree
	if !*dryRun {
		if tree, err = fix.Open(im.Dir); err != nil {
			return fail(e, "fix", err)
		}
		defer tree.Close()
		for _, r := range tree.Removed {
			fmt.Fprintf(e.stderr, "amilint fix: removed %s, left by a fix that was stopped\n", r)
		}
	}
	res, err := aud.Audit(e.ctx, im.FS, finding.Target{Name: im.Name, Kind: im.Kind})
	if err != nil {
		return fail(e, "fix", err)
	}
	units := fix.Units(res.Report.Findings, failOn)
	// Plan over the directory in readdir order, as systemctl walks it.
	src, err := fix.OpenDir(im.Dir)
	if err != nil {
		return fail(e, "fix", err)
	}
	defer src.Close()
	steps := fix.Steps(units)
	var dropins []fix.DropIn
	if hf.on() {
		dropins = fix.HardeningFor(res.Inventory.Files, res.Inventory.Boot, catalog, slices.Concat(units[fix.Disable], units[fix.Mask]))
		// What the image's own configuration needs of a drop-in (the
		// directories its rsyslog configuration makes sockets in).
		dropins = fix.AdaptToImage(im.FS, dropins)
	}
	plan, planned, err := fix.NewPlanHarden(rootfs.New(src), steps, dropins)
	if err != nil {
		return fail(e, "fix", err)
	}
	printPlan(e, im.Dir, plan, *dryRun)
	if hf.on() {
		if err := printHardening(e, res, plan, planned, *dryRun); err != nil {
			return fail(e, "fix", err)
		}
	}
	if *dryRun {
		return finding.ExitCode(res.Report.Findings, failOn)
	}
	if err := tree.Apply(plan); err != nil {
		return fail(e, "fix", err)
	}
	// Re-audit what is now on disk.
	again, err := target.Open(e.ctx, im.Dir, target.Options{})
	if err != nil {
		return fail(e, "fix", err)
	}
	defer again.Close()
	after, err := aud.Audit(e.ctx, again.FS, finding.Target{Name: again.Name, Kind: again.Kind})
	if err != nil {
		return fail(e, "fix", err)
	}
	code := finding.ExitCode(after.Report.Findings, failOn)
	for _, f := range after.Report.Findings {
		if f.Waived || f.Severity < failOn {
			continue
		}
		why := "not fixable by disable/mask"
		if f.Remediation.Action == fix.Disable || f.Remediation.Action == fix.Mask {
			why = "still starts at boot after the change, as it would after systemctl " + f.Remediation.Action
			if slices.ContainsFunc(plan.Notes, func(n fix.Note) bool { return n.Unit == f.Unit }) {
				why = "not fully applied; see the notes above"
			} else if n := len(f.Chain); n > 0 && f.Chain[n-1].Source != "" {
				why += "; what makes it start is " + f.Chain[n-1].Source
			}
		}
		fmt.Fprintf(e.stdout, "remaining: %s %s %s (remediation %s: %s)\n", f.Severity, f.RuleID, f.Unit, f.Remediation.Action, why)
	}
	if code == ExitOK {
		fmt.Fprintf(e.stdout, "fixed: nothing at or above %s remains\n", failOn)
	}
	return code
}

func printPlan(e *env, dir string, plan *fix.Plan, dryRun bool) {
	verb := "applying"
	if dryRun {
		verb = "would apply (dry run)"
	}
	if plan.Empty() {
		fmt.Fprintln(e.stdout, "nothing to change")
	} else {
		fmt.Fprintf(e.stdout, "%s %d changes:\n", verb, len(plan.Changes))
		for _, c := range plan.Changes {
			fmt.Fprintln(e.stdout, "  "+c.String())
		}
	}
	if cmds := plan.Commands(dir); len(cmds) > 0 {
		fmt.Fprintln(e.stdout, "equivalent to:")
		for _, c := range cmds {
			fmt.Fprintln(e.stdout, "  "+c)
		}
	}
	for _, n := range plan.Notes {
		fmt.Fprintf(e.stderr, "amilint fix: %s %s: %s\n", n.Action, n.Unit, n.Text)
	}
}
