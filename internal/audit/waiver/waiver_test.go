package waiver

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit/finding"
)

var day = time.Date(2026, 11, 22, 15, 4, 5, 0, time.UTC)

const sample = `waivers:
  - rule_id: ecs-agent-unconfigured
    unit: ecs.service
    target: "ami-*"
    reason: ECS cluster is joined by user data on these AMIs
    expires: 2026-11-22
  - rule_id: snapd
    target: "*"
    reason: snaps are still used by the data team
    expires: 2026-11-21
  - rule_id: crash-loop-*
    unit: "docker.*"
    target: "*"
    reason: upstream unit, tracked in PLAT-12
    expires: 2027-01-31
`

func findings() []finding.Finding {
	return []finding.Finding{
		{RuleID: "ecs-agent-unconfigured", Severity: finding.High, Unit: "ecs.service", Message: "m"},
		{RuleID: "ecs-agent-unconfigured", Severity: finding.High, Unit: "ecs-volume.service", Message: "m"},
		{RuleID: "snapd", Severity: finding.Low, Unit: "snapd.service", Message: "m"},
		{RuleID: "crash-loop-restart", Severity: finding.Medium, Unit: "docker.service", Message: "m"},
		{RuleID: "crash-loop-restart", Severity: finding.Medium, Unit: "ecs.service", Message: "m"},
	}
}

func TestApply(t *testing.T) {
	f, err := Parse([]byte(sample))
	require.NoError(t, err)
	in := findings()
	out := f.Apply(in, "ami-0abc", day)

	// The inputs are not modified.
	for _, x := range in {
		assert.False(t, x.Waived)
	}
	require.Len(t, out, 6)
	waived := map[string]bool{}
	for _, x := range out[:5] {
		waived[x.RuleID+"/"+x.Unit] = x.Waived
	}
	assert.Equal(t, map[string]bool{
		"ecs-agent-unconfigured/ecs.service":        true, // last day still in force
		"ecs-agent-unconfigured/ecs-volume.service": false,
		"snapd/snapd.service":                       false, // expired
		"crash-loop-restart/docker.service":         true,
		"crash-loop-restart/ecs.service":            false,
	}, waived)
	assert.Equal(t, &finding.Waiver{Reason: "ECS cluster is joined by user data on these AMIs", Expires: "2026-11-22"}, out[0].Waiver)

	exp := out[5]
	assert.Equal(t, ExpiredRuleID, exp.RuleID)
	assert.Equal(t, finding.Medium, exp.Severity)
	assert.False(t, exp.Waived)
	assert.Contains(t, exp.Message, "rule snapd")
	assert.Contains(t, exp.Message, "2026-11-21")
	assert.Equal(t, 1, finding.ExitCode(out, finding.Medium))
}

func TestApplyOtherTarget(t *testing.T) {
	f, err := Parse([]byte(sample))
	require.NoError(t, err)
	out := f.Apply(findings(), "fixture:dlami", day)
	// The ami-* waiver does not apply; the expired "*" one still reports.
	assert.False(t, out[0].Waived)
	assert.True(t, out[3].Waived)
	assert.Len(t, out, 6)
	// A day later the ECS waiver has expired too, but only ami-* targets hear of it.
	out = f.Apply(findings(), "fixture:dlami", day.Add(24*time.Hour))
	assert.Len(t, out, 6)
	out = f.Apply(findings(), "ami-1", day.Add(24*time.Hour))
	assert.Len(t, out, 7)
	assert.False(t, out[0].Waived)
}

func TestExpiredIsByUTCDay(t *testing.T) {
	f, err := Parse([]byte(sample))
	require.NoError(t, err)
	w := f.Waivers[0]
	assert.False(t, w.Expired(time.Date(2026, 11, 22, 23, 59, 59, 0, time.UTC)))
	assert.True(t, w.Expired(time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)))
	// 2026-11-23 01:00 in +05:00 is still the 22nd in UTC.
	assert.False(t, w.Expired(time.Date(2026, 11, 23, 1, 0, 0, 0, time.FixedZone("x", 5*3600))))
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"every problem at once", "waivers:\n  - unit: x\n  - rule_id: a\n    target: '*'\n    reason: ' '\n    expires: 2026-13-01\n",
			[]string{"waiver 1 ()", "rule_id is required", "target is required", "reason is required", "expires is required", "waiver 2 (a)", `expires "2026-13-01"`}},
		{"unknown key", "waivers:\n  - rule_id: a\n    reson: typo\n", []string{"reson"}},
		{"bad glob", "waivers:\n  - rule_id: 'a['\n    target: '*'\n    reason: r\n    expires: 2026-01-01\n", []string{"unterminated ["}},
		{"not yaml", "waivers: [", []string{"parse waivers"}},
		{"wrong shape", "- rule_id: a\n", []string{"parse waivers"}},
		{"null entry", "waivers:\n  -\n", []string{"empty entry"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			require.Error(t, err)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestParseEmpty(t *testing.T) {
	f, err := Parse(nil)
	require.NoError(t, err)
	assert.Empty(t, f.Waivers)
	out := f.Apply(findings(), "x", day)
	assert.Equal(t, findings(), out)
}

func TestLoad(t *testing.T) {
	p := filepath.Join(t.TempDir(), "waivers.yaml")
	require.NoError(t, os.WriteFile(p, []byte(sample), 0o644))
	f, err := Load(p)
	require.NoError(t, err)
	assert.Len(t, f.Waivers, 3)
	_, err = Load(filepath.Join(t.TempDir(), "none.yaml"))
	require.Error(t, err)
}

func TestGlob(t *testing.T) {
	tests := []struct {
		glob, name string
		want       bool
	}{
		{"*", "anything/with/slashes", true},
		{"ami-*", "ami-0abc", true},
		{"ami-*", "xami-0abc", false},
		{"docker.*", "docker.service", true},
		{"docker.*", "dockerXservice", false},
		{"getty@tty?.service", "getty@tty1.service", true},
		{"[!a]*", "b", true},
		{"[!a]*", "a", false},
		{`a\*`, "a*", true},
		{`a\*`, "ab", false},
		{"", "", true},
		{"", "x", false},
	}
	for _, tt := range tests {
		re, err := compileGlob(tt.glob)
		require.NoError(t, err, tt.glob)
		assert.Equal(t, tt.want, re.MatchString(tt.name), "%s ~ %s", tt.glob, tt.name)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte("waivers:\n  - rule_id: '[a-'\n"))
	f.Add([]byte("waivers: {}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		w, err := Parse(b)
		if err != nil {
			return
		}
		in := findings()
		out := w.Apply(in, "ami-1", day)
		// Apply only marks and appends: every input finding is still
		// there, in order, and nothing is dropped.
		require.GreaterOrEqual(t, len(out), len(in))
		for i := range in {
			assert.Equal(t, in[i].RuleID, out[i].RuleID)
			assert.Equal(t, in[i].Unit, out[i].Unit)
			assert.False(t, in[i].Waived, "the input is not modified")
		}
		for _, x := range out[len(in):] {
			assert.Equal(t, ExpiredRuleID, x.RuleID)
		}
	})
}
