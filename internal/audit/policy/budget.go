package policy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/open-policy-agent/opa/v1/types"
)

// Policies are untrusted code: a shared policy repository is as much
// input as an image. Two bounds hold for every policy:
//
//   - the sandbox: policies are compiled with OPA capabilities that leave
//     out the built-ins reaching the network or the process environment
//     (Sandboxed); a policy calling one fails to compile, before anything
//     is evaluated. An OPA capabilities file (--policy-capabilities) opts
//     back in, as it does for `opa build` or `opa eval`;
//   - the budgets: one evaluation stops after Config.Timeout
//     (--policy-timeout), or once it holds more than Config.Memory of
//     heap (--policy-memory; memory.go), through the context OPA checks
//     at every step, and the error names the rule package that was
//     running.

// DefaultTimeout is the evaluation budget the CLI gives policies.
const DefaultTimeout = 30 * time.Second

// ErrTimeout reports an evaluation stopped by its budget.
var ErrTimeout = errors.New("ran out of time")

// Sandboxed returns the OPA built-ins the default capabilities leave out:
// they reach the network (http.send, net.lookup_ip_addr) or the process
// environment (opa.runtime, which holds every environment variable; CI
// and Packer runs keep cloud credentials there).
func Sandboxed() []string {
	return []string{"http.send", "net.lookup_ip_addr", "opa.runtime"}
}

// Sandbox returns the capabilities of this OPA version without the
// Sandboxed built-ins, and with no host http.send may reach.
func Sandbox() *ast.Capabilities {
	c := ast.CapabilitiesForThisVersion()
	deny := Sandboxed()
	c.Builtins = slices.DeleteFunc(c.Builtins, func(b *ast.Builtin) bool { return slices.Contains(deny, b.Name) })
	c.AllowNet = []string{}
	return c
}

// LoadCapabilities reads an OPA capabilities file (the JSON `opa
// capabilities --current` prints).
func LoadCapabilities(file string) (*ast.Capabilities, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("read policy capabilities %s: %w", file, err)
	}
	defer f.Close()
	c, err := ast.LoadCapabilitiesJSON(f)
	if err != nil {
		return nil, fmt.Errorf("read policy capabilities %s: %w", file, err)
	}
	return c, nil
}

// checkBuiltins refuses calls of OPA built-ins that caps leaves out,
// naming the built-in and where it is called. The compiler refuses them
// too, as "undefined function"; this says why.
func checkBuiltins(mods map[string]*ast.Module, caps *ast.Capabilities) error {
	allowed := make(map[string]bool, len(caps.Builtins))
	for _, b := range caps.Builtins {
		allowed[b.Name] = true
	}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(mods)) {
		m := mods[name]
		local := localNames(m)
		ast.NewGenericVisitor(func(x any) bool {
			var op *ast.Term
			switch v := x.(type) {
			case *ast.Expr:
				if v.IsCall() {
					op = v.Terms.([]*ast.Term)[0]
				}
			case ast.Call:
				if len(v) > 0 {
					op = v[0]
				}
			}
			if op == nil {
				return false
			}
			ref, ok := op.Value.(ast.Ref)
			if !ok || len(ref) == 0 {
				return false
			}
			bi := ref.String()
			if v, ok := ref[0].Value.(ast.Var); ok && local[string(v)] {
				return false // a function of the policy's own, or imported
			}
			if bi == markName {
				errs = append(errs, fmt.Errorf("compile policies: %s: %s is amilint's own and not for policies", where(name, op.Location), bi))
				return false
			}
			if _, known := ast.BuiltinMap[bi]; !known || allowed[bi] {
				return false
			}
			why := "it is not in the policy capabilities (--policy-capabilities)"
			if slices.Contains(Sandboxed(), bi) {
				why = "policies cannot reach the network or the process environment unless an OPA capabilities file given with --policy-capabilities allows it"
			}
			errs = append(errs, fmt.Errorf("compile policies: %s: built-in %s is not allowed: %s", where(name, op.Location), bi, why))
			return false
		}).Walk(m)
	}
	return errors.Join(errs...)
}

// localNames are the names a module's calls may resolve in the module
// itself: its rules' first names and its imports' aliases.
func localNames(m *ast.Module) map[string]bool {
	out := map[string]bool{}
	for _, r := range m.Rules {
		if ref := r.Head.Ref(); len(ref) > 0 {
			if v, ok := ref[0].Value.(ast.Var); ok {
				out[string(v)] = true
			}
		}
	}
	for _, imp := range m.Imports {
		if imp.Alias != "" {
			out[string(imp.Alias)] = true
			continue
		}
		if ref, ok := imp.Path.Value.(ast.Ref); ok && len(ref) > 0 {
			if s, ok := ref[len(ref)-1].Value.(ast.String); ok {
				out[string(s)] = true
			}
		}
	}
	return out
}

func where(file string, loc *ast.Location) string {
	if loc == nil {
		return file
	}
	return fmt.Sprintf("%s:%d", file, loc.Row)
}

// markName is the built-in the evaluated query calls before each rule
// family, so an evaluation that runs out of time can say which family was
// running. Policies may not call it (checkBuiltins).
const markName = "amilint.evaluating"

// resultVar binds the findings in a marked query.
const resultVar = "amilint_findings"

// withMark returns caps with the mark built-in added, caps unchanged.
func withMark(caps *ast.Capabilities) *ast.Capabilities {
	c := *caps
	c.Builtins = append(slices.Clip(caps.Builtins), &ast.Builtin{
		Name: markName,
		Decl: types.NewFunction(types.Args(types.S), types.B),
	})
	return &c
}

type progressKey struct{}

// markHook, when set (by tests only), is called at each mark, as a
// built-in call the evaluation cannot interrupt.
var markHook atomic.Pointer[func(ctx context.Context, family *ast.Term)]

// progress is what one evaluation is doing: the family markName last
// named. Evaluate reads it after the evaluation, or while it runs when it
// is stuck (stuckAfter).
type progress struct{ at atomic.Pointer[string] }

// running is the family p last named, "" before any.
func (p *progress) running() string {
	if s := p.at.Load(); s != nil {
		return *s
	}
	return ""
}

// markBuiltin is the mark built-in's implementation: it records the
// family named in the evaluation's progress and calls markHook.
var markBuiltin = &topdown.Builtin{
	Decl: &ast.Builtin{
		Name:             markName,
		Decl:             types.NewFunction(types.Args(types.S), types.B),
		Nondeterministic: true,
	},
	Func: func(bctx topdown.BuiltinContext, ops []*ast.Term, iter func(*ast.Term) error) error {
		if p, ok := bctx.Context.Value(progressKey{}).(*progress); ok {
			if s, ok := ops[0].Value.(ast.String); ok {
				name := string(s)
				p.at.Store(&name)
			}
		}
		if hook := markHook.Load(); hook != nil {
			(*hook)(bctx.Context, ops[0])
		}
		return iter(ast.BooleanTerm(true))
	},
}

// budget is how an Engine bounds and explains its evaluations.
type budget struct {
	timeout time.Duration
	memory  uint64
	// whole names what the query evaluates when no mark says more.
	whole string
	// files are the module names of each package the marks name.
	files map[string][]string
	// keys are the families' keys under data.amilint.rules, by the name
	// the marks give them; set for the entry point.
	keys map[string]string
}

// markedQuery returns the query to evaluate for query ("" is the entry
// point) over the policies c compiled, and how to explain its running out
// of time. The entry point is evaluated family by family in one query, a
// mark before each; the families' findings are cached inside the
// evaluation, so the final data.amilint.findings costs nothing more, and
// it stays the result (it is the contract, whatever a policy adds to it).
//
// With without (the keys of rule families under data.amilint.rules), the
// query "" is instead the union of the findings of every other family,
// each marked as the entry point's are.
func markedQuery(query string, without []string, c *ast.Compiler) (string, budget) {
	b := budget{whole: "query " + query, files: map[string][]string{}}
	keys := map[string]string{} // family's display name -> its key under data.amilint.rules
	for name, m := range c.Modules {
		p := m.Package.Path
		if len(p) > len(rulesPackage()) && p.HasPrefix(rulesPackage()) {
			fam := packageName(p[:len(rulesPackage())+1])
			b.files[fam] = append(b.files[fam], name)
			if s, ok := p[len(rulesPackage())].Value.(ast.String); ok {
				keys[fam] = string(s)
			}
		}
	}
	for _, fs := range b.files {
		slices.Sort(fs)
	}
	if query != "" {
		if r, err := ast.ParseRef(query); err == nil && len(r) == len(rulesPackage())+2 && r.HasPrefix(rulesPackage()) {
			b.whole = packageName(r[:len(rulesPackage())+1])
		}
		return query, b
	}
	b.whole = "package amilint"
	b.keys = keys
	if len(without) > 0 {
		maps.DeleteFunc(b.keys, func(_, key string) bool { return slices.Contains(without, key) })
		q, sets := b.familyClauses(c, slices.Sorted(maps.Keys(b.keys)), "%s")
		if len(sets) == 0 {
			sets = []string{"set()"}
		}
		return strings.Join(append(q, resultVar+" := "+strings.Join(sets, " | ")), "; "), b
	}
	// What a family's findings are does not matter here, only that they
	// are evaluated, without making the query undefined: count() of a set
	// of contains rules (always defined, empty or not) does that and
	// compiles in half the time of a comprehension, which any other family
	// gets.
	q, _ := b.familyClauses(c, slices.Sorted(maps.Keys(keys)), "count(%s)")
	q = append(q, fmt.Sprintf("%s(%s)", markName, strconv.Quote(b.whole)), resultVar+" := "+EntryPoint)
	return strings.Join(q, "; "), b
}

// familyClauses are the clauses that evaluate each of fams, named as the
// marks name them, in order: its mark, then amilint_familyN := form with
// its findings set (familySet) in place of %s; and the variables bound.
func (b budget) familyClauses(c *ast.Compiler, fams []string, form string) (clauses, vars []string) {
	for i, fam := range fams {
		v := fmt.Sprintf("amilint_family%d", i)
		clauses = append(clauses, fmt.Sprintf("%s(%s)", markName, strconv.Quote(fam)), v+" := "+fmt.Sprintf(form, familySet(c, b.keys[fam])))
		vars = append(vars, v)
	}
	return clauses, vars
}

// familySet is the set of the findings of the family under key in
// data.amilint.rules, as the entry point gathers them (every member of its
// findings): the document itself when it is a set of contains rules, else
// a comprehension.
func familySet(c *ast.Compiler, key string) string {
	ref := rulesPackage().Append(ast.StringTerm(key)).Append(ast.StringTerm("findings"))
	if onlyContains(c, ref) {
		return ref.String()
	}
	return fmt.Sprintf("{f | some f in %s}", ref)
}

// heavyFamilies are the built-in families evaluated on a core of their
// own when the catalog alone is evaluated: service-exposure is about 60%
// of the catalog's evaluation (a finding per exposed service).
var heavyFamilies = []string{"package amilint.rules.exposure"}

// splitQueries returns the queries that evaluate the entry point of the
// built-in catalog side by side, for an engine of the catalog alone: the
// heavy families, and the others, each marked as markedQuery marks them
// and binding resultVar to the union of its families' findings sets. The
// entry point of the catalog (main.rego) is exactly the union of every
// family's findings, so the parts' findings united are its findings. nil
// when the catalog has no heavy family, or nothing else.
func (b budget) splitQueries(c *ast.Compiler) []string {
	var heavy, rest []string
	for _, fam := range slices.Sorted(maps.Keys(b.keys)) {
		if slices.Contains(heavyFamilies, fam) {
			heavy = append(heavy, fam)
		} else {
			rest = append(rest, fam)
		}
	}
	if len(heavy) == 0 || len(rest) == 0 {
		return nil
	}
	var out []string
	for _, part := range [][]string{heavy, rest} {
		q, sets := b.familyClauses(c, part, "%s")
		out = append(out, strings.Join(append(q, resultVar+" := "+strings.Join(sets, " | ")), "; "))
	}
	return out
}

// onlyContains reports whether the document at ref is defined by
// multi-value ("contains") rules named by ref alone: a set, defined even
// when empty.
func onlyContains(c *ast.Compiler, ref ast.Ref) bool {
	rules := c.GetRulesWithPrefix(ref)
	if len(rules) == 0 || len(c.GetRulesForVirtualDocument(ref)) != len(rules) {
		return false
	}
	for _, r := range rules {
		if r.Head.RuleKind() != ast.MultiValue || !r.Ref().GroundPrefix().Equal(ref) || len(r.Head.Ref()) != 1 {
			return false
		}
	}
	return true
}

// packageName renders a package path as a package clause names it
// (data.amilint.rules.x → package amilint.rules.x).
func packageName(p ast.Ref) string {
	return "package " + strings.TrimPrefix(p.String(), "data.")
}

// start gives one evaluation its budgets and progress record.
func (b *budget) start(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx = context.WithValue(ctx, progressKey{}, &progress{})
	endTime := func() {}
	if b.timeout > 0 {
		ctx, endTime = context.WithTimeoutCause(ctx, b.timeout, ErrTimeout)
	}
	ctx, endMemory := withMemory(ctx, b.memory)
	ctx, endGuard := guard(ctx)
	return ctx, func() {
		endGuard()
		endMemory()
		endTime()
	}
}

// failed explains an evaluation error: running out of a budget is a
// TimeoutError or a MemoryError naming the package that was being
// evaluated.
func (b *budget) failed(ctx context.Context, err error) error {
	cause := context.Cause(ctx)
	pkg := b.whole
	if p, ok := ctx.Value(progressKey{}).(*progress); ok && p.running() != "" {
		pkg = p.running()
	}
	switch {
	case b.timeout > 0 && errors.Is(cause, ErrTimeout):
		return &TimeoutError{Package: pkg, Files: b.files[pkg], Limit: b.timeout}
	case b.memory > 0 && errors.Is(cause, ErrMemory):
		return &MemoryError{Package: pkg, Files: b.files[pkg], Limit: b.memory}
	case ctx.Err() != nil:
		// Stopped by the caller (a signal, an audit's deadline): say
		// what was running all the same.
		return fmt.Errorf("evaluate policies: %s stopped: %w", named(pkg, b.files[pkg]), context.Cause(ctx))
	}
	return fmt.Errorf("evaluate policies: %w", err)
}

// partsFailed is the error of a split evaluation from its parts' errors,
// nil when none failed. A budget stops every part at once, each in the
// package it was running, and the parts shared it: when several were
// stopped, the error names each package.
func partsFailed(errs []error) error {
	err := joinFailed(errs)
	// A part given up (stuck.go) makes the whole evaluation given up,
	// named by the budget's error when the budget stopped every part,
	// else by its own.
	for _, e := range errs {
		var s *StuckError
		if !errors.As(e, &s) || IsStuck(err) {
			continue
		}
		var me *MemoryError
		var te *TimeoutError
		if errors.As(err, &me) || errors.As(err, &te) {
			return &StuckError{Err: err, After: s.After}
		}
		return s
	}
	return err
}

// joinFailed is partsFailed before a part given up is accounted for.
func joinFailed(errs []error) error {
	var first error
	var mems []*MemoryError
	var times []*TimeoutError
	for _, err := range errs {
		if err == nil {
			continue
		}
		if first == nil {
			first = err
		}
		var me *MemoryError
		var te *TimeoutError
		switch {
		case errors.As(err, &me):
			mems = append(mems, me)
		case errors.As(err, &te):
			times = append(times, te)
		}
	}
	switch {
	case len(mems) > 1:
		pkg, files := joinStopped(mems, func(e *MemoryError) (string, []string) { return e.Package, e.Files })
		return &MemoryError{Package: pkg, Files: files, Limit: mems[0].Limit}
	case len(times) > 1:
		pkg, files := joinStopped(times, func(e *TimeoutError) (string, []string) { return e.Package, e.Files })
		return &TimeoutError{Package: pkg, Files: files, Limit: times[0].Limit}
	}
	return first
}

// joinStopped names the packages several parts were running, and their
// files, each once.
func joinStopped[E any](errs []E, of func(E) (string, []string)) (string, []string) {
	var pkgs, files []string
	for _, e := range errs {
		p, fs := of(e)
		if !slices.Contains(pkgs, p) {
			pkgs = append(pkgs, p)
		}
		for _, f := range fs {
			if !slices.Contains(files, f) {
				files = append(files, f)
			}
		}
	}
	return strings.Join(pkgs, " and "), files
}

// TimeoutError is an evaluation stopped by its budget.
type TimeoutError struct {
	// Package names what was being evaluated when time ran out: "package
	// amilint.rules.NAME", or "query …" when no package is known.
	Package string
	// Files are the package's policy files.
	Files []string
	// Limit is the budget.
	Limit time.Duration
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("evaluate policies: %s %s: stopped after %s (--policy-timeout)", named(e.Package, e.Files), ErrTimeout, e.Limit)
}

// named is what an error says was running: pkg, and its files in
// brackets when known.
func named(pkg string, files []string) string {
	if len(files) == 0 {
		return pkg
	}
	return pkg + " (" + strings.Join(files, ", ") + ")"
}

// Unwrap makes errors.Is(err, ErrTimeout) hold.
func (e *TimeoutError) Unwrap() error { return ErrTimeout }
