package security

import (
	"strings"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// validUserGroupName is valid_user_group_name with VALID_USER_ALLOW_NUMERIC
// (allowNumeric) and VALID_USER_RELAX (relax).
func validUserGroupName(u string, allowNumeric, relax bool) bool {
	if u == "" {
		return false
	}
	if parseUID(u) {
		return allowNumeric
	}
	if relax {
		if strings.HasPrefix(u, " ") || strings.HasSuffix(u, " ") {
			return false
		}
		if !utf8Valid(u) || hasControl(u) || strings.ContainsAny(u, ":/") {
			return false
		}
		if strings.Trim(u, "0123456789") == "" {
			return false
		}
		if u[0] == '-' && strings.Trim(u[1:], "0123456789") == "" {
			return false
		}
		return u != "." && u != ".."
	}
	c := u[0]
	if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_') {
		return false
	}
	for i := 1; i < len(u); i++ {
		c := u[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return len(u) <= 31 // the utmp user field
}

// parseUID is parse_uid: decimal, no sign, no leading zero, no
// whitespace, 32 bits, not (uid_t) -1 nor 65535.
func parseUID(s string) bool {
	if s == "" || s[0] < '0' || s[0] > '9' || (s[0] == '0' && s != "0") {
		return false
	}
	v, _, ok := strtol(s, 10)
	return ok && v <= 0xffffffff && v != 0xffffffff && v != 0xffff
}

// hasControl is string_has_cc: a byte below 0x20 or DEL.
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] == 0x7f {
			return true
		}
	}
	return false
}

// userFromUnitName is user_from_unit_name: the unit's prefix when it is a
// strictly valid user name, else a hashed "_du…" name (which can never be
// root or nobody, all the assessment asks).
func userFromUnitName(id string) string {
	n := unit.Prefix(id)
	if validUserGroupName(n, false, false) {
		return n
	}
	return "_du"
}

// utf8Valid is systemd's utf8_is_valid, stricter than Go's utf8.Valid: it
// also refuses the non-characters U+FDD0..U+FDEF and U+xxFFFE/U+xxFFFF.
func utf8Valid(s string) bool {
	if !validUTF8(s) {
		return false
	}
	for _, r := range s {
		if r >= 0xfdd0 && r <= 0xfdef || r&0xfffe == 0xfffe {
			return false
		}
	}
	return true
}

func validUTF8(s string) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < 0x80 {
			i++
			continue
		}
		n := 0
		switch {
		case c&0xe0 == 0xc0:
			n = 2
		case c&0xf0 == 0xe0:
			n = 3
		case c&0xf8 == 0xf0:
			n = 4
		default:
			return false
		}
		if i+n > len(s) {
			return false
		}
		var u rune = rune(c) & (0x7f >> n)
		for k := 1; k < n; k++ {
			if s[i+k]&0xc0 != 0x80 {
				return false
			}
			u = u<<6 | rune(s[i+k]&0x3f)
		}
		if (n == 2 && u < 0x80) || (n == 3 && u < 0x800) || (n == 4 && u < 0x10000) || u >= 0x110000 || u&^0x7ff == 0xd800 {
			return false
		}
		i += n
	}
	return true
}
