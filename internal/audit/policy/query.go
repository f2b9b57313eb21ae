package policy

import (
	"context"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/topdown"
)

// A query is evaluated by OPA's evaluator (topdown) directly, not through
// its rego package: rego is a front end for every target OPA has, and
// linking it links them all (the Wasm compiler with its embedded
// runtime, the IR planner, bundle activation and the protobuf encodings
// they bring), about 2 MB of a binary that runs only topdown. The guest
// build, which the Packer plugin uploads into every image it builds, has
// a size bound; this keeps that code out of it. What rego adds for this
// one use, compiling the query against the compiled policies, evaluating
// it in a read transaction with a cancel tied to the context, and
// reporting the value of a query that is a bare term, is done here.

// preparedQuery is one compiled query, ready to evaluate for any input; safe for
// concurrent eval calls.
type preparedQuery struct {
	compiler *ast.Compiler
	qc       ast.QueryCompiler
	body     ast.Body
	store    storage.Store
	builtins map[string]*topdown.Builtin
	// result is the variable of body bound to the result, as the query
	// compiler renamed it.
	result ast.Var
}

// prepareQuery compiles src (Rego v1) against the policies c compiled,
// for evaluation over store. Its result is the value bound to resultVar,
// or the value of src when src is a single term (a reference such as
// data.amilint.findings), as rego reports it.
func prepareQuery(c *ast.Compiler, store storage.Store, src string) (*preparedQuery, error) {
	body, err := ast.ParseBodyWithOpts(src, ast.ParserOptions{RegoVersion: ast.RegoV1})
	if err != nil {
		return nil, err
	}
	if len(body) == 1 && !body[0].Negated && len(body[0].With) == 0 {
		if t, ok := body[0].Terms.(*ast.Term); ok {
			body = ast.NewBody(ast.Assign.Expr(ast.VarTerm(resultVar), t))
		}
	}
	qc := c.QueryCompiler().WithEnablePrintStatements(false).WithStrict(false)
	compiled, err := qc.Compile(body)
	if err != nil {
		return nil, err
	}
	q := &preparedQuery{compiler: c, qc: qc, body: compiled, store: store, builtins: map[string]*topdown.Builtin{markName: markBuiltin}}
	q.result = ast.Var(resultVar)
	for k, v := range qc.RewrittenVars() {
		if v == ast.Var(resultVar) {
			q.result = k
		}
	}
	return q, nil
}

// eval evaluates q over input and returns the term bound to its result in
// the first result, nil when there is no result or it binds none.
func (q *preparedQuery) eval(ctx context.Context, input ast.Value) (*ast.Term, error) {
	txn, err := q.store.NewTransaction(ctx)
	if err != nil {
		return nil, err
	}
	defer q.store.Abort(ctx, txn)
	cancel := topdown.NewCancel()
	stop := context.AfterFunc(ctx, cancel.Cancel)
	defer stop()
	tq := topdown.NewQuery(q.body).
		WithQueryCompiler(q.qc).
		WithCompiler(q.compiler).
		WithStore(q.store).
		WithTransaction(txn).
		WithBuiltins(q.builtins).
		WithStrictBuiltinErrors(true).
		WithCancel(cancel).
		WithInput(ast.NewTerm(input))
	var out *ast.Term
	first := true
	err = tq.Iter(ctx, func(r topdown.QueryResult) error {
		if first {
			first, out = false, r[q.result]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
