package unit

import (
	"errors"
	"iter"
	"strings"
)

// ErrWordSyntax is extract_first_word's -EINVAL: an unbalanced quote or a
// backslash ending the value.
var ErrWordSyntax = errors.New("invalid syntax")

// whitespace is systemd's WHITESPACE, the separators of words.
const whitespace = " \t\n\r"

// WordFlags are the flags of extract_first_word the ported parsers use.
type WordFlags uint8

const (
	// WordUnquote is EXTRACT_UNQUOTE: quotes are removed; without it they
	// are ordinary characters.
	WordUnquote WordFlags = 1 << iota
	// WordRetainEscape is EXTRACT_RETAIN_ESCAPE: a backslash is an
	// ordinary character; without it it takes the next character as it
	// is, inside quotes too.
	WordRetainEscape
	// WordDontCoalesce is EXTRACT_DONT_COALESCE_SEPARATORS: each
	// separator ends a word, so two in a row enclose an empty one.
	WordDontCoalesce
	// WordRelax is EXTRACT_RELAX: an unbalanced quote or a trailing
	// backslash ends the last word instead of failing.
	WordRelax
)

// Words yields the words of s as ExtractWord reads them, one after the
// other, up to the end or the first syntax error: the reading of the
// parsers that end an assignment at a syntax error and keep the words
// before it.
func Words(s string, unquote, retainEscape bool) iter.Seq[string] {
	return func(yield func(string) bool) {
		for {
			w, rest, ok, err := ExtractWord(s, unquote, retainEscape)
			if err != nil || !ok || !yield(w) {
				return
			}
			s = rest
		}
	}
}

// CmdlineWords yields the words of a kernel command line as
// proc_cmdline_parse splits it: extract_first_word with EXTRACT_UNQUOTE,
// EXTRACT_RELAX and EXTRACT_RETAIN_ESCAPE, so an unbalanced quote ends
// the last word rather than the line.
func CmdlineWords(s string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for {
			w, rest, _, ok, err := ExtractWordSep(s, whitespace, WordUnquote|WordRetainEscape|WordRelax)
			if err != nil || !ok || !yield(w) {
				return
			}
			s = rest
		}
	}
}

// ExtractWord is extract_first_word with WHITESPACE separators: unquote
// is WordUnquote, retainEscape WordRetainEscape. It returns the word, the
// rest from the next word on ("" when systemd would set the cursor to
// NULL), and whether there was a word.
func ExtractWord(s string, unquote, retainEscape bool) (word, rest string, ok bool, err error) {
	var f WordFlags
	if unquote {
		f |= WordUnquote
	}
	if retainEscape {
		f |= WordRetainEscape
	}
	word, rest, _, ok, err = ExtractWordSep(s, whitespace, f)
	return word, rest, ok, err
}

// ExtractWordSep is extract_first_word of s with the separators seps and
// flags f. It returns the word, the rest, the separator that ended the
// word (0 when the end of s did), and whether there was a word. Without
// WordDontCoalesce the separators after the word are skipped, and rest is
// "" when systemd would set the cursor to NULL. With it, rest is what
// follows the one separator, and the cursor is NULL exactly when sep is 0:
// a rest of "" that is not NULL still holds an empty word, as does an
// empty s.
func ExtractWordSep(s, seps string, f WordFlags) (word, rest string, sep byte, ok bool, err error) {
	dontCoalesce := f&WordDontCoalesce != 0
	isSep := func(c byte) bool { return strings.IndexByte(seps, c) >= 0 }
	i := 0
	for ; i < len(s) && isSep(s[i]); i++ {
		if dontCoalesce {
			return "", s[i+1:], s[i], true, nil
		}
	}
	if i >= len(s) {
		return "", "", 0, dontCoalesce, nil
	}
	var b []byte
	var quote byte
	backslash := false
	for ; ; i++ {
		if i >= len(s) {
			if (backslash || quote != 0) && f&WordRelax == 0 {
				return "", "", 0, false, ErrWordSyntax
			}
			return string(b), "", 0, true, nil
		}
		c := s[i]
		switch {
		case backslash:
			b = append(b, c)
			backslash = false
		case quote != 0:
			if c == quote {
				quote = 0
			} else if c == '\\' && f&WordRetainEscape == 0 {
				backslash = true
			} else {
				b = append(b, c)
			}
		case (c == '\'' || c == '"') && f&WordUnquote != 0:
			quote = c
		case c == '\\' && f&WordRetainEscape == 0:
			backslash = true
		case isSep(c):
			if dontCoalesce {
				return string(b), s[i+1:], c, true, nil
			}
			j := i
			for j < len(s) && isSep(s[j]) {
				j++
			}
			return string(b), s[j:], c, true, nil
		default:
			b = append(b, c)
		}
	}
}
