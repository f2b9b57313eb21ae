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
		v, ok, err := unit.NameSpecifier(version, id, s[i])
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

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
