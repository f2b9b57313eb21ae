package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/report"
	"github.com/amilint/amilint/internal/systemd/unit"
)

var reportECSChain = []unit.Edge{
	{From: "default.target", To: "multi-user.target", Kind: "alias"},
	{From: "multi-user.target", To: "ecs.service", Kind: ".wants", Source: "/etc/systemd/system/multi-user.target.wants/ecs.service"},
}

// writeReport writes an amilint/v1 report for target with findings to dir.
func writeReport(t testing.TB, dir, target string, fs ...finding.Finding) string {
	t.Helper()
	b, err := json.Marshal(finding.NewReport(finding.Target{Name: target, Kind: "dir"}, fs))
	require.NoError(t, err)
	p := filepath.Join(dir, target+".json")
	require.NoError(t, os.WriteFile(p, b, 0o644))
	return p
}

func ecsHigh() finding.Finding {
	return finding.Finding{RuleID: "ecs-agent-unused", Severity: finding.High, Unit: "ecs.service",
		Message: "ecs.service starts at boot without a cluster", Chain: reportECSChain,
		Remediation: finding.Remediation{Action: "disable"}}
}

func TestReportAggregates(t *testing.T) {
	dir := t.TempDir()
	a := writeReport(t, dir, "dlami-a", ecsHigh(),
		finding.Finding{RuleID: "restart-crash-loop", Severity: finding.Medium, Unit: "ecs.service", Message: "crash loop"})
	b := writeReport(t, dir, "dlami-b", ecsHigh())
	c := writeReport(t, dir, "hardened")

	code, out, errs := runUnitsCLI("report", "-o", "json", a, b, c)
	require.Equal(t, ExitFindings, code, errs)
	var r report.Rollout
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	assert.Equal(t, 3, r.Summary.Reports)
	assert.Equal(t, 2, r.Summary.Failing)
	require.NotEmpty(t, r.Rules)
	assert.Equal(t, "ecs-agent-unused", r.Rules[0].RuleID)
	assert.Equal(t, 2, r.Rules[0].Targets)
	require.NotEmpty(t, r.Units)
	assert.Equal(t, "ecs.service", r.Units[0].Unit)
	assert.Equal(t, 2, r.Units[0].Targets)
	assert.Equal(t, []string{"dlami-a", "dlami-b", "hardened"}, []string{r.Targets[0].Name, r.Targets[1].Name, r.Targets[2].Name})
	assert.Equal(t, c, r.Targets[2].Source)

	code, _, errs = runUnitsCLI("report", "--fail-on", "critical", a, b, c)
	assert.Equal(t, ExitOK, code, "nothing critical: %s", errs)
	code, _, _ = runUnitsCLI("report", c)
	assert.Equal(t, ExitOK, code, "a clean fleet passes")

	for _, f := range []string{"markdown", "html"} {
		code, out, errs = runUnitsCLI("report", a, b, c, "-o", f)
		require.Equal(t, ExitFindings, code, errs)
		assert.Contains(t, out, "ecs.service", f)
		assert.Contains(t, out, "ecs-agent-unused", f)
	}
	assert.True(t, strings.HasPrefix(out, "<!DOCTYPE html>"))
}

func TestReportRejectsBadInput(t *testing.T) {
	dir := t.TempDir()
	good := writeReport(t, dir, "good", ecsHigh())
	corrupt := filepath.Join(dir, "corrupt.json")
	require.NoError(t, os.WriteFile(corrupt, []byte(`{"schema":"amilint/v1","findings":[{"rule_id":`), 0o644))
	other := filepath.Join(dir, "other.json")
	require.NoError(t, os.WriteFile(other, []byte(`{"schema":"trivy/v2"}`), 0o644))
	badSev := filepath.Join(dir, "badsev.json")
	require.NoError(t, os.WriteFile(badSev, []byte(`{"schema":"amilint/v1","findings":[{"rule_id":"x","severity":"urgent","message":"m"}]}`), 0o644))
	missing := filepath.Join(dir, "missing.json")

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"corrupt", []string{good, corrupt, good}, corrupt},
		{"other schema", []string{other}, other},
		{"bad severity", []string{badSev}, badSev},
		{"missing", []string{good, missing}, missing},
		{"first bad file in argument order", []string{good, missing, corrupt}, missing},
		{"no files", nil, "no report files"},
		{"bad format", []string{"-o", "sarif", good}, "rollout format"},
		{"bad fail-on", []string{"--fail-on", "urgent", good}, "urgent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runUnitsCLI(append([]string{"report"}, tt.args...)...)
			assert.Equal(t, ExitError, code)
			assert.Empty(t, out, "no partial report on stdout")
			assert.Equal(t, 1, strings.Count(errs, "\n"), "one line: %q", errs)
			assert.Contains(t, errs, tt.want)
		})
	}
}

// BenchmarkReport10k runs `amilint report -o json` over 10,000 report files
// on disk, the whole command: read, decode, aggregate, write.
func BenchmarkReport10k(b *testing.B) {
	dir := b.TempDir()
	rules := []string{"ecs-agent-unused", "restart-crash-loop", "ssm-agent-unconfigured", "snapd-on-server", "motd-news", "cups"}
	args := []string{"report", "-o", "json"}
	for i := range 10_000 {
		var fs []finding.Finding
		for j := range 1 + i%4 {
			rule := rules[(i+j)%len(rules)]
			fs = append(fs, finding.Finding{RuleID: rule, Severity: finding.Severity((i * j) % 5),
				Unit: fmt.Sprintf("%s-%d.service", rule, j), Message: "starts at boot", Chain: reportECSChain,
				Waived: (i+j)%9 == 0, Remediation: finding.Remediation{Action: "disable"}})
		}
		args = append(args, writeReport(b, dir, fmt.Sprintf("host-%05d", i), fs...))
	}
	b.ResetTimer()
	for b.Loop() {
		var errb bytes.Buffer
		if code := Run(context.Background(), args, io.Discard, &errb); code == ExitError {
			b.Fatal(errb.String())
		}
	}
}
