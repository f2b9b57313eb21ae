package unit

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseSec(t *testing.T) {
	for in, want := range map[string]uint64{
		"10s": 10_000_000, "1min 30s": 90_000_000, "1.5": 1_500_000, ".5s": 500_000,
		"\v5": 5_000_000, "\v-0": 0, "1s\v5": 6_000_000, "infinity": USecInfinity, " infinity ": USecInfinity,
		"12.34 .56": 12_900_000, "1M": usecPerMonth, "5 µs": 5, "5μs": 5,
	} {
		got, err := ParseSec(in)
		if assert.NoError(t, err, in) {
			assert.Equal(t, want, got, in)
		}
	}
	for _, in := range []string{"", " ", "+.5", "-0", "\v-5", "\v.5", "5.", "1.2.3", "3.sec", "infinityx", "s", "1e3",
		"18446744073709551615", "9223372036854775808us", "5 \v"} {
		_, err := ParseSec(in)
		assert.ErrorIs(t, err, ErrTimeSpan, "%q", in)
	}
}

func FuzzParseSec(f *testing.F) {
	for _, s := range []string{"10s", "100ms", "1min 30s", "infinity", "1.5h", "", "-1", "1e9y", "5 µs", "1..2", "\v-0", "+.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseSec(s)
		if err != nil {
			if !errors.Is(err, ErrTimeSpan) {
				t.Fatalf("error %v does not wrap ErrTimeSpan", err)
			}
			return
		}
		// Adding a unit-less zero changes nothing.
		if v != USecInfinity {
			if w, err := ParseSec(s + " 0"); err != nil || w != v {
				t.Fatalf("%q is %d, %q is %d (%v)", s, v, s+" 0", w, err)
			}
		}
	})
}
