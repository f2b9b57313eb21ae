package boot

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/amilint/amilint/internal/unit"
)

// maxLine is systemd's LONG_LINE_MAX: a longer line fails the whole file.
const maxLine = 1 << 20

// errLineTooLong reports a line or continuation longer than maxLine.
var errLineTooLong = errors.New("line too long")

// errBadSection reports a section header systemd refuses ("[Unit", "[a\"b]").
var errBadSection = errors.New("invalid section header")

// parseConfig reads a unit file or drop-in the way systemd 252's
// config_parse does, which is more lenient than go-systemd's deserializer
// (used by unit.Parse) in exactly the places an image may exercise: a line
// without '=', an assignment before any section, invalid UTF-8 and lines
// longer than 2 KiB are ignored or accepted by systemd, so they must not
// make the loader reject a unit systemd loads. It returns the assignments
// read before any fatal error, as systemd applies them, and the error
// (errLineTooLong, errBadSection) that makes systemd refuse the file.
func parseConfig(data []byte) ([]*unit.Option, error) {
	var (
		opts         []*unit.Option
		section      string
		inSection    bool
		continuation []byte
		cont         bool
		bomSeen      bool
	)
	lines := splitLines(data)
	for _, raw := range lines {
		if len(raw) > maxLine {
			return opts, errLineTooLong
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
				return opts, errLineTooLong
			}
			continuation = append(continuation, l...)
			p = continuation
		} else {
			p = l
		}
		escaped := false
		for _, c := range p {
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

// splitLines splits data at systemd's line ends: "\n", "\r", "\r\n",
// "\n\r" and NUL, as read_line does.
func splitLines(data []byte) [][]byte {
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

func parseLine(l string, section *string, inSection *bool) (*unit.Option, error) {
	l = strings.Trim(l, " \t\n\r")
	if l == "" {
		return nil, nil
	}
	if !utf8.ValidString(l) {
		return nil, nil // systemd: "invalid UTF-8, ignoring"
	}
	if l[0] == '[' {
		if l[len(l)-1] != ']' || len(l) < 2 {
			return nil, fmt.Errorf("%w %q", errBadSection, l)
		}
		n := l[1 : len(l)-1]
		if !safeString(n) {
			return nil, fmt.Errorf("%w %q", errBadSection, l)
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
	return &unit.Option{Section: *section, Name: strings.Trim(k, " \t\n\r"), Value: strings.Trim(v, " \t\n\r")}, nil
}

// safeString is systemd's string_is_safe: no control characters, quotes or
// backslashes.
func safeString(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < ' ' || c == 127 || c == '\\' || c == '"' || c == '\'' {
			return false
		}
	}
	return true
}
