package policy

import (
	"bytes"
	"crypto/sha256"
	_ "embed" // the precompiled catalog
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/version"
)

// The built-in catalog is compiled when amilint is built, not on every
// run: OPA cannot save a compiler, so amilint saves what the compiler made
// of the catalog (its modules after every rewrite: refs resolved, bodies
// ordered for safety, local variables renamed, comprehensions hoisted) in
// precompiled.bin, and a run hands those modules to a compiler that skips
// the stages that made them, running only the ones that build the indices
// evaluation reads (module and rule trees, the dependency graph, rule and
// comprehension indices). TestPrecompiledCatalogIsCurrent rebuilds the
// file from a fresh compile and fails when it differs (go test
// ./internal/audit/policy -run Precompiled -update rewrites it); at run
// time the file is used only when the hash of the embedded sources and the
// OPA version it records match, so a stale file is never used.

//go:embed precompiled.bin
var precompiledBin []byte

// precompiledMagic starts the file; the version digit changes with the
// encoding.
const precompiledMagic = "amilint-precompiled-catalog/1\n"

// errPrecompiled reports a precompiled catalog that does not decode.
var errPrecompiled = errors.New("precompiled catalog")

// builtStages are the compiler stages a precompiled catalog still runs:
// the ones whose output is compiler state, not rewritten modules.
var builtStages = []ast.StageID{
	ast.StageInitLocalVarGen, ast.StageSetModuleTree, ast.StageSetRuleTree, ast.StageSetGraph,
	ast.StageBuildRuleIndices, ast.StageBuildComprehensionIndices,
}

// catalogKey is what a precompiled catalog must match: the OPA version
// and the embedded policy sources (tests excluded).
func catalogKey(srcs []Module) [32]byte {
	h := sha256.New()
	fmt.Fprintf(h, "opa %s\n", version.Version)
	for _, m := range slices.SortedFunc(slices.Values(srcs), func(a, b Module) int {
		return strings.Compare(a.Name, b.Name)
	}) {
		fmt.Fprintf(h, "%d %s %d\n", len(m.Name), m.Name, len(m.Source))
		h.Write([]byte(m.Source))
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// precompiledCatalog returns the compiler of the embedded catalog from
// precompiled.bin, or false when the file was not made from the embedded
// sources by this OPA version (the caller compiles the sources then).
func precompiledCatalog(caps *ast.Capabilities) (*ast.Compiler, bool, error) {
	srcs, err := DefaultModules(false)
	if err != nil {
		return nil, false, err
	}
	return loadPrecompiled(precompiledBin, catalogKey(srcs), caps)
}

// loadPrecompiled compiles the modules encoded in bin, if bin was made
// for key, running only builtStages.
func loadPrecompiled(bin []byte, key [32]byte, caps *ast.Capabilities) (*ast.Compiler, bool, error) {
	if !bytes.HasPrefix(bin, []byte(precompiledMagic)) || len(bin) < len(precompiledMagic)+32 ||
		!bytes.Equal(bin[len(precompiledMagic):len(precompiledMagic)+32], key[:]) {
		return nil, false, nil
	}
	_, mods, rewritten, err := decodeCatalog(bin)
	if err != nil {
		return nil, false, err
	}
	skip := slices.DeleteFunc(ast.AllStages(), func(s ast.StageID) bool { return slices.Contains(builtStages, s) })
	c := ast.NewCompiler().
		WithDefaultRegoVersion(ast.RegoV1).
		WithEnablePrintStatements(false).
		WithCapabilities(caps).
		WithSkipStages(skip...)
	if c.Compile(mods); c.Failed() {
		return nil, false, fmt.Errorf("load %w: %w", errPrecompiled, c.Errors)
	}
	maps.Copy(c.RewrittenVars, rewritten)
	return c, true, nil
}

// buildPrecompiled compiles the embedded catalog from its sources and
// encodes the result.
func buildPrecompiled() ([]byte, error) {
	srcs, err := DefaultModules(false)
	if err != nil {
		return nil, err
	}
	mods, err := ParseModules(srcs)
	if err != nil {
		return nil, err
	}
	c, err := Compile(mods, nil)
	if err != nil {
		return nil, err
	}
	return encodeCatalog(catalogKey(srcs), c.Modules, c.RewrittenVars)
}

// The encoding: the magic line, the 32-byte key, a string table, then
// the modules in name order and the rewritten variables. Numbers are
// unsigned varints; a string is its index in the table; a location is
// the index of its (file, row, col) in a location table, 0 for none.
// Every value carries a tag.
const (
	tagNull byte = iota
	tagTrue
	tagFalse
	tagNumber
	tagString
	tagVar
	tagRef
	tagArray
	tagObject
	tagSet
	tagArrayComp
	tagObjectComp
	tagSetComp
	tagCall
)

// Expression term kinds.
const (
	exprTerm byte = iota
	exprCall
	exprSome
	exprEvery
)

// locKey is a location as the file keeps it: no source text.
type locKey struct {
	file     string
	row, col int
}

type catalogEncoder struct {
	body    bytes.Buffer
	strs    []string
	strIdx  map[string]int
	locs    []locKey
	locIdx  map[locKey]int
	failure error
}

func encodeCatalog(key [32]byte, mods map[string]*ast.Module, rewritten map[ast.Var]ast.Var) ([]byte, error) {
	e := &catalogEncoder{strIdx: map[string]int{}, locIdx: map[locKey]int{}}
	names := slices.Sorted(maps.Keys(mods))
	e.uint(len(names))
	for _, n := range names {
		e.str(n)
		e.module(mods[n])
	}
	vars := slices.Sorted(maps.Keys(rewritten))
	e.uint(len(vars))
	for _, v := range vars {
		e.str(string(v))
		e.str(string(rewritten[v]))
	}
	if e.failure != nil {
		return nil, e.failure
	}
	var out bytes.Buffer
	out.WriteString(precompiledMagic)
	out.Write(key[:])
	head := &catalogEncoder{}
	head.uint(len(e.strs))
	for _, s := range e.strs {
		head.uint(len(s))
		head.body.WriteString(s)
	}
	head.uint(len(e.locs))
	for _, l := range e.locs {
		head.uint(e.strIdx[l.file])
		head.uint(l.row)
		head.uint(l.col)
	}
	out.Write(head.body.Bytes())
	out.Write(e.body.Bytes())
	return out.Bytes(), nil
}

func (e *catalogEncoder) uint(n int) {
	e.body.Write(binary.AppendUvarint(nil, uint64(n)))
}

func (e *catalogEncoder) str(s string) { e.uint(e.intern(s)) }

// intern returns the index of s in the string table, adding it.
func (e *catalogEncoder) intern(s string) int {
	i, ok := e.strIdx[s]
	if !ok {
		i = len(e.strs)
		e.strs = append(e.strs, s)
		e.strIdx[s] = i
	}
	return i
}

func (e *catalogEncoder) loc(l *ast.Location) {
	if l == nil {
		e.uint(0)
		return
	}
	k := locKey{file: l.File, row: l.Row, col: l.Col}
	i, ok := e.locIdx[k]
	if !ok {
		e.intern(l.File)
		i = len(e.locs)
		e.locs = append(e.locs, k)
		e.locIdx[k] = i
	}
	e.uint(i + 1)
}

func (e *catalogEncoder) flag(b bool) {
	if b {
		e.body.WriteByte(1)
	} else {
		e.body.WriteByte(0)
	}
}

func (e *catalogEncoder) module(m *ast.Module) {
	e.terms(m.Package.Path)
	e.loc(m.Package.Location)
	e.uint(len(m.Rules))
	for _, r := range m.Rules {
		e.rule(r)
	}
}

func (e *catalogEncoder) rule(r *ast.Rule) {
	e.flag(r.Default)
	e.loc(r.Location)
	h := r.Head
	e.str(string(h.Name))
	e.terms(h.Reference)
	e.terms(h.Args)
	e.optTerm(h.Key)
	e.optTerm(h.Value)
	e.flag(h.Assign)
	e.loc(h.Location)
	e.body_(r.Body)
	e.flag(r.Else != nil)
	if r.Else != nil {
		e.rule(r.Else)
	}
}

func (e *catalogEncoder) body_(b ast.Body) {
	e.uint(len(b))
	for _, x := range b {
		e.expr(x)
	}
}

func (e *catalogEncoder) expr(x *ast.Expr) {
	e.uint(x.Index)
	e.flag(x.Generated)
	e.flag(x.Negated)
	e.loc(x.Location)
	switch t := x.Terms.(type) {
	case *ast.Term:
		e.body.WriteByte(exprTerm)
		e.term(t)
	case []*ast.Term:
		e.body.WriteByte(exprCall)
		e.terms(t)
	case *ast.SomeDecl:
		e.body.WriteByte(exprSome)
		e.terms(t.Symbols)
		e.loc(t.Location)
	case *ast.Every:
		e.body.WriteByte(exprEvery)
		e.optTerm(t.Key)
		e.optTerm(t.Value)
		e.term(t.Domain)
		e.body_(t.Body)
		e.loc(t.Location)
	default:
		e.fail("expression %v: terms of type %T", x, x.Terms)
	}
	e.uint(len(x.With))
	for _, w := range x.With {
		e.term(w.Target)
		e.term(w.Value)
		e.loc(w.Location)
	}
}

func (e *catalogEncoder) fail(format string, args ...any) {
	if e.failure == nil {
		e.failure = fmt.Errorf("encode %w: "+format, append([]any{errPrecompiled}, args...)...)
	}
}

func (e *catalogEncoder) optTerm(t *ast.Term) {
	e.flag(t != nil)
	if t != nil {
		e.term(t)
	}
}

func (e *catalogEncoder) terms(ts []*ast.Term) {
	e.uint(len(ts))
	for _, t := range ts {
		e.term(t)
	}
}

func (e *catalogEncoder) term(t *ast.Term) {
	e.loc(t.Location)
	switch v := t.Value.(type) {
	case ast.Null:
		e.body.WriteByte(tagNull)
	case ast.Boolean:
		if v {
			e.body.WriteByte(tagTrue)
		} else {
			e.body.WriteByte(tagFalse)
		}
	case ast.Number:
		e.body.WriteByte(tagNumber)
		e.str(string(v))
	case ast.String:
		e.body.WriteByte(tagString)
		e.str(string(v))
	case ast.Var:
		e.body.WriteByte(tagVar)
		e.str(string(v))
	case ast.Ref:
		e.body.WriteByte(tagRef)
		e.terms(v)
	case *ast.Array:
		e.body.WriteByte(tagArray)
		n := v.Len()
		e.uint(n)
		for i := range n {
			e.term(v.Elem(i))
		}
	case ast.Object:
		e.body.WriteByte(tagObject)
		keys := v.Keys()
		e.uint(len(keys))
		for _, k := range keys {
			e.term(k)
			e.term(v.Get(k))
		}
	case ast.Set:
		e.body.WriteByte(tagSet)
		e.terms(v.Slice())
	case *ast.ArrayComprehension:
		e.body.WriteByte(tagArrayComp)
		e.term(v.Term)
		e.body_(v.Body)
	case *ast.ObjectComprehension:
		e.body.WriteByte(tagObjectComp)
		e.term(v.Key)
		e.term(v.Value)
		e.body_(v.Body)
	case *ast.SetComprehension:
		e.body.WriteByte(tagSetComp)
		e.term(v.Term)
		e.body_(v.Body)
	case ast.Call:
		e.body.WriteByte(tagCall)
		e.terms(v)
	default:
		e.fail("term %v: value of type %T", t, t.Value)
	}
}

// catalogDecoder reads what catalogEncoder writes. The input is amilint's
// own embedded file, but it is still bounds-checked: a bad file is an
// error, never a panic.
type catalogDecoder struct {
	b    []byte
	strs []string
	locs []*ast.Location
	err  error
}

func decodeCatalog(b []byte) (key [32]byte, mods map[string]*ast.Module, rewritten map[ast.Var]ast.Var, err error) {
	if !bytes.HasPrefix(b, []byte(precompiledMagic)) || len(b) < len(precompiledMagic)+32 {
		return key, nil, nil, fmt.Errorf("decode %w: not a precompiled catalog", errPrecompiled)
	}
	b = b[len(precompiledMagic):]
	copy(key[:], b)
	d := &catalogDecoder{b: b[32:]}
	d.strs = make([]string, d.count())
	for i := range d.strs {
		n := d.count()
		if d.err == nil {
			d.strs[i] = string(d.b[:n])
			d.b = d.b[n:]
		}
	}
	d.locs = make([]*ast.Location, d.count())
	for i := range d.locs {
		d.locs[i] = &ast.Location{File: d.str(), Row: d.uint(), Col: d.uint()}
	}
	n := d.count()
	mods = make(map[string]*ast.Module, n)
	for range n {
		if d.err != nil {
			break
		}
		name := d.str()
		mods[name] = d.module()
	}
	n = d.count()
	rewritten = make(map[ast.Var]ast.Var, n)
	for range n {
		k := d.str()
		rewritten[ast.Var(k)] = ast.Var(d.str())
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the catalog", len(d.b))
	}
	if d.err != nil {
		return key, nil, nil, d.err
	}
	return key, mods, rewritten, nil
}

func (d *catalogDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("decode %w: "+format, append([]any{errPrecompiled}, args...)...)
	}
	d.b = nil
}

func (d *catalogDecoder) uint() int {
	v, n := binary.Uvarint(d.b)
	if n <= 0 || v > 1<<30 {
		d.fail("bad number")
		return 0
	}
	d.b = d.b[n:]
	return int(v)
}

// count is a number of items still to read, each at least a byte.
func (d *catalogDecoder) count() int {
	n := d.uint()
	if n > len(d.b) {
		d.fail("count %d past the end", n)
		return 0
	}
	return n
}

func (d *catalogDecoder) byte_() byte {
	if len(d.b) == 0 {
		d.fail("unexpected end")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *catalogDecoder) flag() bool { return d.byte_() == 1 }

func (d *catalogDecoder) str() string {
	i := d.uint()
	if i >= len(d.strs) {
		d.fail("string %d of %d", i, len(d.strs))
		return ""
	}
	return d.strs[i]
}

func (d *catalogDecoder) loc() *ast.Location {
	i := d.uint()
	if i == 0 {
		return nil
	}
	if i > len(d.locs) {
		d.fail("location %d of %d", i, len(d.locs))
		return nil
	}
	return d.locs[i-1]
}

func (d *catalogDecoder) module() *ast.Module {
	m := &ast.Module{Package: &ast.Package{}}
	m.Package.Path = d.terms()
	m.Package.Location = d.loc()
	m.Rules = make([]*ast.Rule, d.count())
	for i := range m.Rules {
		m.Rules[i] = d.rule(m)
	}
	m.SetRegoVersionSpan(ast.RegoVersionSpanOf(ast.RegoV1))
	return m
}

func (d *catalogDecoder) rule(m *ast.Module) *ast.Rule {
	r := &ast.Rule{Module: m, Default: d.flag(), Location: d.loc(), Head: &ast.Head{}}
	r.Head.Name = ast.Var(d.str())
	r.Head.Reference = d.terms()
	if args := d.terms(); len(args) > 0 {
		r.Head.Args = args
	}
	r.Head.Key = d.optTerm()
	r.Head.Value = d.optTerm()
	r.Head.Assign = d.flag()
	r.Head.Location = d.loc()
	r.Body = d.body()
	if d.flag() && d.err == nil {
		r.Else = d.rule(m)
	}
	return r
}

func (d *catalogDecoder) body() ast.Body {
	b := make(ast.Body, d.count())
	for i := range b {
		b[i] = d.expr()
	}
	return b
}

func (d *catalogDecoder) expr() *ast.Expr {
	x := &ast.Expr{Index: d.uint(), Generated: d.flag(), Negated: d.flag(), Location: d.loc()}
	switch k := d.byte_(); k {
	case exprTerm:
		x.Terms = d.term()
	case exprCall:
		x.Terms = d.terms()
	case exprSome:
		x.Terms = &ast.SomeDecl{Symbols: d.terms(), Location: d.loc()}
	case exprEvery:
		ev := &ast.Every{Key: d.optTerm(), Value: d.optTerm(), Domain: d.term()}
		ev.Body = d.body()
		ev.Location = d.loc()
		x.Terms = ev
	default:
		d.fail("expression kind %d", k)
	}
	if n := d.count(); n > 0 {
		x.With = make([]*ast.With, n)
		for i := range x.With {
			x.With[i] = &ast.With{Target: d.term(), Value: d.term(), Location: d.loc()}
		}
	}
	return x
}

func (d *catalogDecoder) optTerm() *ast.Term {
	if !d.flag() {
		return nil
	}
	return d.term()
}

func (d *catalogDecoder) terms() []*ast.Term {
	n := d.count()
	if n == 0 {
		return nil
	}
	ts := make([]*ast.Term, n)
	for i := range ts {
		ts[i] = d.term()
	}
	return ts
}

func (d *catalogDecoder) term() *ast.Term {
	t := &ast.Term{Location: d.loc()}
	switch tag := d.byte_(); tag {
	case tagNull:
		t.Value = ast.Null{}
	case tagTrue:
		t.Value = ast.Boolean(true)
	case tagFalse:
		t.Value = ast.Boolean(false)
	case tagNumber:
		t.Value = ast.Number(d.str())
	case tagString:
		t.Value = ast.String(d.str())
	case tagVar:
		t.Value = ast.Var(d.str())
	case tagRef:
		t.Value = ast.Ref(d.terms())
	case tagArray:
		t.Value = ast.NewArray(d.terms()...)
	case tagObject:
		n := d.count()
		pairs := make([][2]*ast.Term, n)
		for i := range pairs {
			pairs[i] = [2]*ast.Term{d.term(), d.term()}
		}
		t.Value = ast.NewObject(pairs...)
	case tagSet:
		t.Value = ast.NewSet(d.terms()...)
	case tagArrayComp:
		t.Value = &ast.ArrayComprehension{Term: d.term(), Body: d.body()}
	case tagObjectComp:
		t.Value = &ast.ObjectComprehension{Key: d.term(), Value: d.term(), Body: d.body()}
	case tagSetComp:
		t.Value = &ast.SetComprehension{Term: d.term(), Body: d.body()}
	case tagCall:
		t.Value = ast.Call(d.terms())
	default:
		d.fail("term tag %d", tag)
		t.Value = ast.Null{}
	}
	return t
}
