package boot

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
)

// timerValueCases are timers whose elapse values config_parse_timer keeps
// or ignores: a value whose specifiers do not resolve, or that
// calendar_spec_from_string (OnCalendar=) or parse_sec (the others)
// refuses, is ignored, and a timer left with none (and no
// OnClockChange=/OnTimezoneChange=) is refused.
var timerValueCases = map[string]string{
	"tv-cal-word":      "OnCalendar=bogus\n",
	"tv-cal-month":     "OnCalendar=2024-13-01\n",
	"tv-cal-year":      "OnCalendar=2200-01-01\n",
	"tv-cal-eom":       "OnCalendar=*-*~9,27\n",
	"tv-cal-eom-ok":    "OnCalendar=*-*~27\n",
	"tv-cal-step":      "OnCalendar=*/2:00\n",
	"tv-cal-epoch":     "OnCalendar=@7258118400\n",
	"tv-cal-epoch-ok":  "OnCalendar=@0\n",
	"tv-cal-zone":      "OnCalendar=daily Europe/Berlin\n",
	"tv-cal-nozone":    "OnCalendar=daily Nowhere/Zone\n",
	"tv-cal-legacy":    "OnCalendar=daily CET\n",
	"tv-cal-utc":       "OnCalendar=Mon..Fri 09:00 utc\n",
	"tv-cal-spec":      "OnCalendar=%X\n",
	"tv-boot-dots":     "OnBootSec=1.2.3\n",
	"tv-boot-neg":      "OnBootSec=-5s\n",
	"tv-boot-unit":     "OnBootSec=5 parsecs\n",
	"tv-boot-spec":     "OnBootSec=%X\n",
	"tv-active-plus":   "OnActiveSec=+.5\n",
	"tv-active-vt":     "OnActiveSec=\v5\n",
	"tv-startup-inf":   "OnStartupSec=infinity\n",
	"tv-inactive-dot":  "OnUnitInactiveSec=5.\n",
	"tv-unitact-big":   "OnUnitActiveSec=18446744073709551615\n",
	"tv-mixed-cal":     "OnCalendar=bogus\nOnBootSec=5min\n",
	"tv-mixed-sec":     "OnBootSec=x\nOnCalendar=daily\n",
	"tv-all-bad":       "OnBootSec=x\nOnCalendar=y\nOnActiveSec=%X\nOnUnitActiveSec=1..2\n",
	"tv-reset-bad":     "OnBootSec=1h\nOnCalendar=\nOnBootSec=bad\n",
	"tv-bad-reset-ok":  "OnBootSec=bad\nOnBootSec=\nOnActiveSec=1s\n",
	"tv-reset-spec":    "OnCalendar=daily\nOnActiveSec=\nOnCalendar=%X\n",
	"tv-clock-bad":     "OnBootSec=bad\nOnClockChange=yes\nOnClockChange=maybe\n",
	"tv-tzchange-no":   "OnBootSec=bad\nOnTimezoneChange=yes\nOnTimezoneChange=no\n",
	"tv-clock-empty":   "OnCalendar=bad\nOnClockChange=yes\nOnClockChange=\n",
	"tv-dropin-bad":    "OnCalendar=daily\n",
	"tv-dropin-revive": "OnCalendar=bad\n",
}

// timerValueOps are timerValueCases, each timer enabled through
// multi-user.target.wants with a service to trigger, and drop-ins that
// reset a timer's values to a bad one and add a good one to a timer that
// had none.
func timerValueOps() []op {
	var ops []op
	for n, values := range timerValueCases {
		ops = append(ops, file("/etc/systemd/system/"+n+".timer", "[Timer]\n"+values),
			file("/etc/systemd/system/"+n+".service", svc),
			link("/etc/systemd/system/multi-user.target.wants/"+n+".timer", "/etc/systemd/system/"+n+".timer"))
	}
	// A timer named by its value: %p is "30", 30 seconds.
	ops = append(ops,
		file("/etc/systemd/system/30.timer", "[Timer]\nOnBootSec=%p\n"),
		file("/etc/systemd/system/30.service", svc),
		link("/etc/systemd/system/multi-user.target.wants/30.timer", "/etc/systemd/system/30.timer"),
		file("/etc/systemd/system/tv-dropin-bad.timer.d/a.conf", "[Timer]\nOnCalendar=\nOnCalendar=2024-02-30 25:00\n"),
		file("/etc/systemd/system/tv-dropin-revive.timer.d/a.conf", "[Timer]\nOnUnitActiveSec=1w 2d\n"),
	)
	return ops
}

// localZoneCases are timers that name a time zone by the abbreviations
// of the local one, with /etc/localtime linking to Asia/Tokyo and
// Istanbul: glibc's tzname is JST and JDT (the last daylight-saving type
// of the file, from 1951, not its TZ string's "JST-9"), or +03 and EEST.
var localZoneCases = map[string]map[string]string{
	"Asia/Tokyo": {
		"tz-jst": "OnCalendar=daily JST\n", "tz-jdt": "OnCalendar=daily jdt\n", "tz-cest": "OnCalendar=daily CEST\n",
		"tz-jst-nospace": "OnCalendar=dailyJST\n", "tz-only": "OnCalendar=JST\n", "tz-tokyo": "OnCalendar=12:00 Asia/Tokyo\n",
	},
	"Europe/Istanbul": {
		"tz-plus03": "OnCalendar=daily +03\n", "tz-eest": "OnCalendar=Mon 10:00 EEST\n", "tz-eet": "OnCalendar=daily EET\n",
		"tz-lmt": "OnCalendar=daily LMT\n", "tz-cest": "OnCalendar=daily CEST\n",
	},
}

// TestOracleTimerLocalZone compares timers whose calendar events name
// the local time zone's abbreviations.
func TestOracleTimerLocalZone(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		for zone, cases := range localZoneCases {
			t.Run(sd.Name()+"/"+zone, func(t *testing.T) {
				ops := []op{link("/etc/localtime", "/usr/share/zoneinfo/"+zone)}
				var names []string
				for n, values := range cases {
					names = append(names, n+".timer")
					ops = append(ops, file("/etc/systemd/system/"+n+".timer", "[Timer]\n"+values),
						file("/etc/systemd/system/"+n+".service", svc),
						link("/etc/systemd/system/multi-user.target.wants/"+n+".timer", "/etc/systemd/system/"+n+".timer"))
				}
				v := newVariant(t, sd, ops)
				want := v.oracle(t)
				require.Empty(t, want.Failed, "systemd fails the transaction")
				got, _ := modelStart(t, v)
				slices.Sort(names)
				for _, n := range names {
					s := slices.Contains(want.Start, n)
					assert.Equal(t, s, slices.Contains(got, n), "%s: systemd starts it: %v", n, s)
				}
				assert.Equal(t, want.Start, got)
			})
		}
	}
}

// TestOracleTimerValues compares, for each timer of timerValueOps,
// whether systemd and the model start it.
func TestOracleTimerValues(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			v := newVariant(t, sd, timerValueOps())
			want := v.oracle(t)
			require.Empty(t, want.Failed, "systemd fails the transaction")
			got, _ := modelStart(t, v)
			names := []string{"30.timer"}
			for n := range timerValueCases {
				names = append(names, n+".timer")
			}
			slices.Sort(names)
			started, wrong := 0, 0
			for _, n := range names {
				s := slices.Contains(want.Start, n)
				if s {
					started++
				}
				if !assert.Equal(t, s, slices.Contains(got, n), "%s: systemd starts it: %v", n, s) {
					wrong++
				}
			}
			t.Logf("systemd %d starts %d of %d timers; the model is wrong about %d", sd.Version, started, len(names), wrong)
			assert.Greater(t, started, 5)
			assert.Greater(t, len(names)-started, 5)
			onlySystemd, onlyModel := diff(want.Start, got)
			assert.Empty(t, onlySystemd, "only systemd")
			assert.Empty(t, onlyModel, "only model: %s", strings.Join(onlyModel, " "))
		})
	}
}
