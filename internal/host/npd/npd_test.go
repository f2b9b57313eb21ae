package npd_test

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/host/npd"
	"github.com/stretchr/testify/assert"
)

func TestStatus(t *testing.T) {
	zombies := finding.Finding{RuleID: "live-memcg-zombies", Severity: finding.High, Unit: "ecs.service",
		Message: "68440 zombie memory cgroups: the kernel tracks 68680 memory cgroups but only 240 exist in /sys/fs/cgroup/memory; suspect ecs.service"}
	loop := finding.Finding{RuleID: "live-unit-crashloop", Severity: finding.High, Unit: "ecs.service",
		Message: "ecs.service is crash-looping: it is waiting to be restarted after a failure (auto-restart)"}
	low := finding.Finding{RuleID: "live-core-saturated", Severity: finding.Medium, Message: "core 3 at 97% system while the machine is 4% busy"}
	tests := []struct {
		name     string
		fs       []finding.Finding
		err      error
		wantCode int
		wantMsg  string
	}{
		{"nothing", nil, nil, npd.OK, "amilint: no live problem"},
		{"below fail-on", []finding.Finding{low}, nil, npd.OK, "amilint: no live problem"},
		{"waived", []finding.Finding{{RuleID: "x", Severity: finding.Critical, Waived: true, Message: "m"}}, nil, npd.OK, "amilint: no live problem"},
		{"one", []finding.Finding{loop}, nil, npd.Problem, "live-unit-crashloop: ecs.service is crash-looping"},
		{"two", []finding.Finding{low, zombies, loop}, nil, npd.Problem, "live-memcg-zombies ecs.service: 68440 zombie memory cgroups (+1 more)"},
		{"error", []finding.Finding{loop}, errors.New("read proc/cgroups:\nno such file"), npd.Unknown, "amilint: read proc/cgroups: no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, msg := npd.Status(tt.fs, tt.err, finding.High, 0)
			assert.Equal(t, tt.wantCode, code)
			assert.Equal(t, tt.wantMsg, msg)
			assert.LessOrEqual(t, len(msg), npd.MaxMessage)
			assert.NotContains(t, msg, "\n")
		})
	}
}

func TestStatusCuts(t *testing.T) {
	f := finding.Finding{RuleID: "r", Severity: finding.High, Message: strings.Repeat("é", 100)}
	for _, max := range []int{10, 33, 80} {
		code, msg := npd.Status([]finding.Finding{f, f}, nil, finding.Low, max)
		assert.Equal(t, npd.Problem, code)
		assert.LessOrEqual(t, len(msg), max)
		assert.True(t, utf8.ValidString(msg))
		assert.True(t, strings.HasSuffix(msg, "(+1 more)"))
	}
}

// TestStatusNeutralisesEscapes: a finding's message may quote a cgroup
// path a user named; the node condition's message carries no control
// character and is valid UTF-8.
func TestStatusNeutralisesEscapes(t *testing.T) {
	f := finding.Finding{RuleID: "live-memcg-zombies", Severity: finding.High, Message: "9 zombies in a/\x1b]0;x\x07\x1b[2J\u009b1m\xff\u202e"}
	code, msg := npd.Status([]finding.Finding{f}, nil, finding.High, 0)
	assert.Equal(t, npd.Problem, code)
	assert.Equal(t, "live-memcg-zombies: 9 zombies in a/\uFFFD]0;x\uFFFD\uFFFD[2J\uFFFD1m\uFFFD\uFFFD", msg)
	_, msg = npd.Status(nil, errors.New("read a/\x1b[2J/cgroup.stat"), finding.High, 0)
	assert.Equal(t, "amilint: read a/\uFFFD[2J/cgroup.stat", msg)
}
