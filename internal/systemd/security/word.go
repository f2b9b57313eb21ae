package security

import (
	"errors"
	"math"
	"strings"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// errSyntax is extract_first_word's -EINVAL: an unbalanced quote or a
// trailing backslash.
var errSyntax = errors.New("invalid syntax")

// whitespace is systemd's WHITESPACE.
const whitespace = " \t\n\r"

// wordFlags are the ExtractFlags the ported parsers use.
type wordFlags uint8

const (
	wordUnquote wordFlags = 1 << iota // EXTRACT_UNQUOTE
	wordRelax                         // EXTRACT_RELAX
)

// nextWord ports extract_first_word with WHITESPACE separators: it returns
// the first word of s, the rest, and whether there was a word. Without
// wordUnquote quotes are ordinary characters; a backslash always escapes
// the next character (no C escapes). An unbalanced quote or a trailing
// backslash is errSyntax unless wordRelax, which ends the word there.
func nextWord(s string, flags wordFlags) (word, rest string, ok bool, err error) {
	i := 0
	for i < len(s) && strings.IndexByte(whitespace, s[i]) >= 0 {
		i++
	}
	if i >= len(s) {
		return "", "", false, nil
	}
	var b strings.Builder
	var quote byte
	backslash := false
	for ; ; i++ {
		if i >= len(s) {
			if (backslash || quote != 0) && flags&wordRelax == 0 {
				return "", "", false, errSyntax
			}
			return b.String(), "", true, nil
		}
		c := s[i]
		switch {
		case backslash:
			b.WriteByte(c)
			backslash = false
		case quote != 0:
			switch c {
			case quote:
				quote = 0
			case '\\':
				backslash = true
			default:
				b.WriteByte(c)
			}
		case (c == '\'' || c == '"') && flags&wordUnquote != 0:
			quote = c
		case c == '\\':
			backslash = true
		case strings.IndexByte(whitespace, c) >= 0:
			for i < len(s) && strings.IndexByte(whitespace, s[i]) >= 0 {
				i++
			}
			return b.String(), s[i:], true, nil
		default:
			b.WriteByte(c)
		}
	}
}

// words splits s into every word, stopping at the first syntax error; the
// words before it are returned with the error, as systemd's loops that
// "ignore the rest" leave them applied.
func words(s string, flags wordFlags) ([]string, error) {
	var out []string
	for {
		w, rest, ok, err := nextWord(s, flags)
		if err != nil {
			return out, err
		}
		if !ok {
			return out, nil
		}
		out = append(out, w)
		s = rest
	}
}

// strtol is C's strtol/strtoul on all of s in base 8 or 10
// (unit.CStrtoul): the magnitude, whether s was negative, and false when
// s is not entirely a number or overflows 64 bits.
func strtol(s string, base int) (uint64, bool, bool) {
	v, neg, err := unit.CStrtoul(s, base, false)
	return v, neg, err == nil
}

// safeAtoi ports safe_atoi of systemd version: leading whitespace,
// "0b"/"0o"/"0x" and C octal prefixes, a sign, the whole string a number
// within int. From unit.C23Strtol, strtol itself takes a "0b" prefix
// too, so "0b0b101" is 5.
func safeAtoi(version int, s string) (int, bool) {
	s = strings.TrimLeft(s, whitespace)
	s, base := unit.MangleBase(s)
	v, neg, err := unit.CStrtoul(s, base, version >= unit.C23Strtol)
	if err != nil {
		return 0, false
	}
	if neg {
		if v > 1<<31 {
			return 0, false
		}
		return -int(v), true
	}
	if v > math.MaxInt32 {
		return 0, false
	}
	return int(v), true
}

// parseMode ports parse_mode: octal digits (base 8 given, so no prefix),
// no sign, at most 07777.
func parseMode(s string) (uint32, bool) {
	s = strings.TrimLeft(s, whitespace)
	if s != "" && (s[0] == '+' || s[0] == '-') {
		return 0, false
	}
	v, _, ok := strtol(s, 8)
	if !ok || v > 0o7777 {
		return 0, false
	}
	return uint32(v), true
}
