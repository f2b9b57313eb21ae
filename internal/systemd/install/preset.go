package install

import (
	"bytes"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
	"github.com/amilint/amilint/internal/systemd/version"
)

// PresetDirs are systemd 252's system preset directories (CONF_PATHS
// "systemd/system-preset" of a split-usr build), in precedence order.
var PresetDirs = []string{
	"/etc/systemd/system-preset",
	"/run/systemd/system-preset",
	"/usr/local/lib/systemd/system-preset",
	"/usr/lib/systemd/system-preset",
	"/lib/systemd/system-preset",
}

// presetDirsOf are the preset directories of systemd version v: from
// unit.SplitUsrRemoved on there is no /lib/systemd/system-preset.
func presetDirsOf(v int) []string {
	if v < unit.SplitUsrRemoved {
		return PresetDirs
	}
	return PresetDirs[:len(PresetDirs)-1]
}

// PresetIgnoreSince is the systemd version that knows the "ignore" preset
// action; before it such a line does not parse and is skipped.
const PresetIgnoreSince = 254

// PresetAction is what the preset files say about a unit.
type PresetAction string

// Preset actions. A unit no rule matches is enabled, as systemd does.
const (
	PresetEnable  PresetAction = "enable"
	PresetDisable PresetAction = "disable"
	// PresetIgnore leaves the unit as it is (systemd 254 and later).
	PresetIgnore PresetAction = "ignore"
)

type presetRule struct {
	pattern   string
	action    PresetAction
	instances []string
}

// Presets are the parsed rules of an image's *.preset files.
type Presets struct {
	rules []presetRule
	// Files are the preset files read, in order of precedence.
	Files []string
}

// LoadPresets reads the image's preset files the way read_presets of
// systemd version sdVersion (version.Default when 0) does: *.preset of
// every preset directory, the first directory winning for a file name,
// files in name order, lines in file order; unparseable lines are ignored.
func LoadPresets(fsys *rootfs.FS, sdVersion int) (*Presets, error) {
	if sdVersion == 0 {
		sdVersion = version.Default
	}
	return newBareIndex(fsys).loadPresets(sdVersion), nil
}

func (x *index) loadPresets(v int) *Presets {
	ps := &Presets{}
	resolved, shown := x.confFiles(presetDirsOf(v), ".preset")
	for k, r := range resolved {
		data, err := x.readFileFollow(r)
		if err != nil {
			continue
		}
		ps.Files = append(ps.Files, shown[k])
		lines, err := readLines(data)
		if err != nil {
			continue
		}
		for _, line := range lines {
			l := strings.Trim(line, whitespace)
			if l == "" || l[0] == '#' || l[0] == ';' {
				continue
			}
			if p, ok := firstWord(l, "enable"); ok {
				name, rest, found, err := unit.ExtractWord(p, false, true)
				if err != nil || !found {
					continue
				}
				rule := presetRule{pattern: name, action: PresetEnable}
				if rest != "" {
					if !nameIsValid(name, nameTemplate) {
						continue
					}
					rule.instances = strings.FieldsFunc(rest, func(r rune) bool {
						return strings.ContainsRune(whitespace, r)
					})
				}
				ps.rules = append(ps.rules, rule)
				continue
			}
			if p, ok := firstWord(l, "disable"); ok {
				ps.rules = append(ps.rules, presetRule{pattern: p, action: PresetDisable})
				continue
			}
			if p, ok := firstWord(l, "ignore"); ok && v >= PresetIgnoreSince {
				ps.rules = append(ps.rules, presetRule{pattern: p, action: PresetIgnore})
			}
		}
	}
	return ps
}

// firstWord ports first_word: s starts with word followed by whitespace or
// the end; it returns what follows the whitespace.
func firstWord(s, word string) (string, bool) {
	if !strings.HasPrefix(s, word) {
		return "", false
	}
	p := s[len(word):]
	if p == "" {
		return p, true
	}
	nw := strings.TrimLeft(p, whitespace)
	if len(nw) == len(p) {
		return "", false
	}
	return nw, true
}

// Query ports query_presets as unit_file_query_preset calls it: the first
// rule whose pattern matches name (fnmatch, no escapes) decides; no match
// means enable.
func (p *Presets) Query(name string) PresetAction {
	for _, r := range p.rules {
		if fnmatch(r.pattern, name) {
			return r.action
		}
	}
	return PresetEnable
}

// ShowsPreset reports whether systemctl list-unit-files prints a vendor
// preset for a unit in state s: not for aliases, static, generated and
// transient units, which enable/disable cannot change.
func (s State) ShowsPreset() bool {
	switch s {
	case Alias, Static, Generated, Transient:
		return false
	}
	return true
}

// FirstBoot reports whether systemd will treat the image's next boot as its
// first boot and apply presets to every unit (systemctl preset-all): when
// /etc/machine-id is missing or says "uninitialized" (an existing empty
// file is not a first boot, machine-id(5)).
func FirstBoot(fsys *rootfs.FS) bool {
	// A link to /dev/null resolves to a device the image does not hold
	// at rest; PID 1 reads it at boot as empty, which is not a first boot.
	if res, err := fsys.Resolve("etc/machine-id"); err == nil && res == rootfs.NullName {
		return false
	}
	x := newBareIndex(fsys)
	r, err := x.chase("/etc/machine-id", false, false)
	if err != nil {
		return true
	}
	data, err := x.readFileFollow(r)
	if err != nil {
		return true
	}
	// machine-id(5), systemd 252: an existing but empty file is not a
	// first boot; "uninitialized" is.
	return string(bytes.TrimSpace(data)) == "uninitialized"
}

// fnmatch ports fnmatch(3) with FNM_NOESCAPE and no other flags: "*", "?"
// and bracket expressions ("[a-z]", "[!x]", "[^x]", "[[:alpha:]]"); a
// backslash is an ordinary character; an unterminated "[" is literal.
func fnmatch(pattern, name string) bool {
	px, nx := 0, 0
	starP, starN := -1, -1
	for nx < len(name) || px < len(pattern) {
		if px < len(pattern) {
			switch c := pattern[px]; c {
			case '*':
				starP, starN = px, nx
				px++
				continue
			case '?':
				if nx < len(name) {
					px++
					nx++
					continue
				}
			case '[':
				if nx < len(name) {
					if ok, width, valid := matchBracket(pattern[px:], name[nx]); valid {
						if ok {
							px += width
							nx++
							continue
						}
					} else if name[nx] == '[' {
						px++
						nx++
						continue
					}
				}
			default:
				if nx < len(name) && name[nx] == c {
					px++
					nx++
					continue
				}
			}
		}
		if starP >= 0 && starN < len(name) {
			starN++
			px, nx = starP+1, starN
			continue
		}
		return false
	}
	return true
}

// matchBracket matches c against the bracket expression at the start of p;
// it returns whether it matched, the expression's width and whether it is
// a complete expression.
func matchBracket(p string, c byte) (bool, int, bool) {
	i := 1
	negate := false
	if i < len(p) && (p[i] == '!' || p[i] == '^') {
		negate = true
		i++
	}
	matched := false
	first := true
	for i < len(p) {
		if p[i] == ']' && !first {
			return matched != negate, i + 1, true
		}
		first = false
		if p[i] == '[' && i+1 < len(p) && p[i+1] == ':' {
			if end := strings.Index(p[i+2:], ":]"); end >= 0 {
				if classMatch(p[i+2:i+2+end], c) {
					matched = true
				}
				i += 2 + end + 2
				continue
			}
		}
		lo := p[i]
		if i+2 < len(p) && p[i+1] == '-' && p[i+2] != ']' {
			hi := p[i+2]
			if lo <= c && c <= hi {
				matched = true
			}
			i += 3
			continue
		}
		if lo == c {
			matched = true
		}
		i++
	}
	return false, 0, false
}

func classMatch(class string, c byte) bool {
	switch class {
	case "alpha":
		return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	case "digit":
		return c >= '0' && c <= '9'
	case "alnum":
		return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
	case "upper":
		return c >= 'A' && c <= 'Z'
	case "lower":
		return c >= 'a' && c <= 'z'
	case "space":
		return strings.IndexByte(" \t\n\r\v\f", c) >= 0
	case "xdigit":
		return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
	case "punct":
		return c > ' ' && c < 0x7f && !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9')
	}
	return false
}
