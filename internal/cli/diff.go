//go:build !amilint_guest

package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/report/diff"
)

// runDiff implements `amilint diff OLD NEW`.
func runDiff(e *env, args []string) int {
	fs := newFlags(e, "diff")
	var af auditFlags
	af.register(fs)
	format := fs.String("o", "text", "output format: "+strings.Join(diff.Formats, ", "))
	pos, err := parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return usageOf(e, fs, "amilint diff OLD NEW [-o text|json|markdown|html] [--fail-on SEVERITY]")
	}
	if err != nil {
		return fail(e, "diff", err)
	}
	if len(pos) != 2 {
		return fail(e, "diff", fmt.Errorf("two targets expected (OLD NEW), got %d", len(pos)))
	}
	aud, failOn, err := af.auditor()
	if err != nil {
		return fail(e, "diff", err)
	}
	w, err := diff.Get(*format, failOn)
	if err != nil {
		return fail(e, "diff", err)
	}
	var sides [2]diff.Image
	for i, spec := range pos {
		side, err := diffSide(e, aud, spec, af.disk)
		if err != nil {
			return fail(e, "diff", err)
		}
		sides[i] = side
	}
	d := diff.Compare(sides[0], sides[1])
	if err := w.Write(e.stdout, d); err != nil {
		return fail(e, "diff", err)
	}
	return diff.ExitCode(d, failOn)
}

func diffSide(e *env, aud *audit.Auditor, spec string, d diskFlags) (diff.Image, error) {
	im, err := openSpec(e, spec, d)
	if err != nil {
		return diff.Image{}, err
	}
	defer im.Close()
	res, err := aud.Audit(e.ctx, im.FS, finding.Target{Name: im.Name, Kind: im.Kind})
	if err != nil {
		return diff.Image{}, fmt.Errorf("audit %s: %w", spec, err)
	}
	warnCorrupt(e, im)
	side := diff.Image{Name: im.Name, Report: res.Report}
	for _, f := range res.Inventory.Files {
		u := diff.Unit{Name: f.Name, State: string(f.State)}
		if fu := res.Facts.Units[f.Name]; fu != nil {
			u.StartsAtBoot = fu.StartsAtBoot
			u.Chain = fu.Chain
			if fu.ExecStart != nil {
				u.ExecStart = fu.ExecStart.Raw
			}
			u.Restart = fu.Restart
			u.RestartSec = float64(fu.RestartSec)
			if fu.Security != nil && fu.Security.Exposure != nil {
				e := float64(*fu.Security.Exposure) / 10
				u.Exposure = &e
			}
		}
		side.Units = append(side.Units, u)
	}
	return side, nil
}
