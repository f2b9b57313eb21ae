//go:build !amilint_guest

package cli

import (
	"errors"
	"flag"
	"fmt"

	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/policy"
)

// runPolicy runs "amilint policy test DIR...": the user's Rego tests,
// compiled with the embedded default policies, in-process.
func runPolicy(e *env, args []string) int {
	if len(args) == 0 || args[0] != "test" {
		return fail(e, "policy", errors.New("usage: amilint policy test [--data FILE] [--rules DIR] [--profile NAME] [--trait NAME] [--run REGEXP] [-v] DIR"))
	}
	fs := newFlags(e, "policy test")
	var data, ruleDirs listFlag
	fs.Var(&data, "data", "JSON or YAML `FILE` merged under data.user (repeatable)")
	fs.Var(&ruleDirs, "rules", "rules `DIR` merged over the embedded catalog in data.rules (repeatable)")
	profile := fs.String("profile", "", "profile `NAME` the tests see as data.params.profile")
	var traits traitFlag
	fs.Var(&traits, "trait", "trait `NAME` the tests see in data.params.traits (repeatable or comma-separated)")
	verbose := fs.Bool("v", false, "print every test, not only failures")
	run := fs.String("run", "", "run only the tests whose package.name matches `REGEXP`")
	var budget budgetFlags
	budget.register(fs)
	dirs, err := parse(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return usageOf(e, fs, "amilint policy test [--data FILE] [--rules DIR] [--profile NAME] [--trait NAME] [--run REGEXP] [-v] DIR...")
	}
	if err != nil {
		return fail(e, "policy test", err)
	}
	if len(dirs) == 0 {
		return fail(e, "policy test", errors.New("name a policy directory"))
	}
	var mods []policy.Module
	for _, d := range dirs {
		m, err := policy.DirModules(d, true)
		if err != nil {
			return fail(e, "policy test", err)
		}
		mods = append(mods, m...)
	}
	acfg := audit.Config{RulesDirs: ruleDirs, DataFiles: data, Profile: *profile, Traits: traits}
	if err := budget.apply(&acfg); err != nil {
		return fail(e, "policy test", err)
	}
	aud, err := audit.New(acfg)
	if err != nil {
		return fail(e, "policy test", err)
	}
	cfg := aud.PolicyConfig("")
	res, err := policy.RunTestsMatching(e.ctx, mods, cfg, *run)
	if err != nil {
		return fail(e, "policy test", err)
	}
	passed, failed, errored := 0, 0, 0
	for _, r := range res {
		switch {
		case r.Err != nil:
			errored++
			fmt.Fprintf(e.stdout, "ERROR: %s (%s): %v\n", r.Name, r.Location, r.Err)
		case r.Skip:
			if *verbose {
				fmt.Fprintf(e.stdout, "SKIP: %s (%s)\n", r.Name, r.Location)
			}
		case !r.Pass:
			failed++
			fmt.Fprintf(e.stdout, "FAIL: %s (%s)\n", r.Name, r.Location)
		default:
			passed++
			if *verbose {
				fmt.Fprintf(e.stdout, "PASS: %s\n", r.Name)
			}
		}
		if r.Output != "" && (*verbose || !r.Pass) {
			fmt.Fprint(e.stdout, r.Output)
		}
	}
	fmt.Fprintf(e.stdout, "policy tests: %d passed, %d failed, %d errors\n", passed, failed, errored)
	switch {
	case errored > 0:
		return ExitError
	case failed > 0:
		return ExitFindings
	}
	return ExitOK
}
