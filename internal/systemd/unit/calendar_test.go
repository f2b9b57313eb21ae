package unit

import (
	"errors"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
)

func TestParseCalendar(t *testing.T) {
	zones := Zones{Local: [2]string{"CET", "CEST"}, File: func(name string) bool { return name == "Europe/Berlin" }}
	for _, c := range []struct {
		spec string
		ok   bool
	}{
		{"daily", true}, {"DAILY", true}, {"semi-annually", true}, {"daily ", false},
		{"Mon..Fri *-*-* 09:00", true}, {"Fri..Mon", false}, {"Mon,", true}, {"Mon..", false}, {"Month", false},
		{"*-*-* *:*:*", true}, {"2024-02-30", true}, {"2024-13-01", false}, {"2200-01-01", false}, {"69-01-01", true},
		{"12", false}, {"12:00", true}, {"24:00", false}, {"*:0/15", true}, {"*/2:00", false},
		{"00:00:00.5", true}, {"00:00:1..2", true}, {"00:00:1.5..2", false}, {"00:00:00/0", false},
		{"*-*~28", true}, {"*-*~29", false}, {"*-*~27", true}, {"*-*~9,27", false}, {"*-*~9,24", true},
		{"*-*~27,27", true}, {"2024~02-03", false}, {"*-*~7/7", false}, {"*-*~7/6", true},
		{"@0", true}, {"@7258118399", true}, {"@7258118400", false}, {"@-0", true}, {"@-1", false}, {"@ 5", true},
		{"Mon @0", true}, {"@5 ", false},
		{"daily UTC", true}, {"daily utc", true}, {"UTC", false}, {"daily CET", true}, {"daily cest", true},
		{"daily Europe/Berlin", true}, {"daily Europe/Paris", false}, {"CET", false}, {"dailyCET", false},
		{"", false}, {"*", false}, {"00:00:00\x00junk", true},
	} {
		err := ParseCalendar(c.spec, zones)
		assert.Equal(t, c.ok, err == nil, "%q: %v", c.spec, err)
		if err != nil {
			assert.ErrorIs(t, err, ErrCalendar)
		}
	}
}

func TestCalendarChainBound(t *testing.T) {
	long := func(n int) string {
		s := "0"
		for i := 1; i < n; i++ {
			s += ",0"
		}
		return s + ":00"
	}
	assert.NoError(t, ParseCalendar(long(calendarComponentsMax+1), Zones{}))
	assert.Error(t, ParseCalendar(long(calendarComponentsMax+2), Zones{}))
}

func TestZonesValid(t *testing.T) {
	z := Zones{File: func(string) bool { return true }}
	for name, ok := range map[string]bool{
		"UTC": true, "Europe/Berlin": true, "Etc/GMT+5": true, "a_b-c": true, "": false, "/Europe": false,
		"Europe/": false, "Europe//Berlin": false, "Europe/../x": false, "Europe.Berlin": false, "ü": false,
	} {
		assert.Equal(t, ok, z.valid(name), name)
	}
	assert.True(t, Zones{}.valid("UTC"))
	assert.False(t, Zones{}.valid("Europe/Berlin"))
}

// tzif builds a version 1 zone file of types (isdst, abbreviation) and
// transitions to the given types.
func tzif(types []struct {
	dst  byte
	abbr string
}, trans []byte,
) []byte {
	var chars []byte
	b := append([]byte("TZif"), make([]byte, 16)...)
	be := func(v int) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }
	var tt []byte
	for _, x := range types {
		tt = append(tt, 0, 0, 0, 0, x.dst, byte(len(chars)))
		chars = append(append(chars, x.abbr...), 0)
	}
	for _, c := range []int{0, 0, 0, len(trans), len(types), len(chars)} {
		b = append(b, be(c)...)
	}
	for range trans {
		b = append(b, 0, 0, 0, 0)
	}
	b = append(b, trans...)
	b = append(b, tt...)
	return append(b, chars...)
}

func TestTZifNames(t *testing.T) {
	type ty = struct {
		dst  byte
		abbr string
	}
	names, ok := TZifNames(tzif([]ty{{0, "LMT"}, {0, "JST"}, {1, "JDT"}}, []byte{0, 1, 2, 1}))
	assert.True(t, ok)
	assert.Equal(t, [2]string{"JST", "JDT"}, names)
	names, ok = TZifNames(tzif([]ty{{0, "UTC"}}, nil))
	assert.True(t, ok)
	assert.Equal(t, [2]string{"UTC", "UTC"}, names)
	_, ok = TZifNames(tzif([]ty{{0, "UTC"}}, []byte{1}))
	assert.False(t, ok, "a transition to no type")
	_, ok = TZifNames(tzif([]ty{{2, "UTC"}}, nil))
	assert.False(t, ok, "isdst 2")
	_, ok = TZifNames([]byte("TZif"))
	assert.False(t, ok)

	fsys := fstest.MapFS{
		"etc/localtime":                    {Data: tzif([]ty{{0, "CET"}, {1, "CEST"}}, []byte{0, 1})},
		"usr/share/zoneinfo/Europe/Berlin": {Data: []byte("TZif2...")},
		"usr/share/zoneinfo/Europe/Bad":    {Data: []byte("TZ")},
		"usr/share/zoneinfo/Europe/Text":   {Data: []byte("hello")},
		"usr/share/zoneinfo/Europe/Dir/x":  {Data: []byte("TZif")},
	}
	z := ImageZones(fsys)
	assert.Equal(t, [2]string{"CET", "CEST"}, z.Local)
	assert.True(t, z.valid("Europe/Berlin"))
	for _, n := range []string{"Europe/Bad", "Europe/Text", "Europe/Dir", "Europe/None"} {
		assert.False(t, z.valid(n), n)
	}
	assert.Equal(t, [2]string{"UTC", "UTC"}, ImageZones(fstest.MapFS{}).Local)
}

func FuzzParseCalendar(f *testing.F) {
	for _, s := range []string{"daily", "Mon..Fri *-*-* 09:00 UTC", "*-*~7/6", "@1700000000", "00:00:00.1234567",
		"2024-01-01 12:00 Europe/Berlin", "*:0/15", "1,2,3:00", "Mon,Tue 2020..2030/2-1..12/3~1,2 *:*:0..59/0.5 CEST"} {
		f.Add(s)
	}
	zones := Zones{Local: [2]string{"CET", "CEST"}, File: func(name string) bool { return name == "Europe/Berlin" }}
	f.Fuzz(func(t *testing.T, s string) {
		err := ParseCalendar(s, zones)
		if err != nil && !errors.Is(err, ErrCalendar) {
			t.Fatalf("error %v does not wrap ErrCalendar", err)
		}
		// A spec stays valid with its time zone spelled as UTC.
		if err == nil {
			if c, perr := parseCalendar(s, zones); perr != nil || c == nil {
				t.Fatalf("%q accepted but not parsed: %v", s, perr)
			}
		}
	})
}

func FuzzTZifNames(f *testing.F) {
	f.Add(tzif([]struct {
		dst  byte
		abbr string
	}{{0, "CET"}, {1, "CEST"}}, []byte{0, 1}))
	f.Add([]byte("TZif2"))
	f.Fuzz(func(t *testing.T, data []byte) {
		names, ok := TZifNames(data)
		if !ok && names != [2]string{} && names[0] == "" {
			t.Fatalf("names %q", names)
		}
	})
}
