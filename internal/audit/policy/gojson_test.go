package policy

import (
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/rules"
)

// checkGoValue compares goValue(v) with the value v's encoding/json form
// decodes to: they must be the same Rego value.
func checkGoValue(t *testing.T, v any) {
	t.Helper()
	b, jsonErr := json.Marshal(v)
	got, err := goValue(v)
	if errors.Is(err, errNotJSONShaped) {
		return // inputValue goes through encoding/json then
	}
	if jsonErr != nil {
		require.Error(t, err, "encoding/json refuses %#v: %v", v, jsonErr)
		return
	}
	require.NoError(t, err, "%s", b)
	want, err := decodeJSON(b)
	require.NoError(t, err)
	if ast.Compare(want, got) != 0 {
		t.Fatalf("goValue(%T)\n got %v\nwant %v", v, got, want)
	}
}

type textKey struct{ a, b string }

func (k textKey) MarshalText() ([]byte, error) { return []byte(k.a + "/" + k.b), nil }

type ptrMarshaler struct{ n int }

func (p *ptrMarshaler) MarshalJSON() ([]byte, error) { return json.Marshal(map[string]int{"n": p.n}) }

type zero struct{ X int }

func (z zero) IsZero() bool { return z.X == 42 }

type Inner struct {
	Shared string `json:"shared"`
	Deep   int    `json:"deep,omitempty"`
	Name   string
}

type inner2 struct {
	Hidden string `json:"hidden"`
}

type zoo struct {
	Inner
	*inner2
	Name      string                 `json:"name"`
	Skip      string                 `json:"-"`
	unexp     int                    //nolint:unused // encoding/json skips it
	Empty     []string               `json:"empty,omitempty"`
	Nil       []string               `json:"nil"`
	NilMap    map[string]int         `json:"nil_map"`
	Bytes     []byte                 `json:"bytes"`
	Floats    []float64              `json:"floats"`
	F32       float32                `json:"f32"`
	Ints      []int64                `json:"ints"`
	Uints     [3]uint8               `json:"uints"`
	Any       any                    `json:"any"`
	Ptr       *string                `json:"ptr"`
	NilPtr    *string                `json:"nil_ptr,omitempty"`
	Keys      map[textKey]bool       `json:"keys"`
	IntKeys   map[int]string         `json:"int_keys"`
	Bad       map[string]string      `json:"bad"`
	Seconds   facts.Seconds          `json:"seconds"`
	Infinite  facts.Seconds          `json:"infinite"`
	Severity  finding.Severity       `json:"severity"`
	Marshaler ptrMarshaler           `json:"marshaler"`
	MarshPtr  *ptrMarshaler          `json:"marsh_ptr"`
	Zero      zero                   `json:"zero,omitzero"`
	NotZero   zero                   `json:"not_zero,omitzero"`
	Raw       json.RawMessage        `json:"raw"`
	Nested    map[string]map[int]any `json:"nested"`
}

func TestGoValueEqualsJSON(t *testing.T) {
	s := "x"
	z := zoo{
		Inner:  Inner{Shared: "s", Name: "inner name loses"},
		inner2: &inner2{Hidden: "h"},
		Name:   "outer", Skip: "no", unexp: 1,
		Empty: []string{}, Bytes: []byte{0, 1, 255},
		Floats: []float64{0, math.Copysign(0, -1), 1, 1.5, 1e-7, 1e21, 123456789012345678, 1e20, -2.5e-9, math.MaxFloat64, math.SmallestNonzeroFloat64},
		F32:    3.14, Ints: []int64{math.MinInt64, 0, math.MaxInt64}, Uints: [3]uint8{1, 2, 255},
		Any: map[string]any{"a": []any{1.0, "b", nil, true}}, Ptr: &s,
		Keys:    map[textKey]bool{{"a", "b"}: true, {"c", "d"}: false},
		IntKeys: map[int]string{-1: "m", 10: "t", 2: "two"},
		Bad:     map[string]string{"\xff": "first", "\xfe": "second", "ok": "a\xffb\xc3"},
		Seconds: 1.5, Infinite: facts.Infinity, Severity: finding.High,
		Marshaler: ptrMarshaler{1}, MarshPtr: &ptrMarshaler{2},
		Zero: zero{X: 42}, NotZero: zero{X: 1},
		Raw:    json.RawMessage(`{"raw": [1, 2]}`),
		Nested: map[string]map[int]any{"n": {1: zoo{}.Any}},
	}
	_, err := goValue(z)
	require.NoError(t, err, "the zoo is JSON-shaped: goValue builds it itself")
	checkGoValue(t, z)
	checkGoValue(t, &z) // addressable: the pointer Marshaler is used
	checkGoValue(t, []zoo{z, {}})
	checkGoValue(t, map[string]any{"z": z, "nil": nil})
	for _, v := range []any{nil, 1, "s", "\xff\xfe", 2.5, true, []int(nil), map[string]int(nil), (*zoo)(nil)} {
		checkGoValue(t, v)
	}
	_, err = goValue(math.NaN())
	assert.Error(t, err)
	_, err = goValue(struct {
		N int `json:",string"`
	}{1})
	assert.ErrorIs(t, err, errNotJSONShaped)

	// The real thing: the facts of the dlami fixture.
	rs, err := rules.Load()
	require.NoError(t, err)
	checkGoValue(t, dlamiFacts(t, rs))
}

// cycA and cycB refer to each other: cycB holds a cycA by value, whose
// ptrMarshaler writes only through a pointer. A map's values are not
// addressable, so encoding/json writes the ptrMarshaler in a
// map[string]cycB as a plain struct; goValue must know that of cycB even
// when it met cycB while still working out cycA.
type cycA struct {
	B  *cycB           `json:"b"`
	Ms map[string]cycB `json:"ms"`
	M  ptrMarshaler    `json:"m"`
}

type cycB struct {
	A cycA `json:"a"`
}

func TestGoValueAddressableThroughCycles(t *testing.T) {
	v := cycA{Ms: map[string]cycB{"k": {A: cycA{M: ptrMarshaler{3}}}}, M: ptrMarshaler{4}}
	checkGoValue(t, v)
	checkGoValue(t, &v)
}

// TestGoValueSharesEqualValues: equal values become one term (the
// security checks of every service repeat), unequal ones do not.
func TestGoValueSharesEqualValues(t *testing.T) {
	yes := true
	c := facts.SecurityCheck{Name: "PrivateTmp=", Set: &yes, Description: "Service has no access to other software's temporary files"}
	d := c
	d.Description = "other"
	v, err := goValue([]map[string]facts.SecurityCheck{{"a": c, "b": d}, {"a": c, "b": d}, {"a": d, "b": d}})
	require.NoError(t, err)
	arr := v.(*ast.Array)
	first, second, third := arr.Elem(0).Value.(ast.Object), arr.Elem(1).Value.(ast.Object), arr.Elem(2).Value.(ast.Object)
	assert.Same(t, arr.Elem(0), arr.Elem(1), "equal maps: one term")
	assert.NotSame(t, arr.Elem(0), arr.Elem(2))
	assert.Same(t, first.Get(ast.StringTerm("a")), second.Get(ast.StringTerm("a")))
	assert.Same(t, first.Get(ast.StringTerm("b")), third.Get(ast.StringTerm("a")), "equal structs: one term")
	assert.NotSame(t, first.Get(ast.StringTerm("a")), first.Get(ast.StringTerm("b")))
	checkGoValue(t, []map[string]facts.SecurityCheck{{"a": c, "b": d}, {"a": c, "b": d}, {"a": d, "b": d}})
}

// FuzzGoValue: any facts document encoding/json can read, converted
// directly, is the value of its JSON form.
func FuzzGoValue(f *testing.F) {
	f.Add([]byte(`{"schema":"x","units":{"a.service":{"name":"a\u00ff","restart_sec":"infinity","directives":{"Service":{"X":["1"]}}}},"config_files":{"/e":{"keys":{"K":"v"}}}}`))
	f.Add([]byte(`{"image":{"os_release":{"ID":"debian"},"warnings":["w"]},"manager":{"default_restart_sec":0.1}}`))
	f.Add([]byte(`{"units":{"a":{"security":{"exposure":9.6,"level":"UNSAFE","checks":{"x":{"name":"X=","set":false,"exposure":0.2,"description":"d"},"y":{"name":"Y=","set":null,"exposure":null,"description":"d"}},"top":[{"id":"x","name":"X=","exposure":0.2}]}},"b":{"security":{"exposure":9.6,"level":"UNSAFE","checks":{"x":{"name":"X=","set":false,"exposure":0.2,"description":"d"}},"top":[]}}}}`))
	f.Add([]byte(`{"units":{"b":{"exec_start":{"path":"/x","exists":true,"args":[]},"chain":[{"from":"a","to":"b","kind":"wants"}]}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var d facts.Document
		if json.Unmarshal(b, &d) != nil {
			return
		}
		checkGoValue(t, &d)
	})
}
