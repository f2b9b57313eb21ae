package unit

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxLine is systemd's LONG_LINE_MAX: a longer line fails the whole file.
const maxLine = 1 << 20

// ErrLineTooLong reports a line or continuation longer than maxLine.
var ErrLineTooLong = errors.New("line too long")

// ErrInvalidUTF8 reports a line that is not valid UTF-8 by ValidUTF8.
var ErrInvalidUTF8 = errors.New("line is not UTF-8 clean")

// ErrBadSection reports a section header systemd refuses ("[Unit", "[a\"b]").
var ErrBadSection = errors.New("invalid section header")

// ParseConfig reads a unit file or drop-in the way systemd 252's
// config_parse does, which is more lenient than go-systemd's deserializer
// in exactly the places an image may exercise: a line without '=', an
// assignment before any section and lines longer than 2 KiB are ignored
// or accepted by systemd, so they must not make the loader reject a unit
// systemd loads; a line that is not UTF-8 clean (by systemd's stricter
// definition, see ValidUTF8) fails the file. It returns the assignments
// read before any fatal error, as systemd applies them, and the error
// (ErrLineTooLong, ErrInvalidUTF8, ErrBadSection) that makes systemd
// refuse the file.
func ParseConfig(data []byte) ([]*Option, error) {
	var (
		opts         []*Option
		section      string
		inSection    bool
		continuation []byte
		cont         bool
		bomSeen      bool
	)
	lines := SplitLines(data)
	for _, raw := range lines {
		if len(raw) > maxLine {
			return opts, ErrLineTooLong
		}
		trimmed := bytes.TrimLeft(raw, " \t\n\r")
		if len(trimmed) > 0 && (trimmed[0] == '#' || trimmed[0] == ';') {
			continue
		}
		l := raw
		if !bomSeen {
			if b, ok := bytes.CutPrefix(raw, []byte("\xef\xbb\xbf")); ok {
				l, bomSeen = b, true
			}
		}
		var p []byte
		if cont {
			if len(continuation)+len(l) > maxLine {
				return opts, ErrLineTooLong
			}
			continuation = append(continuation, l...)
			p = continuation
		} else {
			p = l
		}
		// Only l needs the scan: systemd scans the whole continuation
		// again every line (quadratic in its length), but a continuation
		// ends in the blank that replaced its backslash, where the scan
		// is never escaped, so its verdict on p is its verdict on l.
		escaped := false
		for _, c := range l {
			if escaped {
				escaped = false
			} else if c == '\\' {
				escaped = true
			}
		}
		if escaped {
			if !cont {
				continuation = append([]byte(nil), l...)
				cont = true
			}
			continuation[len(continuation)-1] = ' '
			continue
		}
		o, err := parseLine(string(p), &section, &inSection)
		if err != nil {
			return opts, err
		}
		if o != nil {
			opts = append(opts, o)
		}
		continuation, cont = nil, false
	}
	if cont {
		o, err := parseLine(string(continuation), &section, &inSection)
		if err != nil {
			return opts, err
		}
		if o != nil {
			opts = append(opts, o)
		}
	}
	return opts, nil
}

// SplitLines splits data at systemd's line ends: "\n", "\r", "\r\n",
// "\n\r" and NUL, as read_line does.
func SplitLines(data []byte) [][]byte {
	var out [][]byte
	start := 0
	for i := 0; i < len(data); i++ {
		c := data[i]
		if c != '\n' && c != '\r' && c != 0 {
			continue
		}
		out = append(out, data[start:i])
		if c != 0 && i+1 < len(data) {
			if n := data[i+1]; (n == '\n' || n == '\r') && n != c {
				i++
			}
		}
		start = i + 1
	}
	if start < len(data) {
		out = append(out, data[start:])
	}
	return out
}

func parseLine(l string, section *string, inSection *bool) (*Option, error) {
	l = strings.Trim(l, " \t\n\r")
	if l == "" {
		return nil, nil
	}
	if !ValidUTF8(l) {
		// "not UTF-8 clean": the whole file fails, despite the message's
		// "ignoring".
		return nil, ErrInvalidUTF8
	}
	if l[0] == '[' {
		if l[len(l)-1] != ']' || len(l) < 2 {
			return nil, fmt.Errorf("%w %q", ErrBadSection, l)
		}
		n := l[1 : len(l)-1]
		if !StringIsSafe(n) {
			return nil, fmt.Errorf("%w %q", ErrBadSection, l)
		}
		// "[]" is an unknown section: systemd ignores what follows.
		*section, *inSection = n, n != ""
		return nil, nil
	}
	if !*inSection {
		return nil, nil // "Assignment outside of section. Ignoring."
	}
	k, v, ok := strings.Cut(l, "=")
	if !ok || k == "" {
		return nil, nil // "Missing '=', ignoring line."
	}
	return &Option{Section: *section, Name: strings.Trim(k, " \t\n\r"), Value: strings.Trim(v, " \t\n\r")}, nil
}

// StringIsSafe is systemd's string_is_safe: no control characters, quotes
// or backslashes.
func StringIsSafe(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < ' ' || c == 127 || c == '\\' || c == '"' || c == '\'' {
			return false
		}
	}
	return true
}

// ValidUTF8 is systemd's utf8_is_valid: well-formed UTF-8 whose every
// character is a valid one by unichar_is_valid, which, unlike
// utf8.ValidString, refuses the noncharacters U+FDD0 to U+FDEF and the
// last two of every plane (U+FFFE, U+FFFF, U+1FFFE, ...).
func ValidUTF8(s string) bool {
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || r >= 0xFDD0 && r <= 0xFDEF || r&0xFFFE == 0xFFFE {
			return false
		}
		i += n
	}
	return true
}

// ParseBoolean is parse_boolean: whether v is a boolean word, and which.
func ParseBoolean(v string) (value, ok bool) {
	switch strings.ToLower(v) {
	case "1", "yes", "y", "true", "t", "on":
		return true, true
	case "0", "no", "n", "false", "f", "off":
		return false, true
	}
	return false, false
}
