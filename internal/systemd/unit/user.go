package unit

import (
	"strconv"
	"strings"
)

// ValidUserGroupName is valid_user_group_name with VALID_USER_ALLOW_NUMERIC
// (allowNumeric) and VALID_USER_RELAX (relax).
func ValidUserGroupName(u string, allowNumeric, relax bool) bool {
	if u == "" {
		return false
	}
	if ParseUID(u) {
		return allowNumeric
	}
	if relax {
		if strings.HasPrefix(u, " ") || strings.HasSuffix(u, " ") {
			return false
		}
		if !ValidUTF8(u) || HasControl(u) || strings.ContainsAny(u, ":/") {
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

// ParseUID is parse_uid: decimal, no sign, no leading zero, no
// whitespace, 32 bits, not (uid_t) -1 nor 65535.
func ParseUID(s string) bool {
	if s == "" || s[0] < '0' || s[0] > '9' || (s[0] == '0' && s != "0") {
		return false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return err == nil && v <= 0xffffffff && v != 0xffffffff && v != 0xffff
}

// HasControl is string_has_cc: a byte below 0x20 or DEL.
func HasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] == 0x7f {
			return true
		}
	}
	return false
}
