package policy

import (
	"bytes"
	"encoding/json"
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
	if err != nil {
		t.Fatalf("decodeJSON refused valid JSON %q: %v", b, err)
	}
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
	`{"a": 1, "a": 2}`, ` [ 1 , 2 ] `, `"é"`, "\"\xff\"", `"\/"`,
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
