package install

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
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
	// checkOnly says that what also adds is never looked at, only
	// whether it fails (unit_file_lookup_state, whose context lives for
	// one lookup): also is called only for a name it fails.
	checkOnly bool
}

// parse runs config_parse over data: it reads the [Install] section
// (readSection) and applies it to p.info.
func (p *parser) parse(data []byte) error {
	return p.apply(readSection(data))
}

// section is a file's [Install] section as config_parse reads it, before
// anything depends on the name the file is loaded as: the lines are split,
// joined and checked, the list settings split into words. Applying it
// (parser.apply) does what depends on the name: whether Alias= and
// DefaultInstance= count, the specifiers of DefaultInstance= and Also=, and
// install_info_add of Also= names. An image can load one file under
// thousands of names (a unit with 10,000 aliases and links to it, each
// loading it): it is read once, however many names load it, and applying
// it costs a step for each setting that depends on the name, not a line.
type section struct {
	// lists are the list settings, each list's lines merged: they touch
	// only their list and never fail, and what a load that fails leaves
	// in the lists is never looked at (the unit is "bad"), so they apply
	// first, whatever lines of other settings come between them.
	lists [numLists]listOp
	// steps are the other settings, in the file's order.
	steps []sectionStep
	// err ended the reading: config_parse fails with it after the steps
	// (nil when the whole file was read, or the last step always fails).
	err error
}

// listKind names one of the list settings config_parse_strv reads.
type listKind uint8

const (
	listAlias listKind = iota
	listWantedBy
	listRequiredBy
	listUpheldBy
	numLists
)

// listKinds maps the list settings' keys to their kinds.
var listKinds = map[string]listKind{"Alias": listAlias, "WantedBy": listWantedBy, "RequiredBy": listRequiredBy, "UpheldBy": listUpheldBy}

// listOp is what the lines of one list setting do to its list: reset (an
// empty value among them) empties it first, then words are appended.
type listOp struct {
	set, reset bool
	words      []string
}

type stepKind uint8

const (
	// stepDefaultInstance is one DefaultInstance= line (value).
	stepDefaultInstance stepKind = iota
	// stepAlsoNames is a run of Also= words without "%" (names), of one
	// or more lines: what specifier_printf makes of them and whether
	// install_info_add takes them do not depend on the name loading the
	// file. bad, when below len(names), is the first that fails
	// (tooLong: in specifier_printf), and the last of the run.
	stepAlsoNames
	// stepAlsoWord is one Also= word with a "%" (value).
	stepAlsoWord
	// stepAlsoSyntax is the syntax error (err) extract_first_word met in
	// the Also= value value, after its words.
	stepAlsoSyntax
)

// sectionStep is one step of applying a section.
type sectionStep struct {
	kind    stepKind
	value   string
	names   []string
	bad     int
	tooLong bool
	err     error
}

// readSection reads data as config_parse does, up to what depends on the
// name the file is loaded as. It keeps nothing of data: every value it
// stores and every error it returns is a copy.
func readSection(data []byte) *section {
	sec := &section{}
	sec.err = scanLines(data, sec.line)
	if errors.Is(sec.err, errStopped) {
		sec.err = nil // the last step fails
	}
	return sec
}

// scanLines ports the line loop of config_parse over data: it calls line
// for every logical line (continuations joined) until one fails. It reads
// data in place: the strings line gets share data's bytes (or a buffer
// reused for the next line), so line must copy what it keeps, and data
// must not change during the call.
func scanLines(data []byte, line func(l string, section *string, inSection *bool) error) error {
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
		if err := line(cur, &section, &inSection); err != nil {
			return err
		}
		continuation, cont = nil, false
	}
	if cont {
		if err := line(string(continuation), &section, &inSection); err != nil {
			return err
		}
	}
	return nil
}

// line ports parse_line.
func (sec *section) line(l string, section *string, inSection *bool) error {
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
	return sec.assign(key, value)
}

// assign reads one [Install] item of unit_file_load: the name-independent
// part of it.
func (sec *section) assign(key, value string) error {
	if k, ok := listKinds[key]; ok {
		lo := &sec.lists[k]
		lo.set = true
		if value == "" {
			lo.reset, lo.words = true, nil
		}
		parseStrv(&lo.words, value)
		return nil
	}
	switch key {
	case "DefaultInstance":
		sec.steps = append(sec.steps, sectionStep{kind: stepDefaultInstance, value: strings.Clone(value)})
	case "Also":
		rest := value
		for {
			word, r, ok, err := unit.ExtractWord(rest, false, false)
			if err != nil {
				sec.steps = append(sec.steps, sectionStep{kind: stepAlsoSyntax, value: strings.Clone(value), err: err})
				// config_parse stops at this line whatever the name.
				return errStopped
			}
			if !ok {
				break
			}
			rest = r
			if strings.IndexByte(word, '%') >= 0 {
				sec.steps = append(sec.steps, sectionStep{kind: stepAlsoWord, value: word})
			} else if sec.alsoName(word) {
				return errStopped
			}
			if rest == "" {
				break
			}
		}
	}
	return nil
}

// alsoName adds an Also= word without specifiers to the run of them, and
// reports whether it fails, whatever the name loading the file: then
// config_parse stops at it.
func (sec *section) alsoName(word string) bool {
	n := len(sec.steps)
	if n == 0 || sec.steps[n-1].kind != stepAlsoNames {
		sec.steps = append(sec.steps, sectionStep{kind: stepAlsoNames})
		n++
	}
	st := &sec.steps[n-1]
	st.names = append(st.names, word)
	// specifier_printf copies a text without "%" up to its bound;
	// install_info_add takes only a valid name.
	st.tooLong = len(word) > unitNameMax
	if st.tooLong || !nameIsValid(word, nameAny) {
		st.bad = len(st.names) - 1
		return true
	}
	st.bad = len(st.names)
	return false
}

// errStopped ends readSection at a step that fails whatever the name.
var errStopped = errors.New("section read stopped")

// apply applies a section to p.info as config_parse's callbacks for the
// [Install] items of unit_file_load do, and returns config_parse's error.
func (p *parser) apply(sec *section) error {
	info := p.info
	if typeMayAlias(nameType(info.name)) {
		applyList(&info.aliases, sec.lists[listAlias])
	}
	applyList(&info.wantedBy, sec.lists[listWantedBy])
	applyList(&info.requiredBy, sec.lists[listRequiredBy])
	if p.upheldBy {
		applyList(&info.upheldBy, sec.lists[listUpheldBy])
	}
	for i := range sec.steps {
		st := &sec.steps[i]
		var err error
		switch st.kind {
		case stepDefaultInstance:
			err = p.defaultInstance(st.value)
		case stepAlsoNames:
			err = p.alsoNames(st)
		case stepAlsoWord:
			err = p.alsoWord(st.value)
		case stepAlsoSyntax:
			err = fmt.Errorf("parse Also=%q: %w", st.value, st.err)
		}
		if err != nil {
			return err
		}
	}
	return sec.err
}

// defaultInstance ports config_parse_default_instance.
func (p *parser) defaultInstance(value string) error {
	info := p.info
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
	return nil
}

// alsoNames ports config_parse_also for a run of words without specifiers.
func (p *parser) alsoNames(st *sectionStep) error {
	ok := st.names[:st.bad]
	if p.also != nil && !p.checkOnly {
		for _, n := range ok {
			if err := p.also(n); err != nil {
				return err
			}
		}
	}
	// The run's names are shared by every name loading the file: the
	// list gets them clipped, so that appending to it copies them.
	if len(p.info.also) == 0 {
		if len(ok) > 0 {
			p.info.also = slices.Clip(ok)
		}
	} else {
		p.info.also = append(p.info.also, ok...)
	}
	if st.bad == len(st.names) {
		return nil
	}
	return p.addAlso(st.names[st.bad], st.tooLong)
}

// alsoWord ports config_parse_also for a word with specifiers.
func (p *parser) alsoWord(word string) error {
	printed, err := p.spec.printf(word, p.info)
	if err != nil {
		return fmt.Errorf("expand Also=%q: %w", word, err)
	}
	if p.also != nil && (!p.checkOnly || !nameIsValid(printed, nameAny)) {
		if err := p.also(printed); err != nil {
			return err
		}
	} else if !nameIsValid(printed, nameAny) {
		return fmt.Errorf("add Also=%q: %w", printed, errInvalid)
	}
	p.info.also = append(p.info.also, printed)
	return nil
}

// addAlso fails the Also= name n, which specifier_printf refuses as too long
// or install_info_add as invalid.
func (p *parser) addAlso(n string, tooLong bool) error {
	switch {
	case tooLong:
		return fmt.Errorf("expand Also=%q: %w", n, errNameTooLong)
	case p.also != nil:
		if err := p.also(n); err != nil {
			return err
		}
	}
	return fmt.Errorf("add Also=%q: %w", n, errInvalid)
}

// applyList applies the lines of one list setting. The words are the
// section's, shared by every name that loads the file: the list gets them
// clipped, so that appending to it (a drop-in's lines) copies them.
func applyList(list *[]string, op listOp) {
	switch {
	case !op.set:
	case op.reset || len(*list) == 0:
		if op.words == nil {
			if op.reset {
				*list = nil
			}
			return
		}
		*list = slices.Clip(op.words)
	default:
		*list = append(*list, op.words...)
	}
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
		word, r, ok, err := unit.ExtractWord(rest, true, true)
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
