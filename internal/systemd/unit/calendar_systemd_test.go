package unit_test

import (
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/systemdtest"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// The oracles of ParseCalendar and ParseSec are systemd-analyze calendar
// and timespan of systemd 252 and 257, each run chrooted in its Debian
// root: the model reads the same root's time zones.

// calendarSpecs are OnCalendar= values systemd accepts and refuses.
var calendarSpecs = []string{
	// Words, in any case.
	"minutely", "hourly", "daily", "monthly", "weekly", "yearly", "annually", "anually", "quarterly",
	"biannually", "bi-annually", "semiannually", "semi-annually", "DAILY", "Weekly", "daily ", " daily",
	"dailyx", "semi annually", "secondly",
	// Weekdays.
	"Mon", "mon", "MONDAY", "Monday", "Mond", "Mon,Tue", "Mon..Fri", "Mon-Fri", "Fri..Mon", "Mon,",
	"Mon..", "Mon-", "Mon..Wed,Fri", "Mon,Wed..Fri", "Sat,Sun 10:00", "Sun  12:00", "Month", "Mon...Fri",
	"Mon-Tue-Wed", "Mon..Tue..Wed", "Mon *-*-* 00:00:00", "Tue,Thu 2024-01-01", "Sun..Sat",
	// Dates and times.
	"*-*-* *:*:*", "*-*-* 00:00:00", "2024-01-01", "2024-01-01 12:00", "2024-02-30", "2024-13-01",
	"2024-00-10", "1969-01-01", "1970-01-01", "2199-12-31", "2200-01-01", "69-01-01", "70-01-01",
	"99-12-31", "100-01-01", "01-01", "12-31", "13-01", "*-02-29", "*-*-31", "*-*-32", "*-*-0",
	"12:00", "12:00:00", "24:00", "23:60", "23:59:59", "23:59:60", "12", "12:", ":00", "*:*", "*:0/15",
	"*:00/15", "0/2:00", "*/2:00", "00..23/2:00", "9..17:00", "17..9:00", "00:00:00.5", "00:00:00.123456",
	"00:00:00.1234567", "00:00:59.9999995", "00:00:59.999999", "00:00:1..2", "00:00:1.5..2",
	"00:00:0..59/0.5", "00:00:0/0.000001", "00:00:*/10", "00:00:00/0", "00:00/0", "00:00:5..3",
	"*-*-* 12:00:00 ", "*-*-*  12:00", "2024-01-01T12:00", "2024-1-1 1:1:1", "2024-01-01 12:00:00.",
	"2024-01-01 12:00:00.x", "1,2,3:00", "1,,2:00", "1,:00", ",1:00", "0x10:00", "+1:00", "-1:00",
	"1 :00", "00:00:00:00", "*-*", "*~*", "*-*~*", "*~01", "*~07/1", "*-02~03", "*-02~04", "*-02~28",
	"*-02~29", "2024-02~03", "2024~02-03", "*-*~1/2", "*-*~7/7", "*-*~7/6", "*-*~28", "2024-*-* *:*:*",
	"2023..2025-01-01", "2025..2023-01-01", "2020/4-01-01", "*/4-*-*", "20/4-01-01", "2020-1..12/3-1",
	"*-1,4,7,10-1", "*-*-1..31/0", "*-*-*/2", "*-*-1/2", "1/2", "*-*-*/", "*-*-1..", "*-*-..5",
	"4294967296:00", "2147483647:00", "99999999999999999999:00", "00:00:2147", "00:00:2148",
	"00:00:18446744073709551615", "00:00:18446744073709.551615",
	// Epochs.
	"@0", "@1", "@1700000000", "@7258118399", "@7258118400", "@-1", "@+5", "@ 5", "@-0", "@",
	"@x", "@5x", "@5 ", "Mon @0", "@18446744073709551615", "@18446744073709551616", "@1 12:00",
	// Time zones.
	"daily UTC", "daily utc", "daily Utc", "dailyUTC", "UTC", " UTC", "daily  UTC", "daily Europe/Berlin",
	"daily America/New_York", "daily Asia/Tokyo", "daily Europe/Nowhere", "daily Europe//Berlin",
	"daily /Europe/Berlin", "daily Europe/", "daily GMT", "daily EST", "daily CET", "daily CEST",
	"daily JST", "daily posix/Europe/Berlin", "daily right/UTC", "daily zone.tab", "daily tzdata.zi",
	"daily Etc/GMT+5", "daily Etc/GMT-14", "daily Europe/Berlin UTC", "*-*-* 12:00 Europe/Berlin",
	"12:00 Asia/Kolkata", "Mon 12:00 UTC", "2024-01-01 UTC", "2024-01-01 GMT", "daily Europe", "daily Etc",
	"@0 UTC", "@0 Europe/Berlin", "daily NotAZone", "12:00 UTC UTC", "daily 12", "daily 2024-01-01",
	// Garbage.
	"", " ", "*", "**", "-", "~", ":", ".", "..", "/", ",", "daily\tUTC", "x", "\u00fc", "12:00\u00a0UTC",
}

// analyzeCalendar returns which specs systemd-analyze calendar of sd
// parses: a spec counts as refused only when calendar_spec_from_string
// refuses it.
func analyzeCalendar(t *testing.T, sd systemdtest.Systemd, tz string, specs []string) []bool {
	t.Helper()
	script := `for s do if systemd-analyze calendar -- "$s" >/dev/null 2>/tmp/err; then echo y; ` +
		`elif grep -q "Failed to parse calendar specification" /tmp/err; then echo n; else echo y; fi; done`
	argv := []string{"sh", "-c", script, "sh"}
	if tz != "" {
		argv = append([]string{"env", "TZ=" + tz}, argv...)
	}
	out := sd.Run(t, "", append(argv, specs...)...)
	require.NoError(t, out.Err, "%s", out.Stderr)
	lines := strings.Fields(string(out.Stdout))
	require.Len(t, lines, len(specs), "%s", out.Stderr)
	got := make([]bool, len(specs))
	for i, l := range lines {
		got[i] = l == "y"
	}
	return got
}

// rootZones is unit.ImageZones of sd's root.
func rootZones(t *testing.T, sd systemdtest.Systemd) unit.Zones {
	t.Helper()
	dir, err := rootfs.OpenDir(sd.Path(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = dir.Close() })
	return unit.ImageZones(rootfs.New(dir))
}

func compareCalendar(t *testing.T, sd systemdtest.Systemd, zones unit.Zones, tz string, specs []string) int {
	t.Helper()
	want := analyzeCalendar(t, sd, tz, specs)
	wrong, accepted := 0, 0
	for i, s := range specs {
		err := unit.ParseCalendar(s, zones)
		if !assert.Equal(t, want[i], err == nil, "systemd %d, TZ=%q: %q (model: %v)", sd.Version, tz, s, err) {
			wrong++
		}
		if want[i] {
			accepted++
		}
	}
	t.Logf("systemd %d accepts %d of %d specs", sd.Version, accepted, len(specs))
	return wrong
}

// TestCalendarAgainstSystemd is differential: systemd-analyze calendar
// decides which of calendarSpecs are calendar events.
func TestCalendarAgainstSystemd(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			zones := rootZones(t, sd)
			accepted := 0
			for _, ok := range analyzeCalendar(t, sd, "", calendarSpecs) {
				if ok {
					accepted++
				}
			}
			// The list must exercise both answers.
			assert.Greater(t, accepted, 60)
			assert.Greater(t, len(calendarSpecs)-accepted, 60)
			compareCalendar(t, sd, zones, "", calendarSpecs)
		})
	}
}

// TestCalendarLocalZones checks the local zone's abbreviations against
// glibc: with each zone of the root as TZ, systemd-analyze takes a spec
// ending in an abbreviation of tzname, or in a zone file's name.
func TestCalendarLocalZones(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			root := sd.Path(t)
			zones := rootZones(t, sd)
			tab, err := os.ReadFile(filepath.Join(root, "usr/share/zoneinfo/tzdata.zi"))
			require.NoError(t, err)
			var names []string
			for l := range strings.Lines(string(tab)) {
				switch f := strings.Fields(l); {
				case len(f) >= 2 && f[0] == "Z":
					names = append(names, f[1])
				case len(f) == 3 && f[0] == "L":
					names = append(names, f[2])
				}
			}
			require.Greater(t, len(names), 300)
			rng := rand.New(rand.NewPCG(1, 2))
			rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
			tried := 0
			for _, name := range names {
				data, err := os.ReadFile(filepath.Join(root, "usr/share/zoneinfo", name))
				if errors.Is(err, fs.ErrNotExist) {
					continue // a link of tzdata-legacy
				}
				require.NoError(t, err)
				if tried++; tried > 40 {
					break
				}
				local, ok := unit.TZifNames(data)
				require.True(t, ok, name)
				z := zones
				z.Local = local
				// Every abbreviation the file holds, tzname's or not.
				specs := []string{"daily " + local[0], "daily " + local[1], "12:00 " + local[0], "daily x" + local[0]}
				for _, a := range abbreviations(data) {
					specs = append(specs, "daily "+a, "Mon "+strings.ToLower(a))
				}
				compareCalendar(t, sd, z, ":"+name, specs)
			}
		})
	}
}

// abbreviations are the time zone abbreviations of a TZif file's first
// block, roughly: what its abbreviation table holds.
func abbreviations(data []byte) []string {
	if len(data) < 44 {
		return nil
	}
	var out []string
	for _, s := range regexp.MustCompile(`[A-Z][A-Z]{2,4}|[+-][0-9]{2,4}`).FindAll(data, 20) {
		out = append(out, string(s))
	}
	return out
}

// randomCalendar builds a spec from the pieces of the grammar, mostly in
// range, now and then broken.
func randomCalendar(rng *rand.Rand) string {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	num := func(lo, hi int) string {
		switch rng.IntN(12) {
		case 0:
			return strconv.Itoa(rng.IntN(100000))
		case 1:
			return pick("0", "00", "007", "4294967296", "2147483647", "99999999999999999999")
		}
		return strconv.Itoa(lo + rng.IntN(hi-lo+1))
	}
	comp := func(lo, hi int, usec bool) string {
		if rng.IntN(5) == 0 {
			return "*"
		}
		var b strings.Builder
		for n := 1 + rng.IntN(3); n > 0; n-- {
			b.WriteString(num(lo, hi))
			if usec && rng.IntN(4) == 0 {
				b.WriteString("." + strconv.Itoa(rng.IntN(10000000)))
			}
			if rng.IntN(5) == 0 {
				b.WriteString(".." + num(lo, hi))
			}
			if rng.IntN(5) == 0 {
				b.WriteString("/" + num(1, max(1, (hi-lo)/3)))
			}
			if n > 1 {
				b.WriteString(",")
			}
		}
		return b.String()
	}
	var parts []string
	if rng.IntN(3) == 0 {
		days := []string{"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun", "monday", "FRIDAY", "Sund"}
		d := pick(days...)
		for rng.IntN(2) == 0 {
			d += pick(",", "..", "..", "-", ".") + pick(days...)
		}
		parts = append(parts, d)
	}
	year := func() string {
		if rng.IntN(4) == 0 {
			return comp(0, 99, false)
		}
		return comp(1960, 2210, false)
	}
	switch rng.IntN(6) {
	case 0:
		parts = append(parts, "@"+num(0, 8000000000))
	case 1, 2:
		parts = append(parts, year()+"-"+comp(1, 12, false)+pick("-", "-", "~")+comp(1, 31, false))
	case 3:
		parts = append(parts, comp(1, 12, false)+pick("-", "-", "~")+comp(1, 31, false))
	}
	switch rng.IntN(4) {
	case 0:
	case 1:
		parts = append(parts, comp(0, 23, false)+":"+comp(0, 59, false))
	default:
		parts = append(parts, comp(0, 23, false)+":"+comp(0, 59, false)+":"+comp(0, 59, true))
	}
	if rng.IntN(5) == 0 {
		parts = append(parts, pick("UTC", "utc", "Europe/Berlin", "GMT", "CET", "Nowhere/Zone", "Etc/GMT-3"))
	}
	s := strings.Join(parts, " ")
	if rng.IntN(6) == 0 && s != "" {
		// Break it: drop, double or replace a byte.
		i := rng.IntN(len(s))
		switch rng.IntN(3) {
		case 0:
			s = s[:i] + s[i+1:]
		case 1:
			s = s[:i] + s[i:i+1] + s[i:]
		default:
			s = s[:i] + pick("*", "-", "~", ":", ".", ",", "/", " ", "0", "9", "x") + s[i+1:]
		}
	}
	return s
}

// TestCalendarRandomAgainstSystemd compares random specs.
func TestCalendarRandomAgainstSystemd(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 200
	}
	rng := rand.New(rand.NewPCG(7, 11))
	specs := make([]string, n)
	for i := range specs {
		specs[i] = randomCalendar(rng)
	}
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			wrong := compareCalendar(t, sd, rootZones(t, sd), "", specs)
			assert.Zero(t, wrong, "of %d random specs", n)
		})
	}
}
