package security

import (
	"errors"
	"fmt"
	"strings"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// errSpecifier is -EBADSLT: an unknown "%x" specifier.
var errSpecifier = errors.New("unknown specifier")

// machineSpecifiers depend on the machine systemd-analyze runs on (its
// host name, machine id, kernel, the invoking user's home and shell) or
// on the fragment's real path; amilint expands them to fixed stand-ins
// and says so in the unit's notes.
var machineSpecifiers = map[byte]string{
	'a': "x86-64", 'A': "", 'b': "00000000000000000000000000000000", 'B': "", 'H': "localhost",
	'l': "localhost", 'q': "", 'm': "00000000000000000000000000000000", 'M': "", 'o': "debian",
	'v': "6.1.0", 'w': "", 'W': "", 'h': "/root", 's': "/bin/sh", 'y': "/", 'Y': "/",
	'c': "/system.slice/unit.service", 'r': "/system.slice", 'R': "/",
}

// unitPrintf is unit_full_printf (and unit_path_printf, which has the
// same table) of systemd version for a system service: the name specifiers from id, the
// system manager's directories and credentials of root. It reports
// whether a machine-dependent specifier was used.
func unitPrintf(version int, id, s string) (string, bool, error) {
	if !strings.Contains(s, "%") {
		return s, false, nil
	}
	var b strings.Builder
	machine := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		if i+1 >= len(s) {
			b.WriteByte('%') // a stray % at the end stays
			break
		}
		i++
		v, ok, err := nameSpecifier(version, id, s[i])
		switch {
		case err != nil:
			return "", machine, err
		case ok:
			b.WriteString(v)
		case s[i] == '%':
			b.WriteByte('%')
		default:
			if m, ok := machineSpecifiers[s[i]]; ok {
				machine = true
				b.WriteString(m)
				continue
			}
			if isAlnum(s[i]) {
				return "", machine, fmt.Errorf("%w %%%c", errSpecifier, s[i])
			}
			b.WriteByte('%')
			b.WriteByte(s[i])
		}
	}
	return b.String(), machine, nil
}

// nameSpecifier expands the specifiers that depend only on the unit's id
// and on the system manager.
func nameSpecifier(version int, id string, c byte) (string, bool, error) {
	prefix := unit.Prefix(id)
	inst, isInst := unit.Instance(id)
	switch c {
	case 'n':
		return id, true, nil
	case 'N':
		return strings.TrimSuffix(id, "."+unit.Type(id)), true, nil
	case 'p':
		return prefix, true, nil
	case 'P':
		v, err := unescapeName(prefix)
		return v, true, err
	case 'i':
		return inst, true, nil
	case 'I':
		v, err := unescapeName(inst)
		return v, true, err
	case 'j':
		return lastComponent(prefix), true, nil
	case 'J':
		v, err := unescapeName(lastComponent(prefix))
		return v, true, err
	case 'f':
		if isInst {
			v, err := pathUnescape(inst)
			return v, true, err
		}
		v, err := pathUnescape(prefix)
		return v, true, err
	case 'C':
		return "/var/cache", true, nil
	case 'd':
		return "/run/credentials/" + id, true, nil
	case 'D':
		if version >= 257 {
			return "/usr/share", true, nil // specifier_shared_data_dir, new in 257
		}
	case 'E':
		return "/etc", true, nil
	case 'L':
		return "/var/log", true, nil
	case 'S':
		return "/var/lib", true, nil
	case 't':
		return "/run", true, nil
	case 'T':
		return "/tmp", true, nil
	case 'V':
		return "/var/tmp", true, nil
	case 'g', 'u':
		return "root", true, nil
	case 'G', 'U':
		return "0", true, nil
	}
	return "", false, nil
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func lastComponent(prefix string) string {
	if i := strings.LastIndexByte(prefix, '-'); i >= 0 {
		return prefix[i+1:]
	}
	return prefix
}

// unescapeName is unit_name_unescape: "-" is "/", "\xNN" a byte.
func unescapeName(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '-':
			b.WriteByte('/')
		case '\\':
			if i+3 >= len(s) || s[i+1] != 'x' {
				return "", errors.New("invalid escape")
			}
			hi, lo := digitVal(s[i+2]), digitVal(s[i+3])
			if hi < 0 || hi > 15 || lo < 0 || lo > 15 {
				return "", errors.New("invalid escape")
			}
			b.WriteByte(byte(hi<<4 | lo))
			i += 3
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// pathUnescape is unit_name_path_unescape.
func pathUnescape(s string) (string, error) {
	if s == "" {
		return "", errors.New("empty path")
	}
	if s == "-" {
		return "/", nil
	}
	w, err := unescapeName(s)
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(w, "/") || strings.HasSuffix(w, "/") {
		return "", errors.New("invalid path")
	}
	return "/" + w, nil
}
