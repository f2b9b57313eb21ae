package unit_test

import (
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
	"github.com/amilint/amilint/internal/systemd/unit"
)

var usecLine = regexp.MustCompile(`(?m)^\s*(?:μs|us|u): (\d+)$`)

// timespanSpecs are time spans systemd accepts and refuses.
var timespanSpecs = []string{
	"10s", "100ms", "1min 30s", "1min30s", "1min30", "10", "0", "1.5", ".5s", "5.", "1 2", "1s2",
	"1e3", "2 weeks", "3months", "1M", "1y", "1sec 1sec", " 1s", "1 s", "10 msec", "1hr", "1hrs",
	"1ns", "0.0000001s", "1.2.3", "12.34 .56", "12.34s.56", "infinity", " infinity ", "infinityx",
	"+5s", "1.999999999s", "0.29s", "0.7s", "3.sec", "5 µs", "5μs", "1mo", "1 m", "1h 2m 3s 4ms 5us",
	"18446744073709551615", "18446744073709s", "9223372036854775807us", "9223372036854775808us",
	"1.5.s", "s", "", "+.5", ".5", "+", "-0", "-1", "\v5", "\v-0", "\v-5", "\f+5", "1s\v5", "\v.5",
	"5 \v", "0.-0", "3.+1", "3. 1", "3.hoge", "1 .5", "1..2", "5 5 5", "5\t5", "1d1h1m", "1w 1y",
	"99999999999999999999", "584542y", "584543y", "1M 1y 1d", "infinity 5", "5 infinity", "INFINITY",
	"10 days", "5minutes", "5minute", "5second", "5 seconds", "5usec", "5us", "5m5", "5m 5",
}

// TestParseSecAgainstSystemd is differential: systemd-analyze timespan
// (parse_time with seconds, as parse_sec) decides what every input means.
func TestParseSecAgainstSystemd(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	specs := slices.Clone(timespanSpecs)
	pieces := []string{"1", "0", "12", ".", "5", "s", "m", "ms", "min", "h", "d", "w", "M", "y", "us", "µs",
		" ", "\t", "\v", "+", "-", "x", "infinity", "sec", "9223372036854775807", "months"}
	for range 400 {
		var b strings.Builder
		for n := 1 + rng.IntN(6); n > 0; n-- {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		specs = append(specs, b.String())
	}
	script := `for s do printf '\n@@\n'; systemd-analyze timespan -- "$s" 2>&1; done; true`
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			out := sd.Run(t, "", append([]string{"sh", "-c", script, "sh"}, specs...)...)
			require.NoError(t, out.Err, "%s", out.Stderr)
			chunks := strings.Split(string(out.Stdout), "\n@@\n")[1:]
			require.Len(t, chunks, len(specs))
			for i, s := range specs {
				got, err := unit.ParseSec(s)
				m := usecLine.FindStringSubmatch(chunks[i])
				if m == nil {
					require.Contains(t, chunks[i], "Failed to parse time span", s)
					assert.Error(t, err, "systemd %d refuses %q but ParseSec gives %d", sd.Version, s, got)
					continue
				}
				if !assert.NoError(t, err, "systemd %d accepts %q as %s µs", sd.Version, s, m[1]) {
					continue
				}
				assert.Equal(t, m[1], strconv.FormatUint(got, 10), "%q", s)
			}
		})
	}
}
