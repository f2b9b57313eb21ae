package unit

import (
	"slices"
	"strings"
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

// TestExtractWordSep checks other separators and
// EXTRACT_DONT_COALESCE_SEPARATORS, as config_parse_bind_paths and
// config_parse_temporary_filesystems use them.
func TestExtractWordSep(t *testing.T) {
	type out struct {
		word, rest string
		sep        byte
		ok, bad    bool
	}
	const bind = ":" + whitespace
	for _, tc := range []struct {
		in, seps string
		f        WordFlags
		want     out
	}{
		{in: "/a:/b:ro", seps: bind, f: WordUnquote | WordDontCoalesce, want: out{word: "/a", rest: "/b:ro", sep: ':', ok: true}},
		{in: "/a /b", seps: bind, f: WordUnquote | WordDontCoalesce, want: out{word: "/a", rest: "/b", sep: ' ', ok: true}},
		{in: "/a", seps: bind, f: WordUnquote | WordDontCoalesce, want: out{word: "/a", ok: true}},
		{in: "", seps: bind, f: WordUnquote | WordDontCoalesce, want: out{ok: true}},
		{in: "::/a", seps: bind, f: WordUnquote | WordDontCoalesce, want: out{rest: ":/a", sep: ':', ok: true}},
		{in: "/a:", seps: bind, f: WordUnquote | WordDontCoalesce, want: out{word: "/a", sep: ':', ok: true}},
		{in: `"/a:b":/c`, seps: bind, f: WordUnquote | WordDontCoalesce, want: out{word: "/a:b", rest: "/c", sep: ':', ok: true}},
		{in: `/a\:b:/c`, seps: bind, f: WordUnquote | WordDontCoalesce, want: out{word: "/a:b", rest: "/c", sep: ':', ok: true}},
		{in: `/a\`, seps: ":", f: WordDontCoalesce, want: out{bad: true}},
		{in: "/a::b", seps: ":", want: out{word: "/a", rest: "b", sep: ':', ok: true}},
		{in: ":::", seps: ":", want: out{}},
		{in: `"x":y`, seps: ":", f: WordDontCoalesce, want: out{word: `"x"`, rest: "y", sep: ':', ok: true}},
	} {
		w, rest, sep, ok, err := ExtractWordSep(tc.in, tc.seps, tc.f)
		if tc.want.bad {
			assert.ErrorIs(t, err, ErrWordSyntax, "%q", tc.in)
			continue
		}
		assert.NoError(t, err, "%q", tc.in)
		assert.Equal(t, tc.want, out{word: w, rest: rest, sep: sep, ok: ok}, "%q %q %b", tc.in, tc.seps, tc.f)
	}
}

// FuzzExtractWordSep runs extract_first_word with bind-path separators
// and flags on any value: it never panics, a word never grows past its
// value, and without EXTRACT_DONT_COALESCE_SEPARATORS' cursor a
// separator that ends a word is the byte before the rest.
func FuzzExtractWordSep(f *testing.F) {
	for _, s := range []string{"/a:/b:ro", `"/a:b" /c`, "::", `a\`, `'x`, "", "/a:", "a\\:b c"} {
		f.Add(s, uint8(WordUnquote|WordDontCoalesce))
	}
	f.Fuzz(func(t *testing.T, s string, flags uint8) {
		if len(s) > 4096 {
			return
		}
		fl := WordFlags(flags) & (WordUnquote | WordRetainEscape | WordDontCoalesce | WordRelax)
		w, rest, sep, ok, err := ExtractWordSep(s, ":"+whitespace, fl)
		if err != nil {
			return
		}
		if len(w) > len(s) || len(rest) > len(s) || !strings.HasSuffix(s, rest) {
			t.Fatalf("%q: word %q rest %q", s, w, rest)
		}
		if fl&WordDontCoalesce != 0 {
			if !ok {
				t.Fatalf("%q: no word without coalescing", s)
			}
			if sep != 0 && s[len(s)-len(rest)-1] != sep {
				t.Fatalf("%q: separator %q is not before %q", s, sep, rest)
			}
			if sep == 0 && rest != "" {
				t.Fatalf("%q: rest %q after the end", s, rest)
			}
			if !strings.ContainsAny(s, `\"'`) {
				want, _, _ := strings.Cut(s, string(rune(sep)))
				if sep == 0 {
					want = s
				}
				if w != want {
					t.Fatalf("%q: word %q, want %q", s, w, want)
				}
			}
		}
	})
}

func TestWords(t *testing.T) {
	for _, tc := range []struct {
		in                    string
		unquote, retainEscape bool
		want                  []string
	}{
		{`a "b c" d`, true, false, []string{"a", "b c", "d"}},
		{`a "b c`, true, false, []string{"a"}},
		{`a\:b c\`, true, true, []string{`a\:b`, `c\`}},
		{`a\:b c\`, true, false, []string{"a:b"}},
		{"", true, false, nil},
	} {
		assert.Equal(t, tc.want, slices.Collect(Words(tc.in, tc.unquote, tc.retainEscape)), "%q", tc.in)
	}
	for w := range Words("a b c", false, false) {
		assert.Equal(t, "a", w, "a break ends the words")
		break
	}
}

// TestCmdlineWords: a kernel command line keeps its backslashes, and an
// unbalanced quote ends the last word (EXTRACT_RELAX) rather than the
// line, as the generators' oracle shows.
func TestCmdlineWords(t *testing.T) {
	for in, want := range map[string][]string{
		`a "b c" d`:              {"a", "b c", "d"},
		`a x="b c`:               {"a", "x=b c"},
		`a 'b`:                   {"a", "b"},
		`a "`:                    {"a", ""},
		`a\ b c\`:                {`a\`, "b", `c\`},
		"x=\"1\n2\" y":           {"x=1\n2", "y"},
		"":                       nil,
		" \t\n":                  nil,
		`systemd.run="echo 'a'"`: {"systemd.run=echo 'a'"},
	} {
		assert.Equal(t, want, slices.Collect(CmdlineWords(in)), "%q", in)
	}
}
