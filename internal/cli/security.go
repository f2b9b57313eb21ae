//go:build !amilint_guest

package cli

import (
	"bufio"
	"errors"
	"flag"
	"fmt"

	"github.com/amilint/amilint/internal/audit/userfile"
	"github.com/amilint/amilint/internal/image/target"
	"github.com/amilint/amilint/internal/report"
	"github.com/amilint/amilint/internal/systemd/security"
)

// securityFlags are the flags of `amilint security`.
type securityFlags struct {
	format    string
	out       string
	threshold string
	policy    string
	disk      diskFlags
	model     modelFlags
}

func (f *securityFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.format, "o", "text", "output format: text or json")
	fs.StringVar(&f.out, "output", "", "write the report to this file instead of stdout")
	fs.StringVar(&f.threshold, "threshold", "", "exit 1 when a service's exposure is above `N` (0.0 to 10.0; systemd-analyze's --threshold=90 is 9.0 here)")
	fs.StringVar(&f.policy, "security-policy", "", "systemd-analyze security policy `FILE` (JSON: weight, range, descriptions per check); default: the image's own systemd-analyze-security.policy, if any")
	f.disk.register(fs)
	f.model.register(fs)
}

// policy reads --security-policy.
func (f *securityFlags) readPolicy() (*security.Policy, error) {
	if f.policy == "" {
		return nil, nil
	}
	b, err := userfile.Read(f.policy)
	if err != nil {
		return nil, fmt.Errorf("--security-policy: %w", err)
	}
	p, err := security.ParsePolicy(b)
	if err != nil {
		return nil, fmt.Errorf("--security-policy %s: %w", f.policy, err)
	}
	return p, nil
}

// runSecurity implements `amilint security [TARGET] [UNIT...]`: every
// service's exposure (or the named ones'), as systemd-analyze security
// --offline=true of the image's systemd scores it.
func runSecurity(e *env, args []string) int {
	fs := newFlags(e, "security")
	var f securityFlags
	f.register(fs)
	pos, err := parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return usageOf(e, fs, "amilint security [TARGET] [UNIT...] [-o text|json] [--threshold N] [--security-policy FILE] [--systemd-version N]")
	}
	if err != nil {
		return fail(e, "security", err)
	}
	if f.format != "text" && f.format != "json" {
		return fail(e, "security", fmt.Errorf("unknown output format %q (want text or json)", f.format))
	}
	var threshold *security.Tenths // none: no exposure fails
	// --threshold= (empty, an unset variable in a script) is refused, not
	// read as no threshold: a gate that passes everything.
	if flagSet(fs, "threshold") {
		t, err := security.ParseTenths(f.threshold)
		if err != nil {
			return fail(e, "security", fmt.Errorf("--threshold: %w", err))
		}
		threshold = &t
	}
	pol, err := f.readPolicy()
	if err != nil {
		return fail(e, "security", err)
	}
	spec := target.DefaultTarget
	var units []string
	if len(pos) > 0 {
		spec, units = pos[0], pos[1:]
	}
	im, err := openSpec(e, spec, f.disk)
	if err != nil {
		return fail(e, "security", err)
	}
	defer im.Close()
	rep, err := security.ScoreImage(im.FS, security.Options{Systemd: f.model.opts.SystemdVersion, Policy: pol, PolicySource: f.policy, Units: units})
	if err != nil {
		return fail(e, "security", fmt.Errorf("%s: %w", im.Name, err))
	}
	dst, err := output(e, f.out)
	if err != nil {
		return fail(e, "security", err)
	}
	w := bufio.NewWriter(dst)
	if f.format == "json" {
		err = report.WriteSecurityJSON(w, im.Name, rep)
	} else {
		err = report.WriteSecurityText(w, im.Name, rep, len(units) > 0)
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = dst.Commit()
	} else {
		dst.Discard()
	}
	if err != nil {
		return fail(e, "security", err)
	}
	code := ExitOK
	for _, u := range rep.Units {
		switch {
		case u.Assessment == nil && len(units) > 0:
			// A unit the user named that systemd-analyze could not score
			// either: the job is not done.
			fmt.Fprintf(e.stderr, "amilint security: %s\n", report.Printable(u.Error))
			code = ExitError
		case u.Assessment != nil && threshold != nil && u.Exposure > *threshold && code == ExitOK:
			code = ExitFindings
		}
	}
	return code
}
