//go:build !amilint_guest

package policy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/tester"
)

// ErrNoTests reports a test run that found no test rules.
var ErrNoTests = errors.New("no tests found")

// TestResult is the outcome of one Rego test rule.
type TestResult struct {
	// Name is "package.test_name".
	Name string
	// Location is "file:line".
	Location string
	Pass     bool
	Fail     bool
	Skip     bool
	// Err is set when the test could not run (a runtime error).
	Err error
	// Output is what the test printed.
	Output string
}

// RunTests compiles mods (Rego v1) together with the embedded default
// policies and runs every test_ rule in-process with OPA's tester, over
// the data Data(cfg) builds, with cfg's capabilities (the sandbox by
// default), cfg.Timeout for each test and cfg.Memory for the run (which
// then runs the tests one at a time, and stops at the first that runs out
// of memory). Compile errors are errors;
// failing tests are results.
func RunTests(ctx context.Context, mods []Module, cfg Config) ([]TestResult, error) {
	return RunTestsMatching(ctx, mods, cfg, "")
}

// RunTestsMatching is RunTests for the tests whose "package.test_name"
// matches the regular expression run ("" runs every test).
func RunTestsMatching(ctx context.Context, mods []Module, cfg Config, run string) ([]TestResult, error) {
	defaults, err := DefaultModules(false)
	if err != nil {
		return nil, err
	}
	parsed, err := ParseModules(append(defaults, mods...))
	if err != nil {
		return nil, err
	}
	data, err := Data(cfg)
	if err != nil {
		return nil, err
	}
	store := newStore(data)
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		return nil, fmt.Errorf("run tests: %w", err)
	}
	defer store.Abort(ctx, txn)
	caps := cfg.Capabilities
	if caps == nil {
		caps = Sandbox()
	}
	if err := checkBuiltins(parsed, caps); err != nil {
		return nil, err
	}
	comp := ast.NewCompiler().WithDefaultRegoVersion(ast.RegoV1).WithEnablePrintStatements(true).
		WithCapabilities(caps)
	budget := memoryBudget(cfg.Memory)
	if budget > 0 {
		// The budget counts from what the process holds: no garbage.
		runtime.GC()
	}
	ctx, endMemory := withMemory(ctx, budget)
	defer endMemory()
	// OPA's runner gives each test 5 s unless told otherwise; 0 is no
	// limit here, as for every other evaluation.
	runner := tester.NewRunner().SetTimeout(cmp.Or(cfg.Timeout, noLimit))
	if budget > 0 {
		// The budget is the run's: tests one at a time, so that the one
		// running when it runs out is the one that took it.
		runner = runner.SetParallel(1)
	}
	ch, err := runner.
		SetCompiler(comp).
		SetStore(store).
		SetDefaultRegoVersion(ast.RegoV1).
		CapturePrintOutput(true).
		RaiseBuiltinErrors(true).
		SetModules(parsed).
		Filter(run).
		RunTests(ctx, txn)
	if err != nil {
		return nil, fmt.Errorf("compile tests: %w", err)
	}
	ctx, endGuard := guard(ctx)
	defer endGuard()
	var out []TestResult
	stoppedBy := ""
	pending := testsOf(parsed, run)
	for {
		r, err := nextResult(ctx, ch, cfg.Timeout, pending, budget)
		if err != nil {
			return out, err
		}
		if r == nil {
			break
		}
		delete(pending, r.Package+"."+r.Name)
		tr := TestResult{
			Name:   r.Package + "." + r.Name,
			Pass:   r.Pass(),
			Fail:   r.Fail,
			Skip:   r.Skip,
			Err:    r.Error,
			Output: string(r.Output),
		}
		if r.Location != nil {
			tr.Location = fmt.Sprintf("%s:%d", r.Location.File, r.Location.Row)
		}
		if tr.Name == "." {
			tr.Name = r.Name
		}
		if tr.Err != nil && errors.Is(context.Cause(ctx), ErrMemory) {
			// The budget cancels the whole run: the test running then
			// ran out, and no test starts after it.
			if stoppedBy == "" {
				stoppedBy = tr.Name
				tr.Err = fmt.Errorf("%w; the tests after it were not run", &MemoryError{Package: "test " + tr.Name, Files: []string{tr.Location}, Limit: budget})
			} else {
				tr.Err = fmt.Errorf("stopped: test %s %w before it", stoppedBy, ErrMemory)
			}
		}
		out = append(out, tr)
	}
	if len(out) == 0 {
		return nil, ErrNoTests
	}
	return out, nil
}

// noLimit is a test's time budget when it has none: a century.
const noLimit = 100 * 365 * 24 * time.Hour

// testsOf are the tests of mods the filter run selects, as results name
// them ("data.pkg.test_name"), each with where it is.
func testsOf(mods map[string]*ast.Module, run string) map[string]string {
	re, _ := regexp.Compile(run) // RunTests compiled it already
	out := map[string]string{}
	for file, m := range mods {
		for _, r := range m.Rules {
			// As OPA's runner finds them: the first term of the rule's
			// ground reference with a test's prefix (a.test_b too).
			ref := r.Head.Ref().GroundPrefix()
			for i, term := range ref {
				var n string
				switch v := term.Value.(type) {
				case ast.Var:
					n = string(v)
				case ast.String:
					n = string(v)
				}
				if !strings.HasPrefix(n, tester.TestPrefix) && !strings.HasPrefix(n, tester.SkipTestPrefix) {
					continue
				}
				name := m.Package.Path.Extend(ref[:i+1]).String()
				if re == nil || re.MatchString(name) {
					where := file
					if r.Location != nil {
						where = fmt.Sprintf("%s:%d", file, r.Location.Row)
					}
					out[name] = where
				}
				break
			}
		}
	}
	return out
}

// nextResult is the next test result of ch, nil when there is none. The
// tests are run by OPA's tester, each under the time budget, and all
// under the memory budget; a test in a built-in call that cannot be
// interrupted (stuck.go) is given up, as an evaluation is, with a
// StuckError naming the tests pending (one of them is the stuck one):
// when no test ended within timeout and stuckAfter of the last, or once
// the memory budget's guard gives the run up.
func nextResult(ctx context.Context, ch <-chan *tester.Result, timeout time.Duration, pending map[string]string, budget uint64) (*tester.Result, error) {
	after := stuckAfter()
	var idle <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout + after)
		defer t.Stop()
		idle = t.C
	}
	var given <-chan struct{}
	sig, _ := ctx.Value(stuckKey{}).(*stuckSignal)
	if sig != nil {
		given = sig.c
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, nil
		}
		return r, nil
	case <-idle:
		which, files := pendingTests(pending)
		return nil, &StuckError{Err: &TimeoutError{Package: which, Files: files, Limit: timeout}, After: after}
	case <-given:
		which, files := pendingTests(pending)
		if errors.Is(context.Cause(ctx), ErrMemory) {
			return nil, sig.give(&MemoryError{Package: which, Files: files, Limit: budget})
		}
		return nil, sig.give(fmt.Errorf("evaluate policies: %s stopped: %w", named(which, files), context.Cause(ctx)))
	}
}

// pendingTests names the tests without a result: "test NAME", or "one
// of the tests A, B, …" (five at most), and where they are.
func pendingTests(pending map[string]string) (string, []string) {
	names := slices.Sorted(maps.Keys(pending))
	var files []string
	for _, n := range names[:min(len(names), 5)] {
		files = append(files, pending[n])
	}
	switch {
	case len(names) == 0:
		return "a test", nil
	case len(names) == 1:
		return "test " + names[0], files
	case len(names) <= 5:
		return "one of the tests " + strings.Join(names, ", "), files
	}
	return fmt.Sprintf("one of the tests %s and %d more", strings.Join(names[:5], ", "), len(names)-5), files
}
