package policy

import (
	"context"
	"errors"
	"fmt"
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
	ctx, endMemory := withMemory(ctx, budget)
	defer endMemory()
	runner := tester.NewRunner()
	if cfg.Timeout > 0 {
		runner = runner.SetTimeout(cfg.Timeout)
	}
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
	for {
		r, err := nextResult(ctx, ch, cfg.Timeout, out, budget)
		if err != nil {
			return out, err
		}
		if r == nil {
			break
		}
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

// nextResult is the next test result of ch, nil when there is none. The
// tests are run by OPA's tester, each under the time budget, and all
// under the memory budget; a test in a built-in call that cannot be
// interrupted (stuck.go) is given up, as an evaluation is, with a
// StuckError: when no test ended within timeout and stuckAfter of the
// last, or once the memory budget's guard gives the run up.
func nextResult(ctx context.Context, ch <-chan *tester.Result, timeout time.Duration, done []TestResult, budget uint64) (*tester.Result, error) {
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
	which := "the first test"
	if len(done) > 0 {
		which = "the test after " + done[len(done)-1].Name
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return nil, nil
		}
		return r, nil
	case <-idle:
		return nil, &StuckError{Err: &TimeoutError{Package: which, Limit: timeout}, After: after}
	case <-given:
		s := &StuckError{Err: fmt.Errorf("evaluate policies: %w", context.Cause(ctx)), After: sig.after}
		if errors.Is(context.Cause(ctx), ErrMemory) {
			s.Err = &MemoryError{Package: which, Limit: budget}
		}
		if sig.ranAway {
			s.After = 0
		}
		return nil, s
	}
}
