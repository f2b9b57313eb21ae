package unit

import (
	"errors"
	"math"
	"strings"
)

// The C number readers the ported parsers share: glibc's strtoul and
// strtol as systemd's safe_ato* helpers call them.

// C23Strtol is the first systemd version whose Debian build reads numbers
// with C23's strtol and strtoul (glibc 2.38 on, with _GNU_SOURCE): they
// take a "0b" prefix in bases 0 and 2. Debian 12's systemd 252 is built
// against glibc 2.36, Debian 13's 257 against 2.41.
const C23Strtol = 257

// Errors of the number parsers: -EINVAL and -ERANGE.
var (
	errInvalid = errors.New("invalid number")
	errRange   = errors.New("number out of range")
)

// cSpace is isspace in the C locale, which strtoul skips.
const cSpace = " \t\n\v\f\r"

// MangleBase is mangle_base for base 0: "0b"/"0B" is binary, "0o"/"0O"
// octal; otherwise strtoul picks the base (0).
func MangleBase(s string) (string, int) {
	if len(s) >= 2 && s[0] == '0' {
		switch s[1] {
		case 'b', 'B':
			return s[2:], 2
		case 'o', 'O':
			return s[2:], 8
		}
	}
	return s, 0
}

// strtoulBase is CStrtoul's value as strtoul returns it: a negative one
// wraps around.
func strtoulBase(s string, base int, c23 bool) (uint64, error) {
	v, neg, err := CStrtoul(s, base, c23)
	if neg {
		v = -v
	}
	return v, err
}

// CStrtoul is glibc's strtoul(s, &end, base) for base 0, 2, 8 or 10 when
// all of s must be the number: leading isspace, a sign, a "0x" prefix in
// base 0 and, with c23 (glibc 2.41's C23 reading), a "0b" prefix in bases
// 0 and 2, a leading "0" making base 0 octal. It returns the magnitude
// and whether a "-" preceded it, and fails with errRange when the
// magnitude overflows 64 bits (which strtoul reports even with trailing
// garbage) and errInvalid when s is not all digits.
func CStrtoul(s string, base int, c23 bool) (magnitude uint64, neg bool, err error) {
	s = strings.TrimLeft(s, cSpace)
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if len(s) >= 2 && s[0] == '0' {
		switch {
		case base == 0 && (s[1] == 'x' || s[1] == 'X'):
			s, base = s[2:], 16
		case c23 && (base == 0 || base == 2) && (s[1] == 'b' || s[1] == 'B'):
			s, base = s[2:], 2
		}
	}
	if base == 0 {
		base = 10
		if s != "" && s[0] == '0' {
			base = 8
		}
	}
	var v uint64
	n := 0
	overflow := false
	for ; n < len(s); n++ {
		d := digitValue(s[n])
		if d < 0 || d >= base {
			break
		}
		if v > (math.MaxUint64-uint64(d))/uint64(base) {
			overflow = true
		}
		v = v*uint64(base) + uint64(d)
	}
	switch {
	case overflow:
		return 0, neg, errRange
	case n == 0 || n < len(s):
		return 0, neg, errInvalid
	}
	return v, neg, nil
}

// digitValue is the value of an alphanumeric digit, -1 for others.
func digitValue(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'z':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'Z':
		return int(c-'A') + 10
	}
	return -1
}

// cDecimal splits s as C's strtol and strtoul read it in base 10: leading
// isspace skipped, an optional sign, the run of digits, and the rest
// after them (digits is "" when nothing would be converted).
func cDecimal(s string) (neg bool, digits, rest string) {
	p := strings.TrimLeft(s, cSpace)
	if p != "" && (p[0] == '+' || p[0] == '-') {
		neg = p[0] == '-'
		p = p[1:]
	}
	n := digitRun(p)
	return neg, p[:n], p[n:]
}
