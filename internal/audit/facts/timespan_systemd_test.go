package facts

import (
	"math"
	"os/exec"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
)

var usecLine = regexp.MustCompile(`(?m)^\s*μs: (\d+)$`)

// TestParseSecondsAgainstSystemd is differential: systemd-analyze
// timespan (systemd's own parse_sec) decides what every input means.
func TestParseSecondsAgainstSystemd(t *testing.T) {
	tool := testenv.Tool(t, "systemd-analyze", "systemd")
	inputs := []string{
		"10s", "100ms", "1min 30s", "1min30s", "1min30", "10", "0", "1.5", ".5s", "5.", "1 2", "1s2",
		"1e3", "2 weeks", "3months", "1M", "1y", "1sec 1sec", " 1s", "1 s", "10 msec", "1hr", "1hrs",
		"1ns", "0.0000001s", "1.2.3", "12.34 .56", "12.34s.56", "infinity", " infinity ", "infinityx",
		"+5s", "1.999999999s", "0.29s", "0.7s", "3.sec", "5 µs", "5μs", "1mo", "1 m", "1h 2m 3s 4ms 5us",
		"18446744073709551615", "18446744073709s", "9223372036854775807us", "1.5.s", "s", "", "+.5", "\v5", "\v-0",
	}
	for _, in := range inputs {
		t.Run(in, func(t *testing.T) {
			out, err := exec.Command(tool, "timespan", "--", in).CombinedOutput()
			got, perr := ParseSeconds(in)
			m := usecLine.FindSubmatch(out)
			if err != nil || m == nil {
				assert.Error(t, perr, "systemd refuses %q (%s) but ParseSeconds gives %v", in, out, got)
				return
			}
			require.NoError(t, perr, "systemd accepts %q as %s µs", in, m[1])
			want, err := strconv.ParseUint(string(m[1]), 10, 64)
			require.NoError(t, err)
			if want == math.MaxUint64 {
				assert.True(t, got.IsInf())
				return
			}
			if want > 1<<53 {
				// Beyond float64's exact integers, seconds are approximate.
				assert.InEpsilon(t, float64(want), float64(got)*1e6, 1e-12)
				return
			}
			assert.Equal(t, want, uint64(math.Round(float64(got)*1e6)))
		})
	}
}
