// Package policy owns the evaluation of Rego policies over a facts
// document: loading the embedded defaults and the user's policies,
// compiling and preparing them once, evaluating the one entry point
// data.amilint.findings, and running Rego unit tests in-process. It uses
// OPA v1 with Rego v1 syntax only. It never reads the image; the only files
// it reads are the policy and data files the user names.
package policy

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/util"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/audit/userfile"
	"github.com/amilint/amilint/policies"
)

// EntryPoint is the one query amilint evaluates.
const EntryPoint = "data.amilint.findings"

// ErrNoPolicies reports a policy directory without any .rego file.
var ErrNoPolicies = errors.New("no policies found")

// Config says what to load.
type Config struct {
	// PolicyDirs are the user's policy directories (--policy); their
	// .rego files are added to the embedded defaults.
	PolicyDirs []string
	// DataFiles are JSON or YAML files (--data) merged under data.user.
	DataFiles []string
	// Rules is the rule catalog keyed by rule id, as JSON-shaped values;
	// policies see it as data.rules.
	Rules map[string]any
	// Profiles are the role profiles keyed by name (data.profiles).
	Profiles map[string]any
	// Profile is the selected profile (data.params.profile), "" for none.
	Profile string
	// Target is the audited target's name (data.params.target).
	Target string
	// Traits are the audited image's traits (data.params.traits, sorted):
	// the selected profile's and the user's (--trait).
	Traits []string
	// Params are more parameters under data.params (a live audit's
	// thresholds under "live"); profile, target and traits cannot be
	// overridden.
	Params map[string]any
	// Query, when set, is the Rego query evaluated instead of EntryPoint;
	// its value must be a set or array of finding objects (a live audit
	// evaluates one rule family per query).
	Query string
	// Without, with Query empty, evaluates instead of EntryPoint the union
	// of the findings of every rule family but these (their keys under
	// data.amilint.rules: "live"), family by family as EntryPoint is, so
	// that a budget that stops it names the family's package.
	Without []string
	// Timeout bounds one evaluation (--policy-timeout); 0 is no bound.
	Timeout time.Duration
	// Memory bounds the heap one evaluation may grow by, in bytes
	// (--policy-memory); 0 is no bound, AutoMemory DefaultMemory(). It is
	// the process's heap: evaluations running side by side share the
	// budget (memory.go).
	Memory uint64
	// Capabilities are the OPA capabilities every policy is compiled
	// with (--policy-capabilities); nil is Sandbox().
	Capabilities *ast.Capabilities
}

// Engine is a prepared policy set. It is safe for concurrent Evaluate calls.
type Engine struct {
	// parts are the queries evaluated, side by side, their findings
	// united: the marked query (markedQuery) alone, or for the entry point
	// of the built-in catalog alone on a machine of several cores, its
	// families in parts (splitQueries).
	parts   []*preparedQuery
	modules int
	budget
	// catalogOnly: the input leaves out what the catalog does not read.
	catalogOnly bool
}

// Module is one Rego source file.
type Module struct {
	Name   string
	Source string
}

// DefaultModules returns the embedded policy files; with tests, their
// _test.rego files too.
func DefaultModules(tests bool) ([]Module, error) {
	return fsModules(policies.FS, "embedded:", tests)
}

func fsModules(fsys fs.FS, prefix string, tests bool) ([]Module, error) {
	var mods []Module
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || path.Ext(p) != ".rego" || (!tests && isTest(p)) {
			return nil
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		mods = append(mods, Module{Name: prefix + p, Source: string(b)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read policies: %w", err)
	}
	return mods, nil
}

func isTest(p string) bool { return strings.HasSuffix(p, "_test.rego") }

// DirModules reads every .rego file under dir (recursively), tests only
// when tests is set. A directory without any .rego file is ErrNoPolicies.
func DirModules(dir string, tests bool) ([]Module, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("read policies %s: %w", dir, err)
	}
	var mods []Module
	if !fi.IsDir() {
		if filepath.Ext(dir) != ".rego" {
			return nil, fmt.Errorf("read policies %s: not a directory or .rego file", dir)
		}
		b, err := userfile.Read(dir)
		if err != nil {
			return nil, fmt.Errorf("read policies %s: %w", dir, err)
		}
		return []Module{{Name: dir, Source: string(b)}}, nil
	}
	all := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || filepath.Ext(p) != ".rego" {
			return nil
		}
		all++
		if !tests && isTest(p) {
			return nil
		}
		b, err := userfile.Read(p)
		if err != nil {
			return err
		}
		mods = append(mods, Module{Name: p, Source: string(b)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read policies %s: %w", dir, err)
	}
	if all == 0 {
		return nil, fmt.Errorf("read policies %s: %w", dir, ErrNoPolicies)
	}
	return mods, nil
}

// ParseModules parses sources as Rego v1 with annotations, reporting every
// parse error at once.
func ParseModules(mods []Module) (map[string]*ast.Module, error) {
	out := make(map[string]*ast.Module, len(mods))
	var errs []error
	for _, m := range mods {
		if _, dup := out[m.Name]; dup {
			errs = append(errs, fmt.Errorf("parse %s: loaded twice", m.Name))
			continue
		}
		pm, err := ast.ParseModuleWithOpts(m.Name, m.Source, ast.ParserOptions{
			RegoVersion:       ast.RegoV1,
			ProcessAnnotation: true,
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("parse %s: %w", m.Name, err))
			continue
		}
		out[m.Name] = pm
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// Compile compiles parsed modules with the capabilities caps (nil:
// Sandbox()), reporting every compile error.
func Compile(mods map[string]*ast.Module, caps *ast.Capabilities) (*ast.Compiler, error) {
	if caps == nil {
		caps = Sandbox()
	}
	if err := checkBuiltins(mods, caps); err != nil {
		return nil, err
	}
	c := ast.NewCompiler().
		WithDefaultRegoVersion(ast.RegoV1).
		WithEnablePrintStatements(false).
		WithCapabilities(withMark(caps))
	if c.Compile(mods); c.Failed() {
		return nil, fmt.Errorf("compile policies: %w", c.Errors)
	}
	return c, nil
}

// New loads, compiles and prepares the policies of cfg once.
func New(ctx context.Context, cfg Config) (*Engine, error) {
	p, err := Load(cfg)
	if err != nil {
		return nil, err
	}
	return p.Engine(ctx, cfg)
}

// Compiled is a compiled policy set. The Engines made from it, for other
// data (target names, parameters) or queries, share its compiler, so a
// run compiles its policies once however many targets and queries it
// evaluates.
type Compiled struct {
	compiler *ast.Compiler
	// catalogOnly: no user policy is loaded, so no policy reads what the
	// catalog does not (unreadByCatalog).
	catalogOnly bool
}

// CatalogOnly reports whether policies loaded with these --policy
// directories are the built-in catalog alone, whose engine is given only
// what the catalog reads (unreadByCatalog): no service's security checks,
// for one.
func CatalogOnly(policyDirs []string) bool { return len(policyDirs) == 0 }

// Load loads and compiles the policies cfg names: PolicyDirs and
// Capabilities; the rest of cfg is for Engine. The built-in catalog alone,
// under the default capabilities, is not compiled again: it comes
// compiled from the build (precompiled.bin).
func Load(cfg Config) (*Compiled, error) {
	if len(cfg.PolicyDirs) == 0 && cfg.Capabilities == nil {
		c, ok, err := precompiledCatalog(withMark(Sandbox()))
		if err != nil {
			return nil, err
		}
		if ok {
			return &Compiled{compiler: c, catalogOnly: true}, nil
		}
	}
	srcs, err := DefaultModules(false)
	if err != nil {
		return nil, err
	}
	userDirs := map[string][]string{} // dir -> its module names
	for _, d := range cfg.PolicyDirs {
		m, err := DirModules(d, false)
		if err != nil {
			return nil, err
		}
		for _, x := range m {
			userDirs[d] = append(userDirs[d], x.Name)
		}
		srcs = append(srcs, m...)
	}
	if len(srcs) == 0 {
		return nil, fmt.Errorf("load policies: %w", ErrNoPolicies)
	}
	mods, err := ParseModules(srcs)
	if err != nil {
		return nil, err
	}
	if err := checkUserPackages(userDirs, mods); err != nil {
		return nil, err
	}
	c, err := Compile(mods, cfg.Capabilities)
	if err != nil {
		return nil, err
	}
	if len(c.GetRulesForVirtualDocument(ast.MustParseRef(EntryPoint))) == 0 {
		return nil, fmt.Errorf("load policies: no rule defines %s", EntryPoint)
	}
	return &Compiled{compiler: c, catalogOnly: CatalogOnly(cfg.PolicyDirs)}, nil
}

// Engine prepares the compiled policies for the data and query of cfg
// (its PolicyDirs and Capabilities are Load's).
func (p *Compiled) Engine(ctx context.Context, cfg Config) (*Engine, error) {
	data, err := Data(cfg)
	if err != nil {
		return nil, err
	}
	query, b := markedQuery(cfg.Query, cfg.Without, p.compiler)
	b.timeout, b.memory = cfg.Timeout, memoryBudget(cfg.Memory)
	store := newStore(data)
	prepare := func(src string) (*preparedQuery, error) {
		q, err := prepareQuery(p.compiler, store, src)
		if err != nil {
			return nil, fmt.Errorf("prepare policies: %w", err)
		}
		return q, nil
	}
	e := &Engine{modules: len(p.compiler.Modules), budget: b, catalogOnly: p.catalogOnly}
	var parts []string
	if p.catalogOnly && cfg.Query == "" && runtime.GOMAXPROCS(0) > 1 {
		parts = b.splitQueries(p.compiler)
	}
	if parts == nil {
		parts = []string{query}
	}
	for _, q := range parts {
		pq, err := prepare(q)
		if err != nil {
			return nil, err
		}
		e.parts = append(e.parts, pq)
	}
	return e, nil
}

// rulesPackage is where findings are gathered from; parsed on first use,
// not at every program start.
var rulesPackage = sync.OnceValue(func() ast.Ref { return ast.MustParseRef("data.amilint.rules") })

// checkUserPackages fails when a --policy directory declares no package
// under amilint.rules, or no findings rule in them: its rules would never
// be evaluated (a conftest-style "package main" with deny rules, or a
// "finding" typo), and saying so beats silence.
func checkUserPackages(dirs map[string][]string, mods map[string]*ast.Module) error {
	var errs []error
	for d, names := range dirs {
		under, defines := false, false
		for _, n := range names {
			m := mods[n]
			if m == nil || !m.Package.Path.HasPrefix(rulesPackage()) || len(m.Package.Path) <= len(rulesPackage()) {
				continue
			}
			under = true
			for _, r := range m.Rules {
				if ref := r.Head.Ref(); len(ref) > 0 && ref[0].Value.Compare(ast.Var("findings")) == 0 {
					defines = true
				}
			}
		}
		switch {
		case !under:
			errs = append(errs, fmt.Errorf("load policies %s: no package under amilint.rules; amilint evaluates data.amilint.rules.NAME.findings only", d))
		case !defines:
			// A typo (finding, deny) would otherwise pass every image.
			errs = append(errs, fmt.Errorf("load policies %s: no rule named findings in its amilint.rules packages; amilint evaluates data.amilint.rules.NAME.findings only", d))
		}
	}
	return errors.Join(errs...)
}

// Modules returns how many policy modules the engine holds.
func (e *Engine) Modules() int { return e.modules }

// Data builds the base data document policies see: data.rules,
// data.profiles, data.params and data.user (the merged --data files).
func Data(cfg Config) (map[string]any, error) {
	user := map[string]any{}
	for _, f := range cfg.DataFiles {
		b, err := userfile.Read(f)
		if err != nil {
			return nil, fmt.Errorf("read data %s: %w", f, err)
		}
		var v any
		if err := util.Unmarshal(b, &v); err != nil {
			return nil, fmt.Errorf("read data %s: %w", f, err)
		}
		if err := CheckNumbers(v); err != nil {
			return nil, fmt.Errorf("read data %s: %w", f, err)
		}
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("read data %s: top level is not an object", f)
		}
		if err := mergeInto(user, obj); err != nil {
			return nil, fmt.Errorf("read data %s: %w", f, err)
		}
	}
	d := map[string]any{
		"rules":    orEmpty(cfg.Rules),
		"profiles": orEmpty(cfg.Profiles),
		"params":   params(cfg),
		"user":     user,
	}
	// The store wants JSON-shaped values: round-trip whatever the caller
	// gave that is not (the parameters, say); the rules and profiles of
	// rules.Data and the user's data files already are, and are large.
	for k, v := range d {
		if !jsonShaped(v) {
			if err := util.RoundTrip(&v); err != nil {
				return nil, fmt.Errorf("build policy data: %w", err)
			}
			d[k] = v
		}
	}
	return d, nil
}

// jsonShaped reports whether v is what OPA's util.UnmarshalJSON returns:
// nil, bool, string, json.Number, and []any and map[string]any of those.
func jsonShaped(v any) bool {
	switch v := v.(type) {
	case nil, bool, string, json.Number:
		return true
	case []any:
		for _, x := range v {
			if !jsonShaped(x) {
				return false
			}
		}
		return true
	case map[string]any:
		for _, x := range v {
			if !jsonShaped(x) {
				return false
			}
		}
		return true
	}
	return false
}

// params is data.params before Data's JSON round trip, which turns the
// traits into a JSON array; they are copied non-nil, so none is [], not null.
func params(cfg Config) map[string]any {
	p := make(map[string]any, len(cfg.Params)+3)
	maps.Copy(p, cfg.Params)
	p["profile"], p["target"], p["traits"] = cfg.Profile, cfg.Target, append([]string{}, cfg.Traits...)
	return p
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// mergeInto merges src into dst; objects merge key by key, anything else
// present in both is a conflict.
func mergeInto(dst, src map[string]any) error {
	for k, v := range src {
		old, ok := dst[k]
		if !ok {
			dst[k] = v
			continue
		}
		om, ok1 := old.(map[string]any)
		nm, ok2 := v.(map[string]any)
		if !ok1 || !ok2 {
			return fmt.Errorf("key %q defined twice", k)
		}
		if err := mergeInto(om, nm); err != nil {
			return fmt.Errorf("%s.%w", k, err)
		}
	}
	return nil
}

// Evaluate evaluates the entry point over input (the facts document, any
// value with its JSON form, or that form as json.RawMessage) and returns
// the findings, sorted by rule id, unit and message. An evaluation stuck
// in a built-in call once stopped is given up (IsStuck, stuck.go): the
// call still runs, and the process should exit.
func (e *Engine) Evaluate(ctx context.Context, input any) ([]finding.Finding, error) {
	t, err := e.term(ctx, input)
	if err != nil {
		return nil, err
	}
	return findingsOf(t, true)
}

// term evaluates the query over input, within the engine's budget, and
// returns the term holding the findings, nil when the query has none.
func (e *Engine) term(ctx context.Context, input any) (*ast.Term, error) {
	v, err := e.input(input)
	if err != nil {
		return nil, err
	}
	ctx, done := e.start(ctx)
	defer done()
	return e.result(ctx, v)
}

// findingsOf is the findings of t (nil: none): out of OPA's value directly
// when direct (directFindings) and it can, else the whole way through
// encoding/json (decodeFindings), converted as rego converts results.
func findingsOf(t *ast.Term, direct bool) ([]finding.Finding, error) {
	if t == nil {
		return []finding.Finding{}, nil
	}
	if direct {
		if fs, ok := directFindings(t.Value); ok {
			return sortFindings(fs), nil
		}
	}
	x, err := ast.JSON(t.Value)
	if err != nil {
		return nil, fmt.Errorf("evaluate policies: %w", err)
	}
	return decodeFindings(x)
}

// input is the Rego input of input for this engine.
func (e *Engine) input(input any) (ast.Value, error) {
	omit := whole
	if e.catalogOnly {
		omit = unreadByCatalog()
	}
	return inputValue(input, omit)
}

// result evaluates the query over v in ctx (which start made) and returns
// the term holding the findings, nil when the query has none. The parts of
// a split query are evaluated on goroutines of their own, each with its
// own progress record, and their findings sets united.
func (e *Engine) result(ctx context.Context, v ast.Value) (*ast.Term, error) {
	if len(e.parts) == 1 {
		return e.partResult(ctx, e.parts[0], v)
	}
	type out struct {
		t   *ast.Term
		err error
	}
	outs := make([]out, len(e.parts))
	var wg sync.WaitGroup
	for i, pq := range e.parts {
		wg.Go(func() {
			pctx := context.WithValue(ctx, progressKey{}, &progress{})
			outs[i].t, outs[i].err = e.partResult(pctx, pq, v)
		})
	}
	wg.Wait()
	errs := make([]error, len(outs))
	for i, o := range outs {
		errs[i] = o.err
	}
	if err := partsFailed(errs); err != nil {
		return nil, err
	}
	union := ast.NewSet()
	for _, o := range outs {
		// Each part binds a union of sets: defined, and a set term.
		if o.t == nil {
			return nil, fmt.Errorf("evaluate policies: a part of the catalog gave no set of findings")
		}
		s, ok := o.t.Value.(ast.Set)
		if !ok {
			return nil, fmt.Errorf("evaluate policies: a part of the catalog gave %s, not a set of findings", ast.ValueName(o.t.Value))
		}
		union = union.Union(s)
	}
	return ast.NewTerm(union), nil
}

// partResult is the result of one query: its result's term, as it is,
// nil when it has none.
func (e *Engine) partResult(ctx context.Context, q *preparedQuery, v ast.Value) (*ast.Term, error) {
	t, err := bounded(ctx, func() (*ast.Term, error) {
		return q.eval(ctx, v)
	}, func(err error) error { return e.failed(ctx, err) })
	if err != nil {
		if IsStuck(err) {
			return nil, err
		}
		return nil, e.failed(ctx, err)
	}
	return t, nil
}

// inputValue converts input to the Rego value of its JSON form: Go values
// directly (goValue, pruned by omit),
// json.RawMessage through the fast decoder; both are several times
// cheaper than OPA's generic round trip. An ast.Value is used as is.
func inputValue(input any, omit prune) (ast.Value, error) {
	var b []byte
	switch in := input.(type) {
	case ast.Value:
		return in, nil
	case json.RawMessage:
		b = in
	default:
		v, err := prunedGoValue(input, omit)
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, errNotJSONShaped) {
			return nil, fmt.Errorf("evaluate policies: %w", err)
		}
		if b, err = json.Marshal(input); err != nil {
			return nil, fmt.Errorf("evaluate policies: encode input: %w", err)
		}
	}
	v, err := decodeJSON(b)
	switch {
	case err == nil:
		return v, nil
	case errors.Is(err, ErrNumberRange):
		return nil, fmt.Errorf("evaluate policies: decode input: %w", err)
	}
	// Not the JSON the fast decoder takes: let OPA's decoder judge it.
	v, err = ast.ValueFromReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("evaluate policies: decode input: %w", err)
	}
	return v, nil
}

// decodeFindings decodes the findings from v, the Go value of the
// result (as ast.JSON makes it), through encoding/json; see findings.go.
func decodeFindings(v any) ([]finding.Finding, error) {
	items, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("evaluate policies: %s is %T, want a set of objects", EntryPoint, v)
	}
	out := make([]finding.Finding, 0, len(items))
	var errs []error
	for i, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			errs = append(errs, fmt.Errorf("finding %d: %w", i, err))
			continue
		}
		var f finding.Finding
		if err := json.Unmarshal(b, &f); err != nil {
			errs = append(errs, fmt.Errorf("finding %s: %w", truncate(string(b)), err))
			continue
		}
		if !complete(&f) {
			errs = append(errs, fmt.Errorf("finding %s: rule_id and message are required", truncate(string(b))))
			continue
		}
		out = append(out, f)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("evaluate policies: %w", err)
	}
	return sortFindings(out), nil
}

// sortFindings sorts fs by rule id, unit and message, keeping the order
// of equal ones, and returns it.
func sortFindings(out []finding.Finding) []finding.Finding {
	slices.SortStableFunc(out, func(a, b finding.Finding) int {
		return cmp.Or(
			strings.Compare(a.RuleID, b.RuleID),
			strings.Compare(a.Unit, b.Unit),
			strings.Compare(a.Message, b.Message),
		)
	})
	return out
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}

// newStore is the store of data as Data builds it (already JSON-shaped, so
// the store need not round-trip it again).
func newStore(data map[string]any) storage.Store {
	return inmem.NewFromObjectWithOpts(data, inmem.OptRoundTripOnWrite(false), inmem.OptReturnASTValuesOnRead(true))
}
