package facts

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Seconds is a systemd time span in seconds. Its JSON form is a number, or
// the string "infinity" for systemd's infinite span, so policies must test
// is_number before comparing.
type Seconds float64

// Infinity is the infinite time span.
var Infinity = Seconds(math.Inf(1))

// IsInf reports whether s is the infinite span.
func (s Seconds) IsInf() bool { return math.IsInf(float64(s), 1) }

// MarshalJSON writes a number of seconds or "infinity".
func (s Seconds) MarshalJSON() ([]byte, error) {
	if s.IsInf() {
		return []byte(`"infinity"`), nil
	}
	return json.Marshal(float64(s))
}

// UnmarshalJSON reads what MarshalJSON writes.
func (s *Seconds) UnmarshalJSON(b []byte) error {
	if string(b) == `"infinity"` {
		*s = Infinity
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("decode seconds: %w", err)
	}
	*s = Seconds(f)
	return nil
}

// ErrTimeSpan reports a value that is not a systemd time span.
var ErrTimeSpan = errors.New("invalid time span")

// timeUnits are systemd 252's time-span suffixes in microseconds, in the
// order extract_multiplier() (src/basic/time-util.c) tries them as prefixes.
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

const (
	usecPerSec    = 1_000_000
	usecPerMinute = 60 * usecPerSec
	usecPerHour   = 60 * usecPerMinute
	usecPerDay    = 24 * usecPerHour
	usecPerWeek   = 7 * usecPerDay
	usecPerMonth  = 2_629_800 * usecPerSec  // 30.44 days
	usecPerYear   = 31_557_600 * usecPerSec // 365.25 days
	usecInfinity  = math.MaxUint64
)

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(s string) string {
	for s != "" && isSpace(s[0]) {
		s = s[1:]
	}
	return s
}

func digits(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// ParseSeconds parses a systemd time span ("10s", "100ms", "1min 30s",
// "1.5h", "infinity"); a bare number is seconds, as for RestartSec= and
// StartLimitIntervalSec=. It is parse_sec() of systemd 252 in whole
// microseconds, so it accepts and refuses what systemd does (a
// differential test checks it against systemd-analyze timespan). Errors
// wrap ErrTimeSpan; it never panics.
func ParseSeconds(v string) (Seconds, error) {
	bad := func(why string) (Seconds, error) {
		return 0, fmt.Errorf("parse time span %q: %s: %w", truncate(v), why, ErrTimeSpan)
	}
	p := skipSpace(v)
	if strings.TrimRight(p, " \t\n\r") == "infinity" {
		return Infinity, nil
	}
	var usec uint64
	something := false
	for {
		p = skipSpace(p)
		if p == "" {
			if !something {
				return bad("empty")
			}
			break
		}
		if p[0] == '-' {
			return bad("negative")
		}
		// strtoll: an optional '+', then digits.
		q := p
		if q[0] == '+' {
			q = q[1:]
		}
		n := digits(q)
		var l uint64
		if n > 0 {
			var err error
			if l, err = strconv.ParseUint(q[:n], 10, 64); err != nil || l > math.MaxInt64 {
				return bad("out of range")
			}
		}
		e := q[n:]
		var frac string
		switch {
		case e != "" && e[0] == '.':
			frac = e[1 : 1+digits(e[1:])]
			p = e[1+len(frac):]
		case n == 0:
			return bad("not a number")
		default:
			p = e
		}
		rest := skipSpace(p)
		spaced := len(rest) < len(p)
		multiplier, unit := uint64(usecPerSec), false
		for _, u := range timeUnits {
			if strings.HasPrefix(rest, u.suffix) {
				multiplier, rest, unit = u.usec, rest[len(u.suffix):], true
				break
			}
		}
		if !unit && !spaced && rest != "" {
			// Neither a unit nor whitespace follows the number: "12.34.56".
			return bad("unexpected " + strconv.Quote(truncate(rest)))
		}
		p = rest
		if l >= usecInfinity/multiplier {
			return bad("out of range")
		}
		k := l * multiplier
		if k >= usecInfinity-usec {
			return bad("out of range")
		}
		usec += k
		something = true
		if e != "" && e[0] == '.' {
			if frac == "" {
				return bad("no digits after '.'")
			}
			m := multiplier / 10
			for i := 0; i < len(frac); i++ {
				k := uint64(frac[i]-'0') * m
				if k >= usecInfinity-usec {
					return bad("out of range")
				}
				usec += k
				m /= 10
			}
		}
	}
	return Seconds(float64(usec) / 1e6), nil
}
