package unit

import "errors"

// ErrWordSyntax is extract_first_word's -EINVAL: an unbalanced quote or a
// backslash ending the value.
var ErrWordSyntax = errors.New("invalid syntax")

// whitespace is systemd's WHITESPACE, the separators of words.
const whitespace = " \t\n\r"

func isWhitespace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// ExtractWord is extract_first_word with WHITESPACE separators and the
// flags the ported parsers use: unquote is EXTRACT_UNQUOTE (quotes are
// removed; without it they are ordinary characters), retainEscape is
// EXTRACT_RETAIN_ESCAPE (a backslash is an ordinary character; without it
// it takes the next character as it is, inside quotes too). It returns
// the word, the rest from the next word on ("" when systemd would set the
// cursor to NULL), and whether there was a word.
func ExtractWord(s string, unquote, retainEscape bool) (word, rest string, ok bool, err error) {
	i := 0
	for i < len(s) && isWhitespace(s[i]) {
		i++
	}
	if i >= len(s) {
		return "", "", false, nil
	}
	var b []byte
	var quote byte
	backslash := false
	for ; ; i++ {
		if i >= len(s) {
			if backslash || quote != 0 {
				return "", "", false, ErrWordSyntax
			}
			return string(b), "", true, nil
		}
		c := s[i]
		switch {
		case backslash:
			b = append(b, c)
			backslash = false
		case quote != 0:
			if c == quote {
				quote = 0
			} else if c == '\\' && !retainEscape {
				backslash = true
			} else {
				b = append(b, c)
			}
		case (c == '\'' || c == '"') && unquote:
			quote = c
		case c == '\\' && !retainEscape:
			backslash = true
		case isWhitespace(c):
			for i < len(s) && isWhitespace(s[i]) {
				i++
			}
			return string(b), s[i:], true, nil
		default:
			b = append(b, c)
		}
	}
}
