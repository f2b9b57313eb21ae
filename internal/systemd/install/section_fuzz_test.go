package install

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// lineParser is config_parse as this package first ported it, one pass
// applying each line to the info as it is read: the reference FuzzSection
// holds readSection and apply to.
type lineParser struct {
	info *installInfo
	// also is called for every Also= name, as config_parse_also calls
	// install_info_add; an error aborts the parse.
	also func(name string) error
	spec *specifiers
	// upheldBy accepts UpheldBy= (systemd 254 and later).
	upheldBy bool
}

// parse runs config_parse over data. It reads data in place and keeps
// nothing of it: every value it stores (ExtractWord's words, printf's
// expansions) and every error it returns is a copy, so data stays the
// caller's and must not change during the call.
func (p *lineParser) parse(data []byte) error {
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
func (p *lineParser) line(l string, section *string, inSection *bool) error {
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
func (p *lineParser) assign(key, value string) error {
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
			word, r, ok, err := unit.ExtractWord(rest, false, false)
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

// FuzzSection holds a section read once and applied to a name to the
// one-pass parse of the file as that name: the same error, and on success
// the same info, and the same Also= names added in the same order (all of
// them; checking only, those it fails). Each input is applied to the name
// and to its template or an instance of it, so one section serves several
// names, as it does for a unit's aliases.
func FuzzSection(f *testing.F) {
	for _, c := range []string{
		"[Install]\nAlias=a.service b.service\nWantedBy=x.target\nAlias=\nAlias=c.service\n",
		"[Install]\nAlso=a.service %n.x %i.y\nDefaultInstance=%p\nAlso=%N.service\n",
		"[Install]\nAlso=ok.service " + strings.Repeat("l", 260) + ".service\nWantedBy=z.target\n",
		"[Install]\nAlso=bad..name\nRequiredBy=r.target\nUpheldBy=u.target\n",
		"[Install]\nAlso=a.service\\\n b.service\nAlso=%z\n[Unit]\nAlias=no.service\n",
		"[Install]\nDefaultInstance=%m\nAlso=%i\n\xff\n",
	} {
		f.Add([]byte(c), "t@.service")
		f.Add([]byte(c), "x.mount")
	}
	spec := &specifiers{machineID: "0123456789abcdef0123456789abcdef"}
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		if !nameIsValid(name, nameAny) {
			name = "fuzz.service"
		}
		names := []string{name}
		if tmpl, err := nameTemplateOf(name); err == nil {
			names = append(names, tmpl)
		} else if nameIsValid(name, nameTemplate) {
			if inst, err := nameReplaceInstance(name, "i"); err == nil {
				names = append(names, inst)
			}
		}
		sec := readSection(data)
		for _, n := range names {
			for _, upheldBy := range []bool{false, true} {
				var wantAdded []string
				want := &installInfo{name: n}
				lp := lineParser{info: want, spec: spec, upheldBy: upheldBy, also: func(a string) error {
					if !nameIsValid(a, nameAny) {
						return fmt.Errorf("%q: %w", a, errInvalid)
					}
					wantAdded = append(wantAdded, a)
					return nil
				}}
				wantErr := lp.parse(slices.Clone(data))
				for _, checkOnly := range []bool{false, true} {
					var added []string
					got := &installInfo{name: n}
					p := parser{info: got, spec: spec, upheldBy: upheldBy, checkOnly: checkOnly, also: func(a string) error {
						if !nameIsValid(a, nameAny) {
							return fmt.Errorf("%q: %w", a, errInvalid)
						}
						added = append(added, a)
						return nil
					}}
					err := p.apply(sec)
					if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) {
						t.Fatalf("%s (checkOnly %v): error %v, one pass %v", n, checkOnly, err, wantErr)
					}
					if err != nil {
						continue
					}
					if !equalInfo(got, want) {
						t.Fatalf("%s (checkOnly %v): %+v, one pass %+v", n, checkOnly, got, want)
					}
					if !checkOnly && !slices.Equal(added, wantAdded) {
						t.Fatalf("%s: added %q, one pass %q", n, added, wantAdded)
					}
					if checkOnly && len(added) > 0 {
						t.Fatalf("%s: checking only, added %q", n, added)
					}
				}
				// Without a callback both check the names themselves.
				want, got := &installInfo{name: n}, &installInfo{name: n}
				lp = lineParser{info: want, spec: spec, upheldBy: upheldBy}
				wantErr = lp.parse(slices.Clone(data))
				p := parser{info: got, spec: spec, upheldBy: upheldBy}
				err := p.apply(sec)
				if (err == nil) != (wantErr == nil) || (err != nil && err.Error() != wantErr.Error()) || (err == nil && !equalInfo(got, want)) {
					t.Fatalf("%s without callback: %+v, %v; one pass %+v, %v", n, got, err, want, wantErr)
				}
			}
		}
	})
}

// equalInfo compares what parsing sets of two infos, a nil list apart from
// an empty one.
func equalInfo(a, b *installInfo) bool { return reflect.DeepEqual(a, b) }
