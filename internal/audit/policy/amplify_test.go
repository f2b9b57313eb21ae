package policy

import (
	"context"
	"encoding/json"
	"math/big"
	"testing"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzAmplifierSizes: the size worked out for each wrapped built-in is
// never below the length of what the built-in then builds, for any value
// and format (the check must refuse what is too large, never let it
// through).
func FuzzAmplifierSizes(f *testing.F) {
	f.Add(`{"a": [1, "x<y>&\u0001", {"b": null}], "c": true}`, "%v %s %d", ",")
	f.Add(`["0123456789", "0123456789", 1.5e300]`, "%-20.5v|%+08d|%x", "")
	f.Add(`"plain"`, "%*d %5s", "--")
	f.Add(`{"deep": [[[[["x"]]]]], "set": []}`, "%[2]v %[1]v %%", "\t")
	f.Fuzz(func(t *testing.T, doc, format, delim string) {
		var x any
		// Input reaches OPA as JSON, which mends invalid UTF-8: the
		// operands sized here must be those OPA sees.
		if !utf8.ValidString(doc) || !utf8.ValidString(format) || !utf8.ValidString(delim) || json.Unmarshal([]byte(doc), &x) != nil || len(doc) > 4096 || len(format) > 64 {
			return
		}
		v, err := ast.InterfaceToValue(x)
		if err != nil {
			return
		}
		term := ast.NewTerm(v)
		strs := ast.ArrayTerm(ast.StringTerm(doc), ast.StringTerm(format), ast.StringTerm(delim))
		for _, c := range []struct {
			query string
			ops   []*ast.Term
		}{
			{`json.marshal(input.x)`, []*ast.Term{term}},
			{`json.marshal_with_options(input.x, {"pretty": true, "indent": input.d, "prefix": input.d})`,
				[]*ast.Term{term, ast.ObjectTerm(ast.Item(ast.StringTerm("pretty"), ast.BooleanTerm(true)), ast.Item(ast.StringTerm("indent"), ast.StringTerm(delim)), ast.Item(ast.StringTerm("prefix"), ast.StringTerm(delim)))}},
			{`yaml.marshal(input.x)`, []*ast.Term{term}},
			{`sprintf(input.f, [input.x, 7, input.d])`, []*ast.Term{ast.StringTerm(format), ast.ArrayTerm(term, ast.IntNumberTerm(7), ast.StringTerm(delim))}},
			{`concat(input.d, input.s)`, []*ast.Term{ast.StringTerm(delim), strs}},
		} {
			name := c.query[:len(c.query)-len("(input.x)")]
			size := amplifiers[builtinName(c.query)](c.ops)
			if size > 1<<20 {
				continue // a width of a billion: true, and too slow to build
			}
			rs, err := rego.New(rego.Query(c.query), rego.Input(map[string]any{"x": x, "f": format, "d": delim, "s": []string{doc, format, delim}})).Eval(context.Background())
			if err != nil || len(rs) == 0 || len(rs[0].Expressions) == 0 {
				continue
			}
			out, ok := rs[0].Expressions[0].Value.(string)
			if !ok {
				continue
			}
			require.GreaterOrEqual(t, size, uint64(len(out)), "%s: %q", name, out)
		}
	})
}

// builtinName is the built-in a query calls first.
func builtinName(query string) string {
	for i, c := range query {
		if c == '(' {
			return query[:i]
		}
	}
	return query
}

// TestShiftSizeCoversTheResult: the size worked out for bits.lsh is never
// below the number it builds and its decimal digits, for numbers of any
// sign and length and shifts within and past a machine word.
func TestShiftSizeCoversTheResult(t *testing.T) {
	for _, x := range []string{"0", "1", "-5", "255", "123456789012345678901234567890", "-98765432109876543210"} {
		for _, s := range []string{"0", "1", "7", "63", "64", "65", "1000", "100000"} {
			rs, err := rego.New(rego.Query("bits.lsh(" + x + ", " + s + ")")).Eval(context.Background())
			require.NoError(t, err)
			out, ok := rs[0].Expressions[0].Value.(json.Number)
			require.True(t, ok, "%T", rs[0].Expressions[0].Value)
			n, ok := new(big.Int).SetString(string(out), 10)
			require.True(t, ok, "%s", out)
			built := uint64(len(out)) + uint64(len(n.Bytes()))
			size := shiftSize([]*ast.Term{ast.NumberTerm(json.Number(x)), ast.NumberTerm(json.Number(s))})
			require.GreaterOrEqual(t, size, built, "bits.lsh(%s, %s)", x, s)
		}
	}
	for _, s := range []string{"18446744073709551616", "1e30"} {
		assert.GreaterOrEqual(t, shiftSize([]*ast.Term{ast.IntNumberTerm(1), ast.NumberTerm(json.Number(s))}), uint64(1)<<60, "%s: refused under any budget", s)
	}
	for _, s := range []string{"-3", "2.5"} {
		assert.Zero(t, shiftSize([]*ast.Term{ast.IntNumberTerm(1), ast.NumberTerm(json.Number(s))}), "%s: OPA refuses it itself", s)
	}
	// Integers OPA accepts in other spellings are sized as integers.
	for s, same := range map[string]string{"1e3": "1000", "8.0": "8", "1.5e2": "150"} {
		rs, err := rego.New(rego.Query("bits.lsh(1, " + s + ")")).Eval(context.Background())
		require.NoError(t, err, s)
		require.NotEmpty(t, rs, s)
		assert.Equal(t, shiftSize([]*ast.Term{ast.IntNumberTerm(1), ast.NumberTerm(json.Number(same))}), shiftSize([]*ast.Term{ast.IntNumberTerm(1), ast.NumberTerm(json.Number(s))}), s)
	}
}
