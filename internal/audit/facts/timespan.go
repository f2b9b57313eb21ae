package facts

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/amilint/amilint/internal/systemd/unit"
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
var ErrTimeSpan = unit.ErrTimeSpan

// ParseSeconds parses a systemd time span ("10s", "100ms", "1min 30s",
// "1.5h", "infinity"); a bare number is seconds, as for RestartSec= and
// StartLimitIntervalSec=. It is unit.ParseSec (systemd's parse_sec(),
// checked against systemd-analyze timespan) in seconds. Errors wrap
// ErrTimeSpan; it never panics.
func ParseSeconds(v string) (Seconds, error) {
	usec, err := unit.ParseSec(v)
	if err != nil {
		return 0, err
	}
	if usec == unit.USecInfinity {
		return Infinity, nil
	}
	return Seconds(float64(usec) / 1e6), nil
}
