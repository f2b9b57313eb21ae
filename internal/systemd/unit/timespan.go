package unit

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrTimeSpan reports a value that is not a systemd time span.
var ErrTimeSpan = errors.New("invalid time span")

// USecInfinity is systemd's USEC_INFINITY, the infinite time span.
const USecInfinity = math.MaxUint64

const (
	usecPerSec    = 1_000_000
	usecPerMinute = 60 * usecPerSec
	usecPerHour   = 60 * usecPerMinute
	usecPerDay    = 24 * usecPerHour
	usecPerWeek   = 7 * usecPerDay
	usecPerMonth  = 2_629_800 * usecPerSec  // 30.44 days
	usecPerYear   = 31_557_600 * usecPerSec // 365.25 days
)

// timeUnits are the time-span suffixes of extract_multiplier()
// (src/basic/time-util.c, the same in 252 and 257) in microseconds, in the
// order it tries them as prefixes.
var timeUnits = []struct {
	suffix string
	usec   uint64
}{
	{"seconds", usecPerSec}, {"second", usecPerSec}, {"sec", usecPerSec}, {"s", usecPerSec},
	{"minutes", usecPerMinute}, {"minute", usecPerMinute}, {"min", usecPerMinute},
	{"months", usecPerMonth}, {"month", usecPerMonth}, {"M", usecPerMonth},
	{"msec", 1000}, {"ms", 1000}, {"m", usecPerMinute},
	{"hours", usecPerHour}, {"hour", usecPerHour}, {"hr", usecPerHour}, {"h", usecPerHour},
	{"days", usecPerDay}, {"day", usecPerDay}, {"d", usecPerDay},
	{"weeks", usecPerWeek}, {"week", usecPerWeek}, {"w", usecPerWeek},
	{"years", usecPerYear}, {"year", usecPerYear}, {"y", usecPerYear},
	{"usec", 1}, {"us", 1}, {"\u03bcs", 1}, {"\u00b5s", 1},
}

// short shortens a value for an error message, at a rune boundary.
func short(v string) string {
	const maxLen = 64
	if len(v) <= maxLen {
		return v
	}
	i := maxLen
	for i > 0 && !utf8.RuneStart(v[i]) {
		i--
	}
	return v[:i] + "…"
}

// skipWhitespace skips systemd's WHITESPACE (strspn(p, WHITESPACE)).
func skipWhitespace(s string) string {
	return strings.TrimLeft(s, " \t\n\r")
}

func digitRun(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// strtoll is strtoll(s, &e, 10) as parse_time uses it: the value, the rest
// after it (s itself when no digits were converted, as C leaves e), and
// whether it overflowed (errno ERANGE).
func strtoll(s string) (v int64, rest string, overflow bool) {
	neg, digits, rest := cDecimal(s)
	if digits == "" {
		return 0, s, false
	}
	u, err := strconv.ParseUint(digits, 10, 64)
	switch {
	case neg && (err != nil || u > 1<<63):
		return math.MinInt64, rest, true
	case neg:
		return -int64(u), rest, false
	case err != nil || u > math.MaxInt64:
		return math.MaxInt64, rest, true
	}
	return int64(u), rest, false
}

// ParseSec is parse_sec() (parse_time with seconds as the default unit,
// src/basic/time-util.c), the same in systemd 252 and 257: a time span
// such as "10s", "1min 30s", "1.5h", "5" (seconds) or "infinity"
// (USecInfinity), in microseconds. Errors wrap ErrTimeSpan. Like the C
// code it lets strtoll skip C whitespace (so "\v5" is 5s, and "\v-0" 0)
// and refuses a number with no digits ("+.5").
func ParseSec(v string) (uint64, error) {
	bad := func(why string) (uint64, error) {
		return 0, fmt.Errorf("parse time span %q: %s: %w", short(v), why, ErrTimeSpan)
	}
	p := skipWhitespace(v)
	if s, ok := strings.CutPrefix(p, "infinity"); ok {
		if skipWhitespace(s) != "" {
			return bad("trailing characters after infinity")
		}
		return USecInfinity, nil
	}
	var usec uint64
	something := false
	for {
		p = skipWhitespace(p)
		if p == "" {
			if !something {
				return bad("empty")
			}
			return usec, nil
		}
		if p[0] == '-' { // not even "-0"
			return bad("negative")
		}
		l, e, overflow := strtoll(p)
		switch {
		case overflow:
			return bad("out of range")
		case l < 0:
			return bad("negative")
		}
		dot := e != "" && e[0] == '.'
		switch {
		case dot:
			p = e[1:]
			p = p[digitRun(p):]
		case len(e) == len(p):
			return bad("not a number")
		default:
			p = e
		}
		// extract_multiplier looks past whitespace; a number followed by
		// neither a unit nor whitespace is refused ("12.34.56").
		rest := skipWhitespace(p)
		multiplier, found := uint64(usecPerSec), false
		for _, u := range timeUnits {
			if strings.HasPrefix(rest, u.suffix) {
				multiplier, rest, found = u.usec, rest[len(u.suffix):], true
				break
			}
		}
		if !found && len(rest) == len(p) && rest != "" {
			return bad("unexpected " + strconv.Quote(short(rest)))
		}
		p = rest
		if uint64(l) >= USecInfinity/multiplier {
			return bad("out of range")
		}
		k := uint64(l) * multiplier
		if k >= USecInfinity-usec {
			return bad("out of range")
		}
		usec += k
		something = true
		if dot {
			frac := e[1 : 1+digitRun(e[1:])]
			m := multiplier / 10
			for i := 0; i < len(frac); i++ {
				k := uint64(frac[i]-'0') * m
				if k >= USecInfinity-usec {
					return bad("out of range")
				}
				usec += k
				m /= 10
			}
			// Not "0.-0", "3.+1", "3. 1", "3.sec" or "3.hoge".
			if frac == "" {
				return bad("no digits after '.'")
			}
		}
	}
}
