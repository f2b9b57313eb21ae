package policy

import (
	"context"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPreparedQueryResult: a query's result is what the rego package
// reported as it (the first result): the value bound to resultVar, or the
// value of a query that is one term; nothing for a query binding neither
// or with no result; the input and data reach the evaluation.
func TestPreparedQueryResult(t *testing.T) {
	mods, err := ParseModules([]Module{{Name: "p.rego", Source: `package p

xs contains x if some x in input.xs

n := count(xs)

limit := data.limit
`}})
	require.NoError(t, err)
	c, err := Compile(mods, nil)
	require.NoError(t, err)
	store := newStore(map[string]any{"limit": 7})
	input, err := ast.InterfaceToValue(map[string]any{"xs": []any{"a", "b"}})
	require.NoError(t, err)
	for src, want := range map[string]string{
		"data.p.xs":                      `{"a", "b"}`,
		"data.p.n":                       `2`,
		"data.p.limit":                   `7`,
		resultVar + " := data.p.n + 1":   `3`,
		"x := 1; " + resultVar + " := x": `1`,
		resultVar + " := data.p.missing": ``, // undefined: no result
		"x := data.p.n":                  ``, // binds no result variable
		"data.p.n == 2":                  ``, // a comparison is not captured
		`some x in data.p.xs; ` + resultVar + ` := x`: `"a"`, // the first result
	} {
		q, err := prepareQuery(c, store, src)
		require.NoError(t, err, src)
		got, err := q.eval(context.Background(), input)
		require.NoError(t, err, src)
		if want == "" {
			assert.Nil(t, got, src)
			continue
		}
		require.NotNil(t, got, src)
		assert.Equal(t, want, got.String(), src)
	}
	// A query that does not compile is an error, not a result.
	_, err = prepareQuery(c, store, "data.p.n +")
	require.Error(t, err)
	_, err = prepareQuery(c, store, "nosuch(1)")
	require.Error(t, err)
	// Cancelling the context stops a running evaluation.
	q, err := prepareQuery(c, store, resultVar+" := count([x | some x in numbers.range(1, 1000000000)])")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = q.eval(ctx, input)
	var te *topdown.Error
	require.ErrorAs(t, err, &te)
	assert.Equal(t, topdown.CancelErr, te.Code)
}
