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

// timeUnits maps systemd's time-span suffixes to microseconds, as
// parse_time() in systemd 252's src/basic/time-util.c knows them. A month is
// 30.44 days and a year 365.25 days there too.
var timeUnits = map[string]float64{
	"seconds": 1e6, "second": 1e6, "sec": 1e6, "s": 1e6,
	"minutes": 60e6, "minute": 60e6, "min": 60e6,
	"months": 2629800e6, "month": 2629800e6, "M": 2629800e6,
	"msec": 1e3, "ms": 1e3,
	"m":     60e6,
	"hours": 3600e6, "hour": 3600e6, "hr": 3600e6, "h": 3600e6,
	"days": 86400e6, "day": 86400e6, "d": 86400e6,
	"weeks": 604800e6, "week": 604800e6, "w": 604800e6,
	"years": 31557600e6, "year": 31557600e6, "y": 31557600e6,
	"usec": 1, "us": 1, "µs": 1, "μs": 1,
	"nsec": 1e-3, "ns": 1e-3,
}

// maxSpan bounds a span, so a hostile value cannot overflow into nonsense:
// systemd's usec_t is 64 bits; anything at or past it is refused.
const maxSpanUsec = float64(math.MaxUint64 - 1)

// ParseSeconds parses a systemd time span ("10s", "100ms", "1min 30s",
// "1.5h", "infinity"); a bare number is seconds, as for RestartSec= and
// StartLimitIntervalSec=. It never panics and refuses negative numbers,
// unknown units and empty input with an error wrapping ErrTimeSpan.
func ParseSeconds(v string) (Seconds, error) {
	s := strings.TrimSpace(v)
	if s == "infinity" {
		return Infinity, nil
	}
	if s == "" {
		return 0, fmt.Errorf("parse time span %q: %w", v, ErrTimeSpan)
	}
	var total float64
	for s != "" {
		// A number: digits with at most one dot, no sign.
		i := 0
		dots := 0
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			if s[i] == '.' {
				dots++
			}
			i++
		}
		if i == 0 || dots > 1 || s[:i] == "." {
			return 0, fmt.Errorf("parse time span %q: %w", v, ErrTimeSpan)
		}
		n, err := strconv.ParseFloat(s[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("parse time span %q: %w", v, ErrTimeSpan)
		}
		s = strings.TrimLeft(s[i:], " \t")
		// A unit: letters (and µ), possibly none, meaning seconds.
		j := 0
		for j < len(s) && s[j] != ' ' && s[j] != '\t' && (s[j] < '0' || s[j] > '9') && s[j] != '.' {
			j++
		}
		mult := 1e6
		if j > 0 {
			m, ok := timeUnits[s[:j]]
			if !ok {
				return 0, fmt.Errorf("parse time span %q: unknown unit %q: %w", v, s[:j], ErrTimeSpan)
			}
			mult = m
		}
		s = strings.TrimLeft(s[j:], " \t")
		total += n * mult
		if math.IsInf(total, 0) || math.IsNaN(total) || total >= maxSpanUsec {
			return 0, fmt.Errorf("parse time span %q: out of range: %w", v, ErrTimeSpan)
		}
	}
	// systemd counts in whole microseconds.
	return Seconds(math.Floor(total) / 1e6), nil
}
