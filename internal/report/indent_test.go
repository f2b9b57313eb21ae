package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// indentedByEncoder is what WriteJSON must equal: encoding/json's Encoder
// indenting by itself.
func indentedByEncoder(t testing.TB, v any, escapeHTML bool) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(escapeHTML)
	require.NoError(t, enc.Encode(v))
	return b.Bytes()
}

func TestWriteJSONEqualsEncoder(t *testing.T) {
	type inner struct {
		S string            `json:"s"`
		M map[string]any    `json:"m"`
		E map[string]string `json:"e"`
		L []int             `json:"l"`
		N []int             `json:"n"`
		R json.RawMessage   `json:"r"`
	}
	values := []any{
		nil, 1, "x", []any{}, map[string]any{},
		`a "quoted" \ back\\slash \\" <html> & more`,
		map[string]any{"a": []any{1, "2", map[string]any{}, []any{}, []any{[]any{}}}, "b\\": "\\\\", "c\"": "\"\\\""},
		inner{S: "ü \u2028 \x00 \\\"", M: map[string]any{"k": nil, "z": inner{}}, E: map[string]string{}, L: []int{}, R: json.RawMessage(` { "x" : [ 1 , 2 ] } `)},
		[]inner{{}, {S: "}{][,:"}},
	}
	for _, v := range values {
		for _, esc := range []bool{true, false} {
			var got bytes.Buffer
			require.NoError(t, WriteJSON(&got, v, esc))
			assert.Equal(t, string(indentedByEncoder(t, v, esc)), got.String())
		}
	}
}

func TestWriteJSONFails(t *testing.T) {
	var b bytes.Buffer
	assert.Error(t, WriteJSON(&b, map[string]any{"f": func() {}}, true))
	assert.Zero(t, b.Len(), "nothing written on failure")
}

// FuzzIndent compares the one-pass indenter with json.Indent on every valid
// compact document.
func FuzzIndent(f *testing.F) {
	for _, s := range []string{`{}`, `[]`, `{"a":[1,{"b":"\\\"}"},[],{}],"c":null}`, `"x\\"`, `[[[[]]],{"":{}}]`, `1.5e3`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if !json.Valid(in) {
			return
		}
		var compact bytes.Buffer
		require.NoError(t, json.Compact(&compact, in))
		var want bytes.Buffer
		require.NoError(t, json.Indent(&want, compact.Bytes(), "", "  "))
		assert.Equal(t, want.String(), string(appendIndented(nil, compact.Bytes())))
	})
}

// chunks records the writes it is given.
type chunks struct {
	bytes.Buffer
	writes int
	fail   error
}

func (c *chunks) Write(p []byte) (int, error) {
	if c.fail != nil {
		return 0, c.fail
	}
	c.writes++
	return c.Buffer.Write(p)
}

// TestWriteJSONInChunks: a large document is handed over in pieces, which
// together are the Encoder's bytes; a failing writer's error is returned.
func TestWriteJSONInChunks(t *testing.T) {
	big := map[string]any{}
	for i := range 5000 {
		big[fmt.Sprintf("unit-%04d.service", i)] = map[string]any{"a": []any{i, "x,y", map[string]any{}}, "b": `"quoted", {braces}`}
	}
	var got chunks
	require.NoError(t, WriteJSON(&got, big, true))
	assert.Equal(t, string(indentedByEncoder(t, big, true)), got.String())
	assert.Greater(t, got.writes, 4, "written in pieces of about %d bytes", chunk)
	failing := chunks{fail: errors.New("disk full")}
	assert.ErrorContains(t, WriteJSON(&failing, big, true), "disk full")
}
