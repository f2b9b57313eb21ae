package policy

import (
	"encoding"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// throughJSON is how the findings of v were decoded before directFindings:
// rego's conversion to Go, then encoding/json.
func throughJSON(v ast.Value) ([]finding.Finding, error) {
	x, err := ast.JSON(v)
	if err != nil {
		return nil, err
	}
	return decodeFindings(x)
}

// checkDirect compares directFindings(v) with throughJSON(v) where
// directFindings takes v, and reports whether it did.
func checkDirect(t *testing.T, v ast.Value) bool {
	t.Helper()
	fs, ok := directFindings(v)
	if !ok {
		return false
	}
	want, err := throughJSON(v)
	require.NoError(t, err, "directFindings takes what encoding/json refuses: %v", v)
	got := sortFindings(fs)
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("directFindings(%v)\n got %#v\nwant %#v", v, got, want)
	}
	wb, err := json.Marshal(want)
	require.NoError(t, err)
	gb, err := json.Marshal(got)
	require.NoError(t, err)
	assert.Equal(t, string(wb), string(gb))
	return true
}

// TestFindingFieldNames holds the field lists directFindings knows to the
// json tags of the structs encoding/json decodes a finding into, and to
// their having no decoding method of their own (Severity's UnmarshalText
// is ParseSeverity, which directFindings calls).
func TestFindingFieldNames(t *testing.T) {
	for _, c := range []struct {
		typ    reflect.Type
		fields []string
	}{
		{reflect.TypeFor[finding.Finding](), findingFields},
		{reflect.TypeFor[unit.Edge](), edgeFields},
		{reflect.TypeFor[finding.Remediation](), remediationFields},
		{reflect.TypeFor[finding.Waiver](), waiverFields},
	} {
		var names []string
		for f := range c.typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			require.NotEmpty(t, name, "%s.%s has no json name", c.typ, f.Name)
			names = append(names, name)
			if f.Type.Kind() == reflect.Struct || f.Type.Kind() == reflect.Pointer {
				continue // checked as a row of their own
			}
		}
		assert.Equal(t, names, c.fields, "%s: update directFindings", c.typ)
		for _, typ := range []reflect.Type{c.typ, reflect.PointerTo(c.typ)} {
			assert.False(t, typ.Implements(reflect.TypeFor[json.Unmarshaler]()), "%s decodes itself: update directFindings", typ)
			assert.False(t, typ.Implements(reflect.TypeFor[encoding.TextUnmarshaler]()), "%s decodes itself: update directFindings", typ)
		}
	}
	sev := reflect.TypeFor[finding.Severity]()
	assert.False(t, reflect.PointerTo(sev).Implements(reflect.TypeFor[json.Unmarshaler]()))
	assert.Equal(t, reflect.Int, sev.Kind())
}

// directSeeds are result values of every shape: what the catalog returns
// and what a user's policy might (wrong types, members matching a field
// only ignoring case, extra members, numbers float64 cannot hold, sets
// where arrays are expected, …).
var directSeeds = []struct {
	src   string
	taken bool
}{
	{`{{"rule_id": "crash-loop-restart", "title": "T", "severity": "medium", "unit": "a.service", "message": "m <&>",
		   "chain": [{"from": "default.target", "to": "a.service", "kind": ".wants", "source": "/etc/x"}],
		   "remediation": {"action": "configure", "units": ["a.service"], "text": "t\n"}, "waived": false,
		   "references": ["https://x/y?a=b&c"], "evidence": {"exposure": 9.5, "top": [{"id": "X", "exposure": 0.5}], "n": null, "b": true, "threshold": 9}}}`, true},
	{`[{"rule_id": "r", "message": "m"}, {"rule_id": "a", "message": "z", "unit": "u"}]`, true},
	{`{{"rule_id": "r", "message": "m", "title": "a"}, {"rule_id": "r", "message": "m", "title": "b"}, {"rule_id": "r", "message": "m", "title": "c"}}`, true},
	{`{{"rule_id": "r", "message": "m", "RULE_ID": "x"}}`, false},
	{`{{"rule_id": "r", "message": "m", "Unit": "x"}}`, false},
	{`{{"rule_id": "r", "message": "m", "chain": [{"\u212aind": "x", "from": "a"}]}}`, false},
	{`{{"rule_id": "r", "message": "m", "chain": [{"ſource": "x"}]}}`, false},
	{`{{"rule_id": "r", "message": "m", "evidence": {"n": 1e400}}}`, false},
	{`{{"rule_id": "r", "message": "m", "evidence": {"n": 1e308, "m": -0, "k": 1e-400, "i": 12345678901234567890, "f": 0.1}}}`, true},
	{`{{"rule_id": "r", "message": "m", "family": {"x": [1, {2, 3}], "y": {1: 2}, "z": 1e400}}}`, false},
	{`{{"rule_id": "r", "message": "m", "other": {"x": [1, {2, 3}], "y": {"a": null}}}}`, true},
	{`{{"rule_id": 1, "message": "m"}}`, false},
	{`{{"rule_id": "r", "message": "m", "severity": "bogus"}}`, false},
	{`{{"rule_id": "r", "message": "m", "severity": 3}}`, false},
	{`{{"rule_id": "r", "message": "m", "chain": null}}`, false},
	{`{{"rule_id": "r", "message": "m", "chain": [{"from": 1}]}}`, false},
	{`{{"rule_id": "r", "message": "m", "chain": {{"from": "b"}, {"from": "a"}}}}`, true},
	{`{{"rule_id": "r", "message": "m", "chain": []}}`, true},
	{`{{"rule_id": "r", "message": "m", "waived": null, "waiver": null, "evidence": null, "references": null}}`, false},
	{`{{"rule_id": "r", "message": "m", "waived": true, "waiver": {"reason": "x", "expires": "2030-01-01", "by": "me"}}}`, true},
	{`{{"rule_id": "r", "message": "m", "waiver": {"Reason": "x"}}}`, false},
	{`{{"rule_id": "r", "message": "m", "references": {"b", "a"}, "remediation": {"units": {"y", "x"}, "commands": [], "action": ""}}}`, true},
	{`{{"rule_id": "r", "message": "m", "remediation": "disable"}}`, false},
	{`{{"rule_id": "r", "message": "m", "evidence": []}}`, false},
	{`{{"rule_id": "r", "message": "m", "evidence": {}}}`, true},
	{`{{"rule_id": "r", "message": "m", "evidence": {"s": {1, 2}, "o": {"a": {"b": [[]]}}}}}`, true},
	{`{{"rule_id": "r", "message": "m", "evidence": {1: 2}}}`, false},
	{`{{"rule_id": "", "message": "m"}}`, false},
	{`{{"message": "m"}}`, false},
	{`{{"rule_id": "r"}, {"rule_id": "s", "message": "m"}}`, false},
	{`{1, "x", null, true, []}`, false},
	{`{null}`, false},
	{`"x"`, false},
	{`null`, false},
	{`1`, false},
	{`{"rule_id": "r", "message": "m"}`, false},
	{`[]`, true},
	{`set()`, true},
	{`{{"rule_id": "r", "message": "m", "unit": "\u2028\u0000\ufffd"}}`, true},
	{`{{"rule_id": "r", "message": "m", 1: 2}}`, false},
	{`{{"rule_id": "r", "message": "m", ["x"]: 2}}`, false},
	{`{{"rule_id": "r", "message": "m", "x": input.foo}}`, false},
	{`{{"rule_id": "r", "message": "m", "extra": [1e400, -0.5e-400]}}`, true},
}

// TestDirectFindings: where directFindings takes a value, its findings are
// encoding/json's, byte for byte; it takes the catalog's shape and
// declines what encoding/json would judge otherwise.
func TestDirectFindings(t *testing.T) {
	for _, s := range directSeeds {
		term, err := ast.ParseTerm(s.src)
		require.NoError(t, err, s.src)
		assert.Equal(t, s.taken, checkDirect(t, term.Value), "directFindings takes %s", s.src)
	}

	// Built directly: what Rego source cannot spell.
	obj := func(kv ...any) *ast.Term {
		var items [][2]*ast.Term
		for i := 0; i < len(kv); i += 2 {
			items = append(items, [2]*ast.Term{ast.StringTerm(kv[i].(string)), kv[i+1].(*ast.Term)})
		}
		return ast.ObjectTerm(items...)
	}
	base := func(kv ...any) ast.Value {
		return ast.NewSet(obj(append([]any{"rule_id", ast.StringTerm("r"), "message", ast.StringTerm("m")}, kv...)...))
	}
	deep := func(n int) *ast.Term {
		x := ast.NullTerm()
		for range n {
			x = ast.ArrayTerm(x)
		}
		return x
	}
	for _, c := range []struct {
		name  string
		v     ast.Value
		taken bool
	}{
		{"invalid UTF-8 in a field", base("unit", ast.StringTerm("a\xffb")), false},
		{"invalid UTF-8 in evidence", base("evidence", obj("k", ast.StringTerm("\xff"))), false},
		{"invalid UTF-8 in an evidence key", base("evidence", obj("\xfe", ast.IntNumberTerm(1), "\xff", ast.IntNumberTerm(2))), false},
		{"invalid UTF-8 in an extra member", base("extra", ast.StringTerm("\xff")), true},
		{"invalid UTF-8 key of an extra member", base("\xff", ast.StringTerm("x")), false},
		{"not a number JSON writes", base("evidence", obj("n", ast.NumberTerm("0x10"))), false},
		{"NaN", base("evidence", obj("n", ast.NumberTerm("NaN"))), false},
		{"empty number", base("extra", ast.NumberTerm("")), false},
		{"number with spaces", base("extra", ast.NumberTerm(" 1")), false},
		{"nesting directFindings follows", base("evidence", obj("d", deep(maxDirectDepth-10))), true},
		{"nesting beyond", base("evidence", obj("d", deep(maxDirectDepth+10))), false},
		{"nesting encoding/json refuses", base("evidence", obj("d", deep(10001))), false},
		{"lazy object", base("evidence", ast.NewTerm(ast.LazyObject(map[string]any{"a": 1}))), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.taken, checkDirect(t, c.v))
		})
	}
}

// FuzzDirectFindings: for any result value (Rego term source),
// directFindings either declines it or returns encoding/json's findings.
func FuzzDirectFindings(f *testing.F) {
	for _, s := range directSeeds {
		f.Add(s.src)
	}
	f.Fuzz(func(t *testing.T, s string) {
		term, err := ast.ParseTerm(s)
		if err != nil {
			return
		}
		checkDirect(t, term.Value)
	})
}

// TestSortFindingsKeepsOrder: equal keys keep the order OPA lists them in.
func TestSortFindingsKeepsOrder(t *testing.T) {
	fs := []finding.Finding{{RuleID: "b", Message: "m", Title: "1"}, {RuleID: "a", Message: "m", Title: "2"}, {RuleID: "b", Message: "m", Title: "3"}}
	got := sortFindings(slices.Clone(fs))
	assert.Equal(t, []string{"2", "1", "3"}, []string{got[0].Title, got[1].Title, got[2].Title})
}
