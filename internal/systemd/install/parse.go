package install

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// This file ports the part of systemd 252's config_parse (conf-parser.c)
// that install.c uses to read the [Install] section of unit files and
// drop-ins. It is written out rather than delegated to go-systemd's parser
// because the enablement state depends on exactly which inputs systemd
// rejects (a line of 1 MiB, a section header without "]", invalid UTF-8
// outside comments, a bad Also= name make the unit "bad") and which it
// accepts (comments inside continuations, NUL and CR line ends, a BOM).

// longLineMax is systemd's LONG_LINE_MAX.
const longLineMax = 1024 * 1024

// whitespace is systemd's WHITESPACE.
const whitespace = " \t\n\r"

// isSpace reports whether c is in whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// trimLeftSpace is strings.TrimLeft(s, whitespace) without building a set.
func trimLeftSpace(s string) string {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return s[i:]
}

// trimSpace is strings.Trim(s, whitespace) without building a set.
func trimSpace(s string) string {
	s = trimLeftSpace(s)
	j := len(s)
	for j > 0 && isSpace(s[j-1]) {
		j--
	}
	return s[:j]
}

// Parse errors. Any of them makes systemctl report the unit as "bad".
var (
	errLineTooLong   = errors.New("line too long")
	errInvalidUTF8   = errors.New("string is not UTF-8 clean")
	errSectionHeader = errors.New("invalid section header")
	errBadSpecifier  = errors.New("invalid specifier")
	errNameTooLong   = errors.New("name too long")
	errBadInstance   = errors.New("invalid DefaultInstance= value")
	errSyntax        = errors.New("invalid syntax")
)

// readLines splits data the way systemd's read_line does: "\n", "\r",
// "\r\n", "\n\r" and NUL each end one line; a line of longLineMax bytes or
// more is an error. The lines share one copy of data.
func readLines(data []byte) ([]string, error) {
	if len(data) == 0 {
		return nil, nil
	}
	s := string(data)
	lines := make([]string, 0, bytes.Count(data, []byte{'\n'})+1)
	for i := 0; i < len(s); {
		var line string
		line, i = nextLine(s, i)
		if len(line) >= longLineMax {
			return nil, errLineTooLong
		}
		lines = append(lines, line)
	}
	return lines, nil
}

// checkLines reports a line of s of longLineMax bytes or more.
func checkLines(s string) error {
	for i := 0; i < len(s); {
		var line string
		line, i = nextLine(s, i)
		if len(line) >= longLineMax {
			return errLineTooLong
		}
	}
	return nil
}

// nextLine returns the line of s that starts at i, without its end, and
// where the next line starts: a line is a run of bytes other than "\n",
// "\r" and NUL, then one end made of each of them at most once, a NUL
// closing it.
func nextLine(s string, i int) (string, int) {
	const (
		eolNone = 0
		eolTen  = 1
		eolCR   = 2
		eolZero = 4
	)
	categorize := func(c byte) int {
		switch c {
		case '\n':
			return eolTen
		case '\r':
			return eolCR
		case 0:
			return eolZero
		}
		return eolNone
	}
	start := i
	for i < len(s) && categorize(s[i]) == eolNone {
		i++
	}
	line := s[start:i]
	prev := eolNone
	for i < len(s) {
		eol := categorize(s[i])
		if prev&eolZero != 0 || eol == eolNone || prev&eol != 0 {
			break
		}
		prev |= eol
		i++
	}
	return line, i
}

// knownSections is the section list install.c passes to config_parse:
// [Install] is parsed; the "-" entries (known, skipped silently) only
// matter literally, since a section named "-Unit" is a known one too.
var knownSections = map[string]bool{
	"Install": true, "-Unit": true, "-Automount": true, "-Device": true, "-Mount": true, "-Path": true,
	"-Scope": true, "-Service": true, "-Slice": true, "-Socket": true, "-Swap": true, "-Target": true,
	"-Timer": true,
}

// parser holds what one config_parse call of install.c sees.
type parser struct {
	info *installInfo
	// also is called for every Also= name, as config_parse_also calls
	// install_info_add; an error aborts the parse.
	also func(name string) error
	spec *specifiers
	// upheldBy accepts UpheldBy= (systemd 254 and later).
	upheldBy bool
}

// parse runs config_parse over data. It reads data in place and keeps
// nothing of it: every value it stores (extractWord's words, printf's
// expansions) and every error it returns is a copy, so data stays the
// caller's and must not change during the call.
func (p *parser) parse(data []byte) error {
	text := unsafe.String(unsafe.SliceData(data), len(data))
	if len(text) >= longLineMax {
		// Only a text this long can hold a line this long; systemd
		// fails before it applies any line.
		if err := checkLines(text); err != nil {
			return err
		}
	}
	var (
		section   string
		inSection bool
		bomSeen   bool
		cont      bool
		// continuation is the text of the lines continued so far, its
		// final backslash already a blank. It grows in place: building
		// a new string of it every line was quadratic in its length.
		continuation []byte
	)
	// Without CR or NUL every line ends at the next LF alone.
	lfOnly := strings.IndexByte(text, '\r') < 0 && strings.IndexByte(text, 0) < 0
	for i := 0; i < len(text); {
		var buf string
		if lfOnly {
			j := strings.IndexByte(text[i:], '\n')
			if j < 0 {
				j = len(text) - i
			}
			buf, i = text[i:i+j], i+j+1
		} else {
			buf, i = nextLine(text, i)
		}
		l := trimLeftSpace(buf)
		if l != "" && (l[0] == '#' || l[0] == ';') {
			continue
		}
		l = buf
		if !bomSeen && strings.HasPrefix(buf, "\xef\xbb\xbf") {
			l = buf[3:]
			bomSeen = true
		}
		var cur string
		if cont {
			if len(continuation)+len(l) > longLineMax {
				return errLineTooLong
			}
			continuation = append(continuation, l...)
			// cur is read before continuation changes again.
			cur = unsafe.String(unsafe.SliceData(continuation), len(continuation))
		} else {
			cur = l
		}
		// The line continues when it ends in an unescaped backslash: an
		// odd run of them.
		n := 0
		for n < len(cur) && cur[len(cur)-1-n] == '\\' {
			n++
		}
		if n%2 == 1 {
			if !cont {
				continuation, cont = []byte(l), true
			}
			continuation[len(continuation)-1] = ' '
			continue
		}
		if err := p.line(cur, &section, &inSection); err != nil {
			return err
		}
		continuation, cont = nil, false
	}
	if cont {
		if err := p.line(string(continuation), &section, &inSection); err != nil {
			return err
		}
	}
	return nil
}

// line ports parse_line.
func (p *parser) line(l string, section *string, inSection *bool) error {
	l = trimSpace(l)
	if l == "" {
		return nil
	}
	if !unit.ValidUTF8(l) {
		return errInvalidUTF8
	}
	if l[0] == '[' {
		if l[len(l)-1] != ']' || len(l) < 2 {
			return fmt.Errorf("%w %q", errSectionHeader, l)
		}
		n := l[1 : len(l)-1]
		if !unit.StringIsSafe(n) {
			return fmt.Errorf("%w %q", errSectionHeader, l)
		}
		if knownSections[n] {
			*section, *inSection = n, true
		} else {
			*section, *inSection = "", false
		}
		return nil
	}
	if !*inSection {
		return nil
	}
	e := strings.IndexByte(l, '=')
	if e <= 0 {
		return nil
	}
	if *section != "Install" {
		return nil
	}
	key := trimSpace(l[:e])
	value := trimSpace(l[e+1:])
	return p.assign(key, value)
}

// assign ports the [Install] items of unit_file_load.
func (p *parser) assign(key, value string) error {
	info := p.info
	switch key {
	case "Alias":
		if !typeMayAlias(nameType(info.name)) {
			return nil
		}
		parseStrv(&info.aliases, value)
	case "WantedBy":
		parseStrv(&info.wantedBy, value)
	case "RequiredBy":
		parseStrv(&info.requiredBy, value)
	case "UpheldBy":
		if p.upheldBy {
			parseStrv(&info.upheldBy, value)
		}
	case "DefaultInstance":
		if nameIsValid(info.name, nameInstance) || !nameIsValid(info.name, nameTemplate) {
			return nil
		}
		printed, err := p.spec.printf(value, info)
		if err != nil {
			return fmt.Errorf("expand DefaultInstance=%q: %w", value, err)
		}
		if printed != "" && !instanceIsValid(printed) {
			return fmt.Errorf("%w %q", errBadInstance, printed)
		}
		info.defaultInstance = printed
	case "Also":
		rest := value
		for {
			word, r, ok, err := extractWord(rest, false, false)
			if err != nil {
				return fmt.Errorf("parse Also=%q: %w", value, err)
			}
			if !ok {
				break
			}
			rest = r
			printed, err := p.spec.printf(word, info)
			if err != nil {
				return fmt.Errorf("expand Also=%q: %w", word, err)
			}
			if p.also != nil {
				if err := p.also(printed); err != nil {
					return err
				}
			} else if !nameIsValid(printed, nameAny) {
				return fmt.Errorf("add Also=%q: %w", printed, errInvalid)
			}
			info.also = append(info.also, printed)
			if rest == "" {
				break
			}
		}
	}
	return nil
}

// parseStrv ports config_parse_strv: an empty value resets the list, a
// syntax error keeps the words before it and ignores the rest.
func parseStrv(list *[]string, value string) {
	if value == "" {
		*list = nil
		return
	}
	rest := value
	for {
		word, r, ok, err := extractWord(rest, true, true)
		if err != nil || !ok {
			return
		}
		*list = append(*list, word)
		if r == "" {
			return
		}
		rest = r
	}
}

// extractWord ports extract_first_word with WHITESPACE separators for the
// flag sets install.c uses: unquote is EXTRACT_UNQUOTE, retainEscape is
// EXTRACT_RETAIN_ESCAPE. It returns the word, the rest ("" when systemd
// would set the cursor to NULL), and whether a word was found.
func extractWord(s string, unquote, retainEscape bool) (string, string, bool, error) {
	isSep := isSpace
	i := 0
	for i < len(s) && isSep(s[i]) {
		i++
	}
	if i >= len(s) {
		return "", "", false, nil
	}
	var b []byte
	var quote byte
	backslash := false
	for {
		if i >= len(s) {
			if backslash || quote != 0 {
				return "", "", false, errSyntax
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
		case isSep(c):
			for i < len(s) && isSep(s[i]) {
				i++
			}
			if i >= len(s) {
				return string(b), "", true, nil
			}
			return string(b), s[i:], true, nil
		default:
			b = append(b, c)
		}
		i++
	}
}
