package diff

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/report"
	"github.com/amilint/amilint/internal/systemd/unit"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

var ecsChain = []unit.Edge{
	{From: "default.target", To: "multi-user.target", Kind: "alias", Source: "/lib/systemd/system/default.target"},
	{From: "multi-user.target", To: "ecs.service", Kind: ".wants", Source: "/etc/systemd/system/multi-user.target.wants/ecs.service"},
}

var ecsFinding = finding.Finding{
	RuleID: "ecs-agent-unused", Title: "Amazon ECS agent enabled without an ECS cluster", Severity: finding.High,
	Unit: "ecs.service", Message: "ecs.service starts at boot but /etc/ecs/ecs.config names no ECS_CLUSTER.",
	Chain: ecsChain, Remediation: finding.Remediation{Action: "disable", Units: []string{"ecs.service"}},
}

var loopFinding = finding.Finding{
	RuleID: "restart-crash-loop", Severity: finding.Medium, Unit: "ecs.service",
	Message: "Restart=always with RestartSec=10s never trips the start limit.", Chain: ecsChain,
}

// base is a hardened image; dlami is the same image after a bump that
// pulled in the ECS agent, enabled and crash-loop prone, masked cups and
// dropped chrony.
func base() Image {
	return Image{Name: "base-2026.10", Units: []Unit{
		{Name: "chrony.service", State: "enabled", StartsAtBoot: true, ExecStart: "/usr/sbin/chronyd -F 1", Restart: "no"},
		{Name: "cups.service", State: "enabled", StartsAtBoot: true, ExecStart: "/usr/sbin/cupsd -l", Restart: "on-failure", RestartSec: 0.1},
		{Name: "ssh.service", State: "enabled", StartsAtBoot: true, ExecStart: "/usr/sbin/sshd -D $SSHD_OPTS", Restart: "on-failure", RestartSec: 0.1},
		{Name: "motd-news.service", State: "static"},
	}, Report: finding.NewReport(finding.Target{Name: "base-2026.10", Kind: "dir"}, []finding.Finding{{
		RuleID: "cups-on-server", Severity: finding.Low, Unit: "cups.service", Message: "cups starts at boot on a server image.",
	}})}
}

func dlami() Image {
	return Image{Name: "dlami-2026.11", Units: []Unit{
		{Name: "cups.service", State: "masked"},
		{Name: "ecs.service", State: "enabled", StartsAtBoot: true, Chain: ecsChain, ExecStart: "/usr/libexec/amazon-ecs-init start", Restart: "always", RestartSec: 10},
		{Name: "ssh.service", State: "enabled", StartsAtBoot: true, ExecStart: "/usr/sbin/sshd -D -o UseDNS=no $SSHD_OPTS", Restart: "always", RestartSec: 5},
		{Name: "motd-news.service", State: "static", StartsAtBoot: true},
	}, Report: finding.NewReport(finding.Target{Name: "dlami-2026.11", Kind: "dir"}, []finding.Finding{ecsFinding, loopFinding})}
}

func TestCompare(t *testing.T) {
	d := Compare(base(), dlami())
	names := func(cs []Change) []string {
		out := []string{}
		for _, c := range cs {
			out = append(out, c.Unit)
		}
		return out
	}
	assert.Equal(t, []string{"ecs.service"}, names(d.Added))
	assert.Equal(t, []string{"chrony.service"}, names(d.Removed))
	assert.Equal(t, []string{"ecs.service"}, names(d.NewlyEnabled))
	assert.Empty(t, d.Disabled, "cups is masked, not merely disabled")
	assert.Equal(t, []string{"ecs.service", "motd-news.service"}, names(d.NewlyStarted))
	assert.Equal(t, []string{"chrony.service", "cups.service"}, names(d.NoLongerStarted))
	assert.Equal(t, []string{"cups.service"}, names(d.Masked))
	assert.Empty(t, d.Unmasked)
	assert.Equal(t, []string{"ssh.service"}, names(d.ExecStartChanged), "a masked unit has no ExecStart to compare")
	assert.Equal(t, []string{"ssh.service"}, names(d.RestartChanged))
	require.Len(t, d.FindingsAdded, 2)
	assert.Equal(t, "ecs-agent-unused", d.FindingsAdded[0].RuleID, "highest severity first")
	require.Len(t, d.FindingsResolved, 1)
	assert.Equal(t, "cups-on-server", d.FindingsResolved[0].RuleID)

	back := Compare(dlami(), base())
	assert.Equal(t, []string{"ecs.service"}, names(back.Removed))
	assert.Equal(t, []string{"cups.service"}, names(back.Unmasked))
	assert.Equal(t, []string{"chrony.service", "cups.service"}, names(back.NewlyEnabled))
	assert.Len(t, back.FindingsResolved, 2)
	assert.Len(t, back.FindingsAdded, 1)

	same := Compare(base(), base())
	assert.True(t, same.Empty())
	assert.False(t, d.Empty())
}

func TestExitCode(t *testing.T) {
	tests := []struct {
		name   string
		old    Image
		new    Image
		failOn finding.Severity
		want   int
	}{
		{"bump adds high", base(), dlami(), finding.High, 1},
		{"bump adds medium", base(), dlami(), finding.Medium, 1},
		{"bump adds nothing critical", base(), dlami(), finding.Critical, 0},
		{"fix resolves, adds low", dlami(), base(), finding.Medium, 0},
		{"fix adds low at fail-on low", dlami(), base(), finding.Low, 1},
		{"same image", dlami(), dlami(), finding.Info, 0},
		{"no reports", Image{Name: "a"}, Image{Name: "b"}, finding.Info, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, ExitCode(Compare(tt.old, tt.new), tt.failOn))
		})
	}
	waived := dlami()
	waived.Report = finding.NewReport(waived.Report.Target, []finding.Finding{ecsFinding})
	waived.Report.Findings[0].Waived = true
	assert.Equal(t, 0, ExitCode(Compare(base(), waived), finding.Info), "a waived finding added does not fail")
}

func TestGolden(t *testing.T) {
	for _, tt := range []struct {
		name    string
		old     Image
		new     Image
		formats []string
	}{
		{"bump", base(), dlami(), Formats},
		{"fix", dlami(), base(), Formats},
		{"same", base(), base(), []string{"text"}},
	} {
		for _, f := range tt.formats {
			name := tt.name + "." + map[string]string{"text": "txt", "json": "json", "markdown": "md", "html": "html"}[f]
			t.Run(name, func(t *testing.T) {
				w, err := Get(f, finding.Medium)
				require.NoError(t, err)
				var b bytes.Buffer
				require.NoError(t, w.Write(&b, Compare(tt.old, tt.new)))
				p := filepath.Join("testdata", "golden", name)
				if *update {
					require.NoError(t, os.WriteFile(p, b.Bytes(), 0o644))
				}
				want, err := os.ReadFile(p)
				require.NoError(t, err, "run go test -update")
				assert.Equal(t, string(want), b.String())
			})
		}
	}
	_, err := Get("sarif", finding.Medium)
	assert.Error(t, err)
}

func TestJSONShape(t *testing.T) {
	w, err := Get("json", finding.Medium)
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, w.Write(&b, Compare(Image{Name: "a"}, Image{Name: "b"})))
	var m map[string]any
	require.NoError(t, json.Unmarshal(b.Bytes(), &m))
	assert.Equal(t, Schema, m["schema"])
	for _, k := range []string{"added", "removed", "newly_enabled", "newly_started_at_boot", "masked", "exec_start_changed", "restart_changed", "findings_added", "findings_resolved"} {
		assert.Equal(t, []any{}, m[k], k)
	}
}

func TestTextAndMarkdownNeutraliseEscapes(t *testing.T) {
	evil := Image{Name: "new\x1b]0;x\x07", Units: []Unit{{Name: "a\x1b[2J.service", State: "enabled", StartsAtBoot: true, ExecStart: "/bin/\x1b[8m"}},
		Report: finding.NewReport(finding.Target{Name: "n"}, []finding.Finding{{RuleID: "r\x1b", Severity: finding.High, Unit: "u\x1b", Message: "m\x1b[0m"}})}
	for _, f := range []string{"text", "markdown"} {
		w, err := Get(f, finding.High)
		require.NoError(t, err)
		var b bytes.Buffer
		require.NoError(t, w.Write(&b, Compare(Image{Name: "old"}, evil)))
		assert.NotContains(t, b.String(), "\x1b", f)
		assert.NotContains(t, b.String(), "\x07", f)
	}
}

func TestExposureChanges(t *testing.T) {
	e := func(v float64) *float64 { return &v }
	old := Image{Name: "old", Units: []Unit{
		{Name: "ssh.service", State: "enabled", Exposure: e(9.6)},
		{Name: "cron.service", State: "enabled", Exposure: e(4.1)},
		{Name: "same.service", State: "enabled", Exposure: e(9.6)},
		{Name: "gone.service", State: "enabled", Exposure: e(9.6)},
		{Name: "unscored.service", State: "enabled"},
	}}
	new := Image{Name: "new", Units: []Unit{
		{Name: "ssh.service", State: "enabled", Exposure: e(3.5)},
		{Name: "cron.service", State: "enabled", Exposure: e(9.6)},
		{Name: "same.service", State: "enabled", Exposure: e(9.6)},
		{Name: "unscored.service", State: "enabled", Exposure: e(9.6)},
	}}
	d := Compare(old, new)
	names := func(cs []Change) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Unit)
		}
		return out
	}
	assert.Equal(t, []string{"cron.service"}, names(d.MoreExposed))
	assert.Equal(t, []string{"ssh.service"}, names(d.LessExposed))
	w, err := Get("text", finding.High)
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, w.Write(&b, d))
	assert.Contains(t, b.String(), "More exposed")
	assert.Contains(t, b.String(), "cron.service")
	assert.Contains(t, b.String(), "exposure 4.1 → 9.6")
	assert.Contains(t, b.String(), "exposure 9.6 → 3.5")
}

// TestMarkdownPipesStayInTheirCell: a rule id or unit name with a pipe (a
// user policy's, a hostile image's) must not split its table row.
func TestMarkdownPipesStayInTheirCell(t *testing.T) {
	evil := Image{Name: "new", Units: []Unit{{Name: "a|b.service", State: "enabled"}},
		Report: finding.NewReport(finding.Target{Name: "n"}, []finding.Finding{{RuleID: "r|x", Severity: finding.High, Unit: "u|v", Message: "m|n"}})}
	w, err := Get("markdown", finding.High)
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, w.Write(&b, Compare(Image{Name: "old"}, evil)))
	rows := 0
	for _, l := range strings.Split(b.String(), "\n") {
		cells := strings.Count(l, "|") - strings.Count(l, `\|`) - 1
		switch {
		case strings.HasPrefix(l, "| high"):
			assert.Equal(t, 4, cells, l)
			rows++
		case strings.HasPrefix(l, "| `a"):
			assert.Equal(t, 2, cells, l)
			rows++
		}
	}
	assert.Equal(t, 3, rows, "the finding, the unit added and newly enabled")
}

// TestMarkdownFitsAComment: a diff of two very different images (3,000
// units each way, a finding with a huge message) stays within a
// comment's limit, keeps its first tables and counts what it leaves out.
func TestMarkdownFitsAComment(t *testing.T) {
	before, after := Image{Name: "old"}, Image{Name: "new"}
	for i := range 3000 {
		before.Units = append(before.Units, Unit{Name: fmt.Sprintf("old%04d.service", i), State: "enabled"})
		after.Units = append(after.Units, Unit{Name: fmt.Sprintf("new%04d.service", i), State: "enabled"})
	}
	after.Report = finding.NewReport(finding.Target{Name: "new"}, []finding.Finding{{RuleID: "exec-missing", Severity: finding.High, Unit: "huge.service", Message: strings.Repeat("m", 100000)}})
	w, err := Get("markdown", finding.High)
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, w.Write(&b, Compare(before, after)))
	md := b.String()
	require.LessOrEqual(t, len(md), report.CommentLimit)
	assert.True(t, strings.Contains(md, "| high | `exec-missing` | `huge.service` | "+strings.Repeat("m", report.MessageLimit-3)+"… |\n"), "the finding first, its message clipped")
	m := regexp.MustCompile(`: (\d+) of (\d+) rows left out\.`).FindStringSubmatch(md)
	require.NotNil(t, m, "the note")
	rows := strings.Count(md, "\n| `")
	left, _ := strconv.Atoi(m[1])
	assert.Equal(t, m[2], strconv.Itoa(rows+left+1), "every row shown or counted (the finding's row starts with its severity)")
	assert.Greater(t, rows, 100)
	assert.Greater(t, left, 1000)

	// A diff that fits is not shortened.
	b.Reset()
	require.NoError(t, w.Write(&b, Compare(base(), dlami())))
	assert.NotContains(t, b.String(), "Shortened")
}

func TestHTMLShowsBidi(t *testing.T) {
	evil := Image{Name: "new\u202e", Units: []Unit{{Name: "a\u202eb.service", State: "enabled", StartsAtBoot: true, ExecStart: "/bin/\u2066x"}}}
	w, err := Get("html", finding.High)
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, w.Write(&b, Compare(Image{Name: "old"}, evil)))
	assert.Equal(t, -1, strings.IndexFunc(b.String(), finding.IsBidi), "a bidirectional formatting character is left")
	assert.Contains(t, b.String(), "a[U+202E]b.service")
}
