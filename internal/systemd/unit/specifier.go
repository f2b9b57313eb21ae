package unit

import (
	"errors"
	"fmt"
	"strings"
)

// NameSpecifier expands the specifier %c of a system unit named id that
// depends only on the name and on the system manager (its fixed
// directories and root's credentials), as unit_full_printf of systemd
// version does: %n %N %p %P %i %I %j %J %f, %C %d %E %L %S %t %T %V, %D
// from 257, %g %u %G %U. ok is false for any other specifier (those of
// the running machine, %%, unknown ones), which callers handle as their
// systemd command does; err is an invalid escape in the name.
func NameSpecifier(version int, id string, c byte) (v string, ok bool, err error) {
	prefix := Prefix(id)
	inst, isInst := Instance(id)
	switch c {
	case 'n':
		return id, true, nil
	case 'N':
		return strings.TrimSuffix(id, "."+Type(id)), true, nil
	case 'p':
		return prefix, true, nil
	case 'P':
		v, err := Unescape(prefix)
		return v, true, err
	case 'i':
		return inst, true, nil
	case 'I':
		v, err := Unescape(inst)
		return v, true, err
	case 'j':
		return lastDashComponent(prefix), true, nil
	case 'J':
		v, err := Unescape(lastDashComponent(prefix))
		return v, true, err
	case 'f':
		if isInst {
			v, err := PathUnescape(inst)
			return v, true, err
		}
		v, err := PathUnescape(prefix)
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

// lastDashComponent is what follows the last "-" of a prefix (%j).
func lastDashComponent(prefix string) string {
	if i := strings.LastIndexByte(prefix, '-'); i >= 0 {
		return prefix[i+1:]
	}
	return prefix
}

// errEscape is an invalid "\xNN" escape in a unit name.
var errEscape = errors.New("invalid escape")

// Unescape is unit_name_unescape: "-" is "/", "\xNN" a byte.
func Unescape(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '-':
			b.WriteByte('/')
		case '\\':
			if i+3 >= len(s) || s[i+1] != 'x' {
				return "", errEscape
			}
			hi, lo := HexVal(s[i+2]), HexVal(s[i+3])
			if hi < 0 || lo < 0 {
				return "", errEscape
			}
			b.WriteByte(byte(hi<<4 | lo))
			i += 3
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

// PathUnescape is unit_name_path_unescape: "-" alone is "/", else the
// unescaped name with a leading "/".
func PathUnescape(s string) (string, error) {
	if s == "" {
		return "", errors.New("empty path")
	}
	if s == "-" {
		return "/", nil
	}
	w, err := Unescape(s)
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(w, "/") || strings.HasSuffix(w, "/") {
		return "", errors.New("invalid path")
	}
	return "/" + w, nil
}

// HexVal is unhexchar: the value of a hexadecimal digit, or -1.
func HexVal(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// Bounds of a specifier expansion: unit_name_printf expands a unit name
// to at most UNIT_NAME_MAX bytes, unit_path_printf a path to PATH_MAX-1,
// unit_full_printf anything else to LONG_LINE_MAX.
const (
	NamePrintfMax = 256
	PathPrintfMax = 4095
	FullPrintfMax = maxLine
)

// Errors of Expand, for which systemd ignores the assignment.
var (
	// ErrBadSpecifier is -EBADSLT: an unknown letter or digit after "%".
	ErrBadSpecifier = errors.New("invalid specifier")
	// ErrExpansionTooLong is -ENAMETOOLONG: the expansion passes its
	// bound.
	ErrExpansionTooLong = errors.New("expansion too long")
)

// MachineSpecifiers are the specifiers of unit_full_printf that
// NameSpecifier does not expand: those of the machine systemd runs on
// (host name, machine and boot id, kernel, os-release, architecture),
// root's home and shell, the cgroup paths and the fragment's path.
const MachineSpecifiers = "aAbBcHhlmMoqrRsvwWyY"

// Expand is specifier_printf with the table of unit_full_printf of
// systemd version for the system unit id: NameSpecifier's specifiers,
// "%%", and the MachineSpecifiers, which machine expands. An unknown
// letter or digit after "%" is ErrBadSpecifier; "%" before anything else,
// or ending s, stays as written. An invalid escape in id is the error of
// NameSpecifier. Like systemd, it checks the length after every byte of s
// and stops with ErrExpansionTooLong as soon as the output passes max,
// so a short value full of specifiers never grows far past max.
func Expand(version int, id, s string, max int, machine func(c byte) string) (string, error) {
	if !strings.Contains(s, "%") {
		if len(s) > max {
			return "", ErrExpansionTooLong
		}
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c != '%':
			b.WriteByte(c)
		case i+1 == len(s):
			b.WriteByte('%')
		default:
			i++
			c = s[i]
			v, ok, err := NameSpecifier(version, id, c)
			switch {
			case err != nil:
				return "", fmt.Errorf("specifier %%%c of %s: %w", c, id, err)
			case ok:
			case c == '%':
				v = "%"
			case strings.IndexByte(MachineSpecifiers, c) >= 0:
				v = machine(c)
			case isAlnum(c):
				return "", fmt.Errorf("%w %%%c", ErrBadSpecifier, c)
			default:
				v = "%" + string(c)
			}
			b.WriteString(v)
		}
		if b.Len() > max {
			return "", ErrExpansionTooLong
		}
	}
	return b.String(), nil
}

// machineStandIns are fixed values for the MachineSpecifiers, for callers
// that need an expansion of plausible shape rather than the machine's.
var machineStandIns = map[byte]string{
	'a': "x86-64", 'A': "", 'b': "00000000000000000000000000000000", 'B': "", 'H': "localhost",
	'l': "localhost", 'q': "", 'm': "00000000000000000000000000000000", 'M': "", 'o': "debian",
	'v': "6.1.0", 'w': "", 'W': "", 'h': "/root", 's': "/bin/sh", 'y': "/", 'Y': "/",
	'c': "/system.slice/unit.service", 'r': "/system.slice", 'R': "/",
}

// MachineStandIn is a fixed stand-in for the machine specifier c, as
// Expand's machine function.
func MachineStandIn(c byte) string { return machineStandIns[c] }

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
