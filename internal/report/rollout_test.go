package report

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit/finding"
)

// fleet is three hosts: the incident image, a second host of it where only
// the ECS agent was flagged, and a hardened host.
func fleet() *Rollout {
	a := NewAggregator(finding.Medium)
	a.Add("reports/host-a.json", sampleReport())
	b := sampleReport()
	b.Target.Name = "dlami-ubuntu-20.04-b"
	b.Findings = b.Findings[:1]
	a.Add("reports/host-b.json", b)
	a.Add("reports/hardened.json", finding.NewReport(finding.Target{Name: "hardened-debian-12", Kind: "dir"}, nil))
	return a.Rollout()
}

func TestRolloutAggregates(t *testing.T) {
	r := fleet()
	assert.Equal(t, RolloutSchema, r.Schema)
	assert.Equal(t, 3, r.Summary.Reports)
	assert.Equal(t, 2, r.Summary.Failing)
	assert.Equal(t, map[string]int{"critical": 0, "high": 2, "medium": 1, "low": 1, "info": 0}, r.Summary.Findings)
	assert.Equal(t, 1, r.Summary.Waived)
	assert.Equal(t, 2, r.Summary.TargetsByHighest["high"])
	assert.Equal(t, 1, r.Summary.TargetsByHighest["none"])

	require.Len(t, r.Rules, 4)
	assert.Equal(t, RuleStat{RuleID: "ecs-agent-unused", Title: "Amazon ECS agent enabled without an ECS cluster",
		Highest: "high", Targets: 2, Findings: 2, Units: []string{"ecs.service"}}, r.Rules[0])
	last := r.Rules[len(r.Rules)-1]
	assert.Equal(t, "ssm-agent-unconfigured", last.RuleID, "a rule seen only waived has no highest severity and sorts last")
	assert.Equal(t, "", last.Highest)
	assert.Equal(t, 1, last.Waived)

	require.Len(t, r.Units, 2)
	assert.Equal(t, UnitStat{Unit: "ecs.service", Targets: 2, Findings: 3, Highest: "high",
		Rules: []string{"ecs-agent-unused", "restart-crash-loop"}}, r.Units[0])
	assert.Equal(t, "motd-news.service", r.Units[1].Unit)

	require.Len(t, r.Targets, 3)
	assert.Equal(t, "dlami-ubuntu-20.04", r.Targets[0].Name, "worst first: same highest, more findings")
	assert.Equal(t, "dlami-ubuntu-20.04-b", r.Targets[1].Name)
	assert.Equal(t, "hardened-debian-12", r.Targets[2].Name)
	assert.False(t, r.Targets[2].Failing)
	assert.Equal(t, "reports/hardened.json", r.Targets[2].Source)
}

func TestRolloutGolden(t *testing.T) {
	for _, f := range RolloutFormats {
		name := "rollout." + map[string]string{"json": "json", "markdown": "md", "html": "html"}[f]
		t.Run(name, func(t *testing.T) {
			w, err := GetRollout(f)
			require.NoError(t, err)
			var b bytes.Buffer
			require.NoError(t, w.Write(&b, fleet()))
			golden(t, name, b.Bytes())
		})
	}
	_, err := GetRollout("sarif")
	assert.Error(t, err)
}

func TestRolloutEmptyAndLimits(t *testing.T) {
	r := NewAggregator(finding.High).Rollout()
	var b bytes.Buffer
	require.NoError(t, rolloutJSON{}.Write(&b, r))
	var m map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &m))
	assert.Equal(t, []any{}, m["targets"])
	assert.Equal(t, []any{}, m["rules"])

	a := NewAggregator(finding.Medium)
	for _, raw := range generateReports(250) {
		rep, err := finding.Decode(raw)
		require.NoError(t, err)
		a.Add("gen", rep)
	}
	r = a.Rollout()
	b.Reset()
	require.NoError(t, rolloutMarkdown{}.Write(&b, r))
	assert.Contains(t, b.String(), "… and 150 more (see the JSON report).")
	b.Reset()
	require.NoError(t, rolloutHTML{}.Write(&b, r))
	assert.Contains(t, b.String(), "… and 150 more")
}

// generateReports makes n amilint/v1 JSON reports of a varied fleet: every
// host has a few of a dozen rules on a few dozen units, some waived.
func generateReports(n int) [][]byte {
	rules := []string{"ecs-agent-unused", "restart-crash-loop", "ssm-agent-unconfigured", "snapd-on-server",
		"motd-news", "apport", "modemmanager", "cups", "avahi", "multipathd", "fwupd-refresh", "missing-execstart"}
	out := make([][]byte, n)
	for i := range n {
		var fs []finding.Finding
		for j := range 2 + i%5 {
			rule := rules[(i*7+j*3)%len(rules)]
			unit := fmt.Sprintf("%s-%d.service", rule, (i+j)%40)
			fs = append(fs, finding.Finding{
				RuleID: rule, Title: "Rule " + rule, Severity: finding.Severity((i + j) % 5), Unit: unit,
				Message: unit + " starts at boot and is not needed on this host.",
				Chain:   ecsChain, Waived: (i+j)%11 == 0,
				Remediation: finding.Remediation{Action: "disable", Units: []string{unit}},
			})
		}
		r := finding.NewReport(finding.Target{Name: fmt.Sprintf("host-%05d", i), Kind: "live", OS: "Ubuntu 20.04.6 LTS"}, fs)
		b, err := json.Marshal(r)
		if err != nil {
			panic(err)
		}
		out[i] = b
	}
	return out
}

// BenchmarkRollout10k decodes 10,000 reports, aggregates them and writes
// the JSON and Markdown rollout: the work of amilint report minus file I/O.
func BenchmarkRollout10k(b *testing.B) {
	raw := generateReports(10_000)
	var size int
	for _, r := range raw {
		size += len(r)
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	for b.Loop() {
		a := NewAggregator(finding.Medium)
		for _, r := range raw {
			rep, err := finding.Decode(r)
			if err != nil {
				b.Fatal(err)
			}
			a.Add("gen", rep)
		}
		ro := a.Rollout()
		if err := (rolloutJSON{}).Write(io.Discard, ro); err != nil {
			b.Fatal(err)
		}
		if err := (rolloutMarkdown{}).Write(io.Discard, ro); err != nil {
			b.Fatal(err)
		}
	}
}
