package install

import (
	"fmt"
	"strings"
)

// specifiers ports install_name_printf (install-printf.c): the "%x"
// specifiers systemd expands in Also= and DefaultInstance=. Values that
// depend on the running host in systemctl (%H, %b, %v) are fixed
// placeholders: they only ever matter for whether the result is a valid
// unit name, and the placeholders are valid name characters like the real
// values.
type specifiers struct {
	// machineID is the image's /etc/machine-id or "" when it is missing or
	// not a valid ID (systemctl then fails %m).
	machineID string
	// osRelease holds the image's os-release fields; nil when the image has
	// none (systemctl then fails %o, %w, %W, %A, %B and %M).
	osRelease map[string]string
}

// osField returns an os-release field for a specifier: an error without an
// os-release file, "" when the field is missing.
func (s *specifiers) osField(k string) (string, bool, error) {
	if s.osRelease == nil {
		return "", true, fmt.Errorf("no os-release: %w", errBadSpecifier)
	}
	return s.osRelease[k], true, nil
}

// possibleSpecifiers is systemd's POSSIBLE_SPECIFIERS: an unknown one of
// these is an error, any other character after "%" is kept literally.
const possibleSpecifiers = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ%"

// printf ports specifier_printf with install.c's table and UNIT_NAME_MAX.
func (s *specifiers) printf(text string, info *installInfo) (string, error) {
	var b strings.Builder
	percent := false
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case percent:
			percent = false
			if c == '%' {
				b.WriteByte('%')
				break
			}
			w, known, err := s.lookup(c, info)
			if err != nil {
				return "", err
			}
			if known {
				b.WriteString(w)
			} else if strings.IndexByte(possibleSpecifiers, c) >= 0 {
				return "", fmt.Errorf("%w %%%c", errBadSpecifier, c)
			} else {
				b.WriteByte('%')
				b.WriteByte(c)
			}
		case c == '%':
			percent = true
		default:
			b.WriteByte(c)
		}
		if b.Len() > unitNameMax {
			return "", errNameTooLong
		}
	}
	if percent {
		b.WriteByte('%')
		if b.Len() > unitNameMax {
			return "", errNameTooLong
		}
	}
	return b.String(), nil
}

// lookup returns the value of one specifier and whether it is in the table.
func (s *specifiers) lookup(c byte, info *installInfo) (string, bool, error) {
	switch c {
	case 'i':
		_, inst, err := nameInstanceOf(info.name)
		if err != nil {
			return "", true, err
		}
		if inst == "" {
			inst = info.defaultInstance
		}
		return inst, true, nil
	case 'j':
		p, err := namePrefix(info.name)
		if err != nil {
			return "", true, err
		}
		if d := strings.LastIndexByte(p, '-'); d >= 0 {
			return p[d+1:], true, nil
		}
		return p, true, nil
	case 'n':
		if nameIsValid(info.name, nameTemplate) && info.defaultInstance != "" {
			n, err := nameReplaceInstance(info.name, info.defaultInstance)
			return n, true, err
		}
		return info.name, true, nil
	case 'N':
		p, err := namePrefixAndInstance(info.name)
		if err != nil {
			return "", true, err
		}
		if strings.HasSuffix(p, "@") && info.defaultInstance != "" {
			return p + info.defaultInstance, true, nil
		}
		return p, true, nil
	case 'p':
		p, err := namePrefix(info.name)
		return p, true, err
	case 'a':
		return "x86-64", true, nil
	case 'A':
		return s.osField("IMAGE_VERSION")
	case 'b':
		return "00000000000000000000000000000000", true, nil
	case 'B':
		return s.osField("BUILD_ID")
	case 'H':
		return "localhost", true, nil
	case 'l':
		return "localhost", true, nil
	case 'm':
		if s.machineID == "" {
			return "", true, fmt.Errorf("%%m: %w", errBadSpecifier)
		}
		return s.machineID, true, nil
	case 'M':
		return s.osField("IMAGE_ID")
	case 'o':
		return s.osField("ID")
	case 'v':
		return "6.1.0", true, nil
	case 'w':
		return s.osField("VERSION_ID")
	case 'W':
		return s.osField("VARIANT_ID")
	case 'g', 'u':
		return "root", true, nil
	case 'G', 'U':
		return "0", true, nil
	case 'T':
		return "/tmp", true, nil
	case 'V':
		return "/var/tmp", true, nil
	}
	return "", false, nil
}

// parseOSRelease reads KEY=VALUE lines, unquoting simple quoted values.
func parseOSRelease(data []byte) map[string]string {
	m := map[string]string{}
	for _, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == '#' {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			v = v[1 : len(v)-1]
		}
		m[k] = v
	}
	return m
}

// parseMachineID returns the ID when data is a valid plain 128-bit ID.
func parseMachineID(data []byte) string {
	s := strings.TrimSuffix(string(data), "\n")
	if len(s) != 32 {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if !strings.ContainsRune("0123456789abcdefABCDEF", rune(s[i])) {
			return ""
		}
	}
	return strings.ToLower(s)
}
