package unit

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ErrCalendar reports a value that is not a systemd calendar event.
var ErrCalendar = errors.New("invalid calendar specification")

// Bounds of calendarspec.c.
const (
	calendarMinYear = 1970
	calendarMaxYear = 2199
	// calendarComponentsMax is CALENDARSPEC_COMPONENTS_MAX: a chain has
	// at most one more component than this.
	calendarComponentsMax = 240
	intMax                = math.MaxInt32
	// calendarEpochEnd is 2200-01-01T00:00:00Z: "@N" spells a date
	// within MIN_YEAR..MAX_YEAR only below it.
	calendarEpochEnd = 7258118400
)

// calendarComponent is one CalendarComponent: start, or start..stop
// every repeat; stop is -1 when there is none.
type calendarComponent struct{ start, stop, repeat int }

// calendar is a CalendarSpec as far as its validity needs: a nil chain is
// "*" (any value).
type calendar struct {
	weekdays                                    int
	year, month, day, hour, minute, microsecond []calendarComponent
	endOfMonth                                  bool
}

// ParseCalendar is calendar_spec_from_string (src/shared/calendarspec.c)
// as a check: nil when systemd accepts spec as a calendar event
// (OnCalendar=), an error wrapping ErrCalendar when it refuses it. The
// parser is the same in systemd 252 and 257: 257 only converts "@EPOCH"
// with localtime_or_gmtime_usec where 252 called gmtime_r, and both
// refuse any epoch outside 1970..2199 all the same.
//
// A trailing time zone is looked up on the machine as systemd does: " UTC"
// in any case is always one; otherwise the abbreviations of the local time
// zone (glibc's tzname, zones.Local) and then the last word if it names a
// zone file (timezone_is_valid, zones.File).
func ParseCalendar(spec string, zones Zones) error {
	c, err := parseCalendar(spec, zones)
	if err != nil {
		return fmt.Errorf("parse calendar %q: %w: %w", short(spec), ErrCalendar, err)
	}
	c.normalize()
	if !c.valid() {
		return fmt.Errorf("parse calendar %q: %w: out of range", short(spec), ErrCalendar)
	}
	return nil
}

// Errors of the parser, as calendarspec.c returns them.
var (
	errCalInvalid = errors.New("invalid argument")
	errCalRange   = errors.New("numerical result out of range")
	errCalChain   = errors.New("too many components")
)

// at is s[i], or NUL past its end, as C reads a string.
func at(s string, i int) byte {
	if i < len(s) {
		return s[i]
	}
	return 0
}

// lowerASCII is tolower() in the C locale.
func lowerASCII(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// equalFoldASCII is strcasecmp(a, b) == 0 in the C locale.
func equalFoldASCII(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lowerASCII(a[i]) != lowerASCII(b[i]) {
			return false
		}
	}
	return true
}

// hasPrefixFold is startswith_no_case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && equalFoldASCII(s[:len(prefix)], prefix)
}

// hasSuffixFold is endswith_no_case with a non-empty suffix.
func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && equalFoldASCII(s[len(s)-len(suffix):], suffix)
}

func parseCalendar(spec string, zones Zones) (*calendar, error) {
	// The value is a C string.
	p, _, _ := strings.Cut(spec, "\x00")
	c := &calendar{}
	if hasSuffixFold(p, " UTC") {
		p = p[:len(p)-len(" UTC")]
	} else {
		found := false
		for _, name := range zones.Local {
			if name == "" || !hasSuffixFold(p, name) {
				continue
			}
			e := len(p) - len(name)
			if e == 0 || p[e-1] != ' ' {
				continue
			}
			p, found = p[:e-1], true
			break
		}
		if !found {
			if i := strings.LastIndexByte(p, ' '); i >= 0 && zones.valid(p[i+1:]) {
				p = p[:i]
			}
		}
	}
	if p == "" {
		return nil, errCalInvalid
	}
	if chains, ok := specialCalendar(p); ok {
		return chains, nil
	}
	if err := c.parseWeekdays(&p); err != nil {
		return nil, err
	}
	epoch, err := c.parseDate(&p)
	if err != nil {
		return nil, err
	}
	if !epoch {
		if err := c.parseTime(&p); err != nil {
			return nil, err
		}
	}
	if p != "" {
		return nil, errCalInvalid
	}
	return c, nil
}

// one is a chain of the single value v.
func one(v ...int) []calendarComponent {
	out := make([]calendarComponent, len(v))
	for i, x := range v {
		out[i] = calendarComponent{start: x, stop: -1}
	}
	return out
}

// specialCalendar is the words calendar_spec_from_string takes for whole
// events, in any case.
func specialCalendar(p string) (*calendar, bool) {
	zero := one(0)
	switch {
	case equalFoldASCII(p, "minutely"):
		return &calendar{microsecond: zero}, true
	case equalFoldASCII(p, "hourly"):
		return &calendar{minute: zero, microsecond: zero}, true
	case equalFoldASCII(p, "daily"):
		return &calendar{hour: zero, minute: zero, microsecond: zero}, true
	case equalFoldASCII(p, "monthly"):
		return &calendar{day: one(1), hour: zero, minute: zero, microsecond: zero}, true
	case equalFoldASCII(p, "annually"), equalFoldASCII(p, "yearly"), equalFoldASCII(p, "anually"):
		return &calendar{month: one(1), day: one(1), hour: zero, minute: zero, microsecond: zero}, true
	case equalFoldASCII(p, "weekly"):
		return &calendar{weekdays: 1, hour: zero, minute: zero, microsecond: zero}, true
	case equalFoldASCII(p, "quarterly"):
		return &calendar{month: one(10, 7, 4, 1), day: one(1), hour: zero, minute: zero, microsecond: zero}, true
	case equalFoldASCII(p, "biannually"), equalFoldASCII(p, "bi-annually"),
		equalFoldASCII(p, "semiannually"), equalFoldASCII(p, "semi-annually"):
		return &calendar{month: one(7, 1), day: one(1), hour: zero, minute: zero, microsecond: zero}, true
	}
	return nil, false
}

// weekdayNames are parse_weekdays' names in the order it tries them.
var weekdayNames = []struct {
	name string
	nr   int
}{
	{"Monday", 0}, {"Mon", 0}, {"Tuesday", 1}, {"Tue", 1}, {"Wednesday", 2}, {"Wed", 2},
	{"Thursday", 3}, {"Thu", 3}, {"Friday", 4}, {"Fri", 4}, {"Saturday", 5}, {"Sat", 5},
	{"Sunday", 6}, {"Sun", 6},
}

// parseWeekdays is parse_weekdays: an optional list of weekdays and
// weekday ranges ("Mon..Fri", "Sat,Sun"), ended by spaces or the end.
func (c *calendar) parseWeekdays(p *string) error {
	l, first := -1, true
	for {
		nr := -1
		for _, d := range weekdayNames {
			if !hasPrefixFold(*p, d.name) {
				continue
			}
			switch at(*p, len(d.name)) {
			case 0, '-', '.', ',', ' ':
			default:
				return errCalInvalid
			}
			c.weekdays |= 1 << d.nr
			if l >= 0 {
				if l > d.nr {
					return errCalInvalid
				}
				for j := l + 1; j < d.nr; j++ {
					c.weekdays |= 1 << j
				}
			}
			*p = (*p)[len(d.name):]
			nr = d.nr
			break
		}
		// No weekday: the date follows, unless a list was left open.
		if nr < 0 {
			if first {
				return nil
			}
			return errCalInvalid
		}
		switch at(*p, 0) {
		case 0:
			return nil
		case ' ':
			*p = strings.TrimLeft(*p, " ")
			return nil
		case '.':
			if l >= 0 || at(*p, 1) != '.' {
				return errCalInvalid
			}
			l = nr
			*p = (*p)[2:]
		case '-': // ranges with "-", for backwards compatibility
			if l >= 0 {
				return errCalInvalid
			}
			l = nr
			*p = (*p)[1:]
		case ',':
			l = -1
			*p = (*p)[1:]
		}
		// A trailing comma, but not an open range.
		if c := at(*p, 0); c == 0 || c == ' ' {
			*p = strings.TrimLeft(*p, " ")
			if l < 0 {
				return nil
			}
			return errCalInvalid
		}
		first = false
	}
}

// strtoul is strtoul(s, &e, 10) in the C locale: leading whitespace and a
// sign are skipped ("-N" is its negation modulo 2^64), the rest is what
// follows the digits (s itself when there are none).
func strtoul(s string) (v uint64, rest string, err error) {
	neg, digits, rest := cDecimal(s)
	if digits == "" {
		return 0, s, errCalInvalid
	}
	v, perr := strconv.ParseUint(digits, 10, 64)
	if perr != nil {
		return 0, rest, errCalRange
	}
	if neg {
		v = -v
	}
	return v, rest, nil
}

// parseDecimal is parse_component_decimal: a number of digits, for the
// seconds component (usec) in microseconds with an optional fraction of
// which six digits count, the seventh rounding.
func parseDecimal(p *string, usec bool) (int, error) {
	if c := at(*p, 0); c < '0' || c > '9' {
		return 0, errCalInvalid
	}
	value, e, err := strtoul(*p)
	if err != nil {
		return 0, err
	}
	if usec {
		if value*usecPerSec/usecPerSec != value {
			return 0, errCalRange
		}
		value *= usecPerSec
		// One "." is a decimal point, ".." a range.
		if at(e, 0) == '.' && at(e, 1) != '.' {
			e = e[1:]
			// parse_fractional_part_u
			if c := at(e, 0); c < '0' || c > '9' {
				return 0, errCalInvalid
			}
			n := digitRun(e)
			var add uint64
			for i := 0; i < 6; i++ {
				add *= 10
				if i < n {
					add += uint64(e[i] - '0')
				}
			}
			if n > 6 && e[6] >= '5' {
				add++
			}
			e = e[n:]
			if add+value < value {
				return 0, errCalRange
			}
			value += add
		}
	}
	if value > intMax {
		return 0, errCalRange
	}
	*p = e
	return int(value), nil
}

// parseChain is parse_chain: "*" (nil, or every second for usec) or a
// comma-separated list of prepend_component's values, ranges "a..b" and
// repetitions "a/r", "a..b/r".
func parseChain(p *string, usec bool) ([]calendarComponent, error) {
	if at(*p, 0) == '*' {
		*p = (*p)[1:]
		if usec {
			return []calendarComponent{{start: 0, stop: -1, repeat: usecPerSec}}, nil
		}
		return nil, nil
	}
	var chain []calendarComponent
	e := *p
	for nesting := 0; ; nesting++ {
		if nesting > calendarComponentsMax {
			return nil, errCalChain
		}
		start, err := parseDecimal(&e, usec)
		if err != nil {
			return nil, err
		}
		stop, repeat := -1, 0
		if at(e, 0) == '.' && at(e, 1) == '.' {
			e = e[2:]
			if stop, err = parseDecimal(&e, usec); err != nil {
				return nil, err
			}
			repeat = 1
			if usec {
				repeat = usecPerSec
			}
		}
		if at(e, 0) == '/' {
			e = e[1:]
			if repeat, err = parseDecimal(&e, usec); err != nil {
				return nil, err
			}
			if repeat == 0 {
				return nil, errCalRange
			}
		} else {
			if start > intMax-repeat {
				return nil, errCalRange
			}
			// A seconds range needs a repetition below one second.
			if usec && stop >= 0 && start+repeat > stop {
				return nil, errCalInvalid
			}
		}
		switch at(e, 0) {
		case 0, ' ', ',', '-', '~', ':':
		default:
			return nil, errCalInvalid
		}
		chain = append(chain, calendarComponent{start: start, stop: stop, repeat: repeat})
		*p = e
		if at(e, 0) != ',' {
			return chain, nil
		}
		e = e[1:]
		*p = e
	}
}

// parseDate is parse_date: "@EPOCH" (then epoch is true and no time
// follows), "month-day", "year-month-day" ("~" for a day counted from
// the month's end), or nothing when what follows is a time.
func (c *calendar) parseDate(p *string) (epoch bool, err error) {
	t := *p
	if t == "" {
		return false, nil
	}
	if t[0] == '@' {
		value, rest, err := strtoul(t[1:])
		if err != nil {
			return false, err
		}
		// time_t is signed: a value from 2^63 is a date before 1970. Both
		// versions refuse a date outside MIN_YEAR..MAX_YEAR (252 also
		// fails gmtime_r, 257 an epoch beyond USEC_INFINITY, for
		// later ones).
		if secs := int64(value); secs < 0 || secs >= calendarEpochEnd {
			return false, errCalRange
		}
		// The date and time of a valid epoch are valid: one UTC value
		// each.
		*c = calendar{weekdays: c.weekdays, year: one(calendarMinYear), month: one(1), day: one(1),
			hour: one(0), minute: one(0), microsecond: one(0)}
		*p = rest
		return true, nil
	}
	first, err := parseChain(&t, false)
	if err != nil {
		return false, err
	}
	// A time, not a date: the caller parses it again.
	if b := at(t, 0); b == 0 || b == ':' {
		return false, nil
	}
	switch t[0] {
	case '~':
		c.endOfMonth = true
	case '-':
	default:
		return false, errCalInvalid
	}
	t = t[1:]
	second, err := parseChain(&t, false)
	if err != nil {
		return false, err
	}
	if b := at(t, 0); b == 0 || b == ' ' {
		*p = strings.TrimLeft(t, " ")
		c.month, c.day = first, second
		return false, nil
	}
	if c.endOfMonth {
		return false, errCalInvalid
	}
	switch t[0] {
	case '~':
		c.endOfMonth = true
	case '-':
	default:
		return false, errCalInvalid
	}
	t = t[1:]
	third, err := parseChain(&t, false)
	if err != nil {
		return false, err
	}
	if b := at(t, 0); b != 0 && b != ' ' {
		return false, errCalInvalid
	}
	*p = strings.TrimLeft(t, " ")
	c.year, c.month, c.day = first, second, third
	return false, nil
}

// parseTime is parse_calendar_time: "hour:minute[:second]", or nothing
// for 00:00:00.
func (c *calendar) parseTime(p *string) error {
	t := *p
	if t == "" {
		c.hour, c.minute, c.microsecond = one(0), one(0), one(0)
		return nil
	}
	h, err := parseChain(&t, false)
	if err != nil {
		return err
	}
	if at(t, 0) != ':' {
		return errCalInvalid
	}
	t = t[1:]
	m, err := parseChain(&t, false)
	if err != nil {
		return err
	}
	s := one(0)
	if t != "" {
		if t[0] != ':' {
			return errCalInvalid
		}
		t = t[1:]
		if s, err = parseChain(&t, true); err != nil {
			return err
		}
		if t != "" {
			return errCalInvalid
		}
	}
	*p = t
	c.hour, c.minute, c.microsecond = h, m, s
	return nil
}

// normalize is what calendar_spec_normalize does that validity depends
// on: two-digit years, a day counted from the month's end only with a
// day, and normalize_chain's cut of each range to a whole number of
// repetitions, sorting and deduplication (the order chain_valid checks
// them in matters).
func (c *calendar) normalize() {
	if c.endOfMonth && c.day == nil {
		c.endOfMonth = false
	}
	for i := range c.year {
		y := &c.year[i]
		for _, v := range []*int{&y.start, &y.stop} {
			switch {
			case *v >= 0 && *v < 70:
				*v += 2000
			case *v >= 70 && *v < 100:
				*v += 1900
			}
		}
	}
	for _, chain := range []*[]calendarComponent{&c.year, &c.month, &c.day, &c.hour, &c.minute, &c.microsecond} {
		*chain = normalizeChain(*chain)
	}
}

// normalizeChain is normalize_chain.
func normalizeChain(chain []calendarComponent) []calendarComponent {
	for i := range chain {
		x := &chain[i]
		if x.stop > x.start && x.repeat > 0 {
			x.stop -= (x.stop - x.start) % x.repeat
		}
		if (x.stop > x.start && x.repeat > 0 && x.start+x.repeat > x.stop) || x.start == x.stop {
			x.repeat, x.stop = 0, -1
		}
	}
	slices.SortFunc(chain, func(a, b calendarComponent) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.stop, b.stop), cmp.Compare(a.repeat, b.repeat))
	})
	return slices.Compact(chain)
}

// valid is calendar_spec_valid.
func (c *calendar) valid() bool {
	return chainValid(c.year, calendarMinYear, calendarMaxYear, false) &&
		chainValid(c.month, 1, 12, false) &&
		chainValid(c.day, 1, 31, c.endOfMonth) &&
		chainValid(c.hour, 0, 23, false) &&
		chainValid(c.minute, 0, 59, false) &&
		chainValid(c.microsecond, 0, 60*usecPerSec-1, false)
}

// chainValid is chain_valid: every value within from..to (a day counted
// from the month's end at most 28 days back), and every repetition
// occurring at least once. chain_valid takes the three days off again
// for every further component of a day counted from the month's end
// ("*-*~9,27" is refused, "*-*~27" is not), and so does this.
func chainValid(chain []calendarComponent, from, to int, endOfMonth bool) bool {
	for _, x := range chain {
		if endOfMonth {
			to -= 3
		}
		switch {
		case x.start < from || x.start > to:
			return false
		case x.repeat > to-from:
			return false
		case x.stop >= 0 && (x.stop < from || x.stop > to || x.start+x.repeat > x.stop):
			return false
		case x.stop < 0 && endOfMonth && x.start-x.repeat < from:
			return false
		case x.stop < 0 && !endOfMonth && x.start+x.repeat > to:
			return false
		}
	}
	return true
}

// Zones is what calendar_spec_from_string asks the machine about a
// trailing time zone.
type Zones struct {
	// Local is glibc's tzname once tzset() has read the local time zone
	// (/etc/localtime): its standard and daylight-saving abbreviations,
	// "" for none.
	Local [2]string
	// File reports whether /usr/share/zoneinfo/name opens as a regular
	// file that starts with the TZif magic. Nil means none does.
	File func(name string) bool
}

// valid is timezone_is_valid (verify_timezone): "UTC", or a relative
// name of letters, digits, "-", "_", "+" and single inner slashes whose
// zone file is a TZif file.
func (z Zones) valid(name string) bool {
	if name == "" {
		return false
	}
	if name == "UTC" {
		return true
	}
	slash := false
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-', c == '_', c == '+':
			slash = false
		case c == '/' && !slash && i > 0:
			slash = true
		default:
			return false
		}
	}
	if slash || len(name) >= pathMax {
		return false
	}
	return z.File != nil && z.File(name)
}

// pathMax is PATH_MAX.
const pathMax = 4096
