package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/rules"
)

// checkDecode compares decodeJSON with OPA's own decoder on b.
func checkDecode(t *testing.T, b []byte) {
	got, err := decodeJSON(b)
	if !json.Valid(b) {
		if err == nil {
			t.Fatalf("decodeJSON accepted invalid JSON %q", b)
		}
		return
	}
	if errors.Is(err, ErrNumberRange) {
		return // refused on purpose: OPA would panic comparing it
	}
	if err != nil {
		t.Fatalf("decodeJSON refused valid JSON %q: %v", b, err)
	}
	// Every number it accepts compares without a panic.
	ast.Compare(got, ast.NumberTerm("0").Value)
	ast.WalkTerms(got, func(x *ast.Term) bool {
		if n, ok := x.Value.(ast.Number); ok {
			ast.Compare(n, ast.Number("1"))
		}
		return false
	})
	want, err := ast.ValueFromReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("ValueFromReader(%q): %v", b, err)
	}
	if ast.Compare(want, got) != 0 {
		t.Fatalf("decodeJSON(%q)\n got %v\nwant %v", b, got, want)
	}
}

var jsonSeeds = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `1.5e-3`, `-12E+2`, `"x"`, `""`,
	`{"a": [1, "2", null, true, {"b": {}}], "c": "d\"e\\f\u00e9\ud83d\ude00\n"}`,
	`{"a": 1, "a": 2}`, ` [ 1 , 2 ] `, `1e2000000`, `[1e-2000000]`, `{"x": -1e309}`, `0e99999`, `0E10000000000000000000`, `1e308`, `"é"`, "\"\xff\"", `"\/"`,
	`{"a"}`, `[1,]`, `01`, `1.`, `.5`, `-`, `tru`, `"\x"`, `"a` + "\n" + `"`, `[1] 2`, `{"a":1,}`, `nul`, `"`, `[`,
}

func TestDecodeJSON(t *testing.T) {
	for _, s := range jsonSeeds {
		checkDecode(t, []byte(s))
	}
	// The real thing: the facts of the dlami fixture.
	rs, err := rules.Load()
	require.NoError(t, err)
	b, err := json.Marshal(dlamiFacts(t, rs))
	require.NoError(t, err)
	checkDecode(t, b)
	// Deep nesting is refused, not a stack overflow.
	_, err = decodeJSON(bytes.Repeat([]byte("["), maxJSONDepth+2))
	assert.ErrorIs(t, err, errJSON)
	// Numbers OPA cannot hold are refused, with where they are.
	for _, s := range []string{`1e2000000`, `{"a": [0, 1e-2000000]}`, `-1e309`, `1` + strings.Repeat("0", 400),
		// A zero whose exponent overflows: strconv reads 0, OPA's
		// comparison panics on it.
		`0E10000000000000000000`, `[-0.0e-99999999999999999999]`} {
		_, err := decodeJSON([]byte(s))
		assert.ErrorIs(t, err, ErrNumberRange, s)
	}
	for _, s := range []string{`0e99999`, `-0.0e-7`, `1e308`, `4.9e-324`, `123456789012345678901234567890`} {
		_, err := decodeJSON([]byte(s))
		assert.NoError(t, err, s)
	}
}

// TestDataNumbersOutOfRange: a data file holding a number OPA cannot
// hold is refused when it is read, naming the file and where the number
// is, never a panic when a policy compares it.
func TestDataNumbersOutOfRange(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"big.json":   `{"limits": {"x": [1, 1e2000000]}}`,
		"small.json": `{"x": 1e-2000000}`,
		// YAML: a JSON document is decoded as JSON (YAML's own
		// out-of-range floats stay strings).
		"json.yaml": `{"x": 1e2000000}`,
	} {
		f := write(t, dir, name, text)
		_, err := Data(Config{DataFiles: []string{f}})
		require.Error(t, err, name)
		assert.ErrorIs(t, err, ErrNumberRange, name)
		assert.Contains(t, err.Error(), "read data "+f, name)
	}
	f := write(t, dir, "big2.json", `{"limits": {"x": [1, 1e2000000]}}`)
	_, err := Data(Config{DataFiles: []string{f}})
	assert.ErrorContains(t, err, "at limits.x[1]: 1e2000000: number out of the range")
}

func FuzzDecodeJSON(f *testing.F) {
	for _, s := range jsonSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecode(t, b)
	})
}

// BenchmarkDecodeInput compares the ways to the Rego value of the facts of
// the dlami fixture: OPA's decoder and the fast one on its JSON, and the
// direct conversion of the Go document (what Evaluate does).
func BenchmarkDecodeInput(b *testing.B) {
	rs, err := rules.Load()
	require.NoError(b, err)
	d := dlamiFacts(b, rs)
	doc, err := json.Marshal(d)
	require.NoError(b, err)
	for range 2 {
		b.Run("opa", func(b *testing.B) {
			start := cpuTime()
			for b.Loop() {
				if _, err := ast.ValueFromReader(bytes.NewReader(doc)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
		b.Run("direct", func(b *testing.B) {
			start := cpuTime()
			for b.Loop() {
				if _, err := goValue(d); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
		b.Run("marshal+fast", func(b *testing.B) {
			start := cpuTime()
			for b.Loop() {
				bs, err := json.Marshal(d)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := decodeJSON(bs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
		b.Run("fast", func(b *testing.B) {
			start := cpuTime()
			for b.Loop() {
				if _, err := decodeJSON(doc); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}
