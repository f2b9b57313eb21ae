package security

import (
	"errors"
	"math"
	"strings"
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

// strtol ports C's strtol/strtoul on s with base 0, 2, 8, 10 or 16. It returns the value,
// whether s was negative, and false when s is not entirely a number or
// overflows 64 bits.
func strtol(s string, base int) (uint64, bool, bool) {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	switch {
	case (base == 0 || base == 16) && len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && hexDigit(s[2]):
		s, base = s[2:], 16
	case base == 0 && len(s) > 1 && s[0] == '0':
		base = 8
	case base == 0:
		base = 10
	}
	if s == "" {
		return 0, neg, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		d := digitVal(s[i])
		if d < 0 || d >= base {
			return 0, neg, false
		}
		if v > (math.MaxUint64-uint64(d))/uint64(base) {
			return 0, neg, false
		}
		v = v*uint64(base) + uint64(d)
	}
	return v, neg, true
}

func hexDigit(c byte) bool { d := digitVal(c); return d >= 0 && d < 16 }

func digitVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'z':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'Z':
		return int(c-'A') + 10
	}
	return -1
}

// mangleBase is mangle_base: "0b"/"0o" prefixes when the base is 0.
func mangleBase(s string, base int) (string, int) {
	if base != 0 {
		return s, base
	}
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'b' || s[1] == 'B') {
		return s[2:], 2
	}
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'o' || s[1] == 'O') {
		return s[2:], 8
	}
	return s, base
}

// safeAtoi ports safe_atoi: leading whitespace, "0b"/"0o"/"0x" and C
// octal prefixes, a sign, the whole string a number within int.
func safeAtoi(s string) (int, bool) {
	s = strings.TrimLeft(s, whitespace)
	s, base := mangleBase(s, 0)
	v, neg, ok := strtol(s, base)
	if !ok {
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
