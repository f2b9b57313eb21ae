package unit

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestExtractWord checks each flag set the parsers use against what
// extract_first_word gives.
func TestExtractWord(t *testing.T) {
	type out struct {
		word, rest string
		ok, bad    bool
	}
	for _, tc := range []struct {
		in                 string
		unquote, retainEsc bool
		want               out
	}{
		{in: "  a b  c", want: out{word: "a", rest: "b  c", ok: true}},
		{in: "a\t", want: out{word: "a", ok: true}},
		{in: "   ", want: out{}},
		{in: `"a b" c`, want: out{word: `"a`, rest: `b" c`, ok: true}},
		{in: `a\ b c`, want: out{word: "a b", rest: "c", ok: true}},
		{in: `a\`, want: out{bad: true}},
		{in: `"a b" c`, unquote: true, want: out{word: "a b", rest: "c", ok: true}},
		{in: `'a"b' c`, unquote: true, want: out{word: `a"b`, rest: "c", ok: true}},
		{in: `"a\"b"`, unquote: true, want: out{word: `a"b`, ok: true}},
		{in: `"a b`, unquote: true, want: out{bad: true}},
		{in: `  "/a b"\:c  next`, unquote: true, retainEsc: true, want: out{word: `/a b\:c`, rest: "next", ok: true}},
		{in: `a\`, unquote: true, retainEsc: true, want: out{word: `a\`, ok: true}},
		{in: `"/a`, unquote: true, retainEsc: true, want: out{bad: true}},
	} {
		w, rest, ok, err := ExtractWord(tc.in, tc.unquote, tc.retainEsc)
		if tc.want.bad {
			assert.ErrorIs(t, err, ErrWordSyntax, "%q", tc.in)
			continue
		}
		assert.NoError(t, err, "%q", tc.in)
		assert.Equal(t, tc.want, out{word: w, rest: rest, ok: ok}, "%q unquote=%v retain=%v", tc.in, tc.unquote, tc.retainEsc)
	}
}
