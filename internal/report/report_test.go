package report

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"flag"
	"fmt"
	"html"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/systemd/unit"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// golden compares got with testdata/golden/name, rewriting it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", "golden", name)
	if *update {
		require.NoError(t, os.WriteFile(p, got, 0o644))
	}
	want, err := os.ReadFile(p)
	require.NoError(t, err, "missing golden file; run go test -update")
	assert.Equal(t, string(want), string(got), "output differs from %s; run go test -update if the change is intended", p)
}

func render(t *testing.T, format string, r *finding.Report, opts ...Option) []byte {
	t.Helper()
	w, err := Get(format, opts...)
	require.NoError(t, err)
	var b bytes.Buffer
	require.NoError(t, w.Write(&b, r))
	return b.Bytes()
}

func TestGolden(t *testing.T) {
	r := sampleReport()
	tests := []struct {
		name   string
		format string
		opts   []Option
	}{
		{"report.txt", "text", nil},
		{"report-color.txt", "text", []Option{WithColor(ColorAlways)}},
		{"report-live.txt", "text", []Option{WithLive(sampleLive())}},
		{"report.json", "json", nil},
		{"report-live.json", "json", []Option{WithLive(sampleLive())}},
		{"report.sarif", "sarif", []Option{WithVersion("v0.1.0")}},
		{"report.junit.xml", "junit", []Option{WithFailOn(finding.Medium)}},
		{"report.html", "html", nil},
		{"report-live.html", "html", []Option{WithLive(sampleLive())}},
		{"report.md", "markdown", nil},
		{"report-live.md", "markdown", []Option{WithLive(sampleLive())}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			golden(t, tt.name, render(t, tt.format, r, tt.opts...))
		})
	}
}

func TestGetUnknownFormat(t *testing.T) {
	_, err := Get("yaml")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "sarif")
	for _, f := range Formats {
		_, err := Get(f)
		assert.NoError(t, err, f)
	}
}

func TestTextContent(t *testing.T) {
	out := string(render(t, "text", sampleReport()))
	// Grouped by severity, highest first, waived last.
	hi, med, low, waived := strings.Index(out, "\nHIGH (1)"), strings.Index(out, "\nMEDIUM (1)"),
		strings.Index(out, "\nLOW (1)"), strings.Index(out, "\nWAIVED (1)")
	require.True(t, hi >= 0 && med > hi && low > med && waived > low, out)
	assert.Contains(t, out, "default.target → multi-user.target → ecs.service  (via /lib/systemd/system/default.target, /etc/systemd/system/multi-user.target.wants/ecs.service)")
	assert.Contains(t, out, "      systemctl disable ecs.service\n")
	assert.Contains(t, out, "      systemctl mask motd-news.timer\n      systemctl mask motd-news.service\n")
	assert.Contains(t, out, "waived: fleet uses SSM Session Manager with the default registration (expires 2026-12-31)")
	assert.Contains(t, out, "FAIL: 4 findings (1 high, 1 medium, 1 low), 1 waived; fail-on high")
	assert.Contains(t, string(render(t, "text", sampleReport(), WithFailOn(finding.Critical))),
		"PASS: 4 findings (1 high, 1 medium, 1 low), 1 waived; fail-on critical")
	assert.NotContains(t, out, "\x1b[", "no color when not writing to a terminal")

	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	defer pr.Close()
	assert.False(t, IsTerminal(pw), "a pipe is not a terminal")
	pw.Close()
	assert.Contains(t, string(render(t, "text", sampleReport(), WithColor(ColorAlways))), "\x1b[1;31mHIGH")
}

// exposureReport has the findings of one rule on many services, each with
// the rule's long remediation, as a stock image gives service-exposure.
func exposureReport(n int) *finding.Report {
	var fs []finding.Finding
	fix := "Add a drop-in under /etc/systemd/system/UNIT.d/ that sandboxes the service. " + strings.Repeat("Prove it by booting the image. ", 40)
	for i := range n {
		u := fmt.Sprintf("svc%03d.service", i)
		fs = append(fs, finding.Finding{
			RuleID: "service-exposure", Title: "A service that starts at boot is more exposed than the threshold",
			Severity: finding.Low, Unit: u,
			Message:     u + " starts at boot with an exposure of 9.4 (UNSAFE), above the threshold 9.0",
			Chain:       []unit.Edge{{From: "default.target", To: "multi-user.target", Kind: "alias", Source: "/lib/systemd/system/default.target"}, {From: "multi-user.target", To: u, Kind: ".wants", Source: "/etc/systemd/system/multi-user.target.wants/" + u}},
			Remediation: finding.Remediation{Action: "configure", Text: fix},
		})
	}
	return finding.NewReport(finding.Target{Name: "stock", Kind: "dir"}, fs)
}

func TestTextRemediationOncePerRule(t *testing.T) {
	r := exposureReport(3)
	// Another rule with the same text still shows it, and a waived finding
	// is in a group of its own.
	r.Findings = append(r.Findings,
		finding.Finding{RuleID: "other-rule", Severity: finding.Low, Unit: "a.service", Message: "m", Remediation: r.Findings[0].Remediation},
		finding.Finding{RuleID: "service-exposure", Severity: finding.Low, Unit: "w.service", Message: "m", Remediation: r.Findings[0].Remediation, Waived: true, Waiver: &finding.Waiver{Reason: "known"}},
	)
	out := string(render(t, "text", r))
	fix := oneLine(r.Findings[0].Remediation.Text)
	assert.Equal(t, 3, strings.Count(out, fix), "once for the rule, once for the other rule, once in the waived group:\n%s", out)
	assert.Equal(t, 2, strings.Count(out, "(remediation as for svc000.service above)"), out)
	first, second := strings.Index(out, "  service-exposure  svc000.service\n"), strings.Index(out, "  service-exposure  svc001.service\n")
	require.True(t, first >= 0 && second > first, out)
	assert.Contains(t, out[first:second], fix, "the text is under the first finding")
	// Sorted by rule then unit, the finding without a unit comes first
	// and carries the text; the others name no unit then.
	r = exposureReport(2)
	r.Findings = append(r.Findings, finding.Finding{RuleID: "service-exposure", Severity: finding.Low, Message: "no unit", Remediation: r.Findings[0].Remediation})
	out = string(render(t, "text", r))
	assert.Equal(t, 1, strings.Count(out, fix), out)
	assert.Equal(t, 2, strings.Count(out, "(remediation as above)"), out)
}

func TestJSONRoundTrip(t *testing.T) {
	r := sampleReport()
	out := render(t, "json", r)
	back, err := finding.Decode(out)
	require.NoError(t, err)
	assert.Equal(t, r.Summary, back.Summary)
	require.Len(t, back.Findings, len(r.Findings))
	assert.Equal(t, r.Findings[0].Chain, back.Findings[0].Chain)
	// Stable: the same report renders the same bytes.
	assert.Equal(t, out, render(t, "json", back))

	live := render(t, "json", r, WithLive(sampleLive()))
	back, err = finding.Decode(live)
	require.NoError(t, err, "the live document is still an amilint/v1 report")
	assert.Equal(t, r.Summary, back.Summary)
	var doc struct{ Live Live }
	require.NoError(t, json.Unmarshal(live, &doc))
	assert.Equal(t, 70071, doc.Live.Memcg.Zombies)
}

func sarifSchema(t testing.TB) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open("testdata/sarif-schema-2.1.0.json")
	require.NoError(t, err)
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	require.NoError(t, c.AddResource("sarif-schema-2.1.0.json", doc))
	s, err := c.Compile("sarif-schema-2.1.0.json")
	require.NoError(t, err)
	return s
}

func validate(t testing.TB, s *jsonschema.Schema, b []byte) error {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	require.NoError(t, err)
	return s.Validate(v)
}

func TestSARIFValidAgainstOfficialSchema(t *testing.T) {
	s := sarifSchema(t)
	for name, r := range map[string]*finding.Report{
		"sample": sampleReport(),
		"empty":  finding.NewReport(finding.Target{Name: "clean", Kind: "dir"}, nil),
		"odd": finding.NewReport(finding.Target{Name: "weird name/with spaces"}, []finding.Finding{
			{RuleID: "expired-waiver", Severity: finding.Critical, Message: "waiver for x expired"},
			{RuleID: "x", Severity: finding.Info, Unit: `a\x2db.service`, Message: "m",
				References: []string{"not a url"}, Waived: true},
		}),
	} {
		t.Run(name, func(t *testing.T) {
			assert.NoError(t, validate(t, s, render(t, "sarif", r)))
		})
	}
}

// TestSARIFSchemaRejects proves the validation can fail: a result without
// a message and a bad level are refused by the official schema.
func TestSARIFSchemaRejects(t *testing.T) {
	s := sarifSchema(t)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(render(t, "sarif", sampleReport()), &doc))
	res := doc["runs"].([]any)[0].(map[string]any)["results"].([]any)[0].(map[string]any)
	res["level"] = "fatal"
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	assert.Error(t, validate(t, s, b))
	res["level"] = "error"
	delete(res, "message")
	b, err = json.Marshal(doc)
	require.NoError(t, err)
	assert.Error(t, validate(t, s, b))
}

func TestSARIFContent(t *testing.T) {
	var log struct {
		Version string
		Runs    []struct {
			Tool struct {
				Driver struct {
					Name  string
					Rules []struct {
						ID         string
						HelpURI    string
						Properties map[string]any
					}
				}
			}
			Results []struct {
				RuleID    string
				Level     string
				Locations []struct {
					PhysicalLocation struct {
						ArtifactLocation struct{ URI, URIBaseID string }
						Region           struct{ StartLine int }
					}
				}
				Suppressions []struct{ Kind, Justification string }
			}
		}
	}
	require.NoError(t, json.Unmarshal(render(t, "sarif", sampleReport()), &log))
	require.Len(t, log.Runs, 1)
	run := log.Runs[0]
	assert.Equal(t, "amilint", run.Tool.Driver.Name)
	require.Len(t, run.Tool.Driver.Rules, 4)
	assert.Equal(t, "ecs-agent-unused", run.Tool.Driver.Rules[0].ID)
	assert.Equal(t, "8.0", run.Tool.Driver.Rules[0].Properties["security-severity"])
	assert.Equal(t, "https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs-agent-config.html", run.Tool.Driver.Rules[0].HelpURI)
	require.Len(t, run.Results, 4)
	levels := map[string]string{}
	for _, r := range run.Results {
		levels[r.RuleID] = r.Level
		require.Len(t, r.Locations, 1)
		assert.Equal(t, SARIFRootBase, r.Locations[0].PhysicalLocation.ArtifactLocation.URIBaseID)
		assert.Equal(t, 1, r.Locations[0].PhysicalLocation.Region.StartLine)
	}
	assert.Equal(t, map[string]string{"ecs-agent-unused": "error", "restart-crash-loop": "warning",
		"ssm-agent-unconfigured": "warning", "motd-news": "note"}, levels)
	ecs := run.Results[0]
	assert.Equal(t, "lib/systemd/system/ecs.service", ecs.Locations[0].PhysicalLocation.ArtifactLocation.URI)
	assert.Empty(t, ecs.Suppressions)
	waived := run.Results[2]
	assert.Equal(t, "ssm-agent-unconfigured", waived.RuleID, "medium findings sort by rule id")
	require.Len(t, waived.Suppressions, 1)
	assert.Equal(t, "external", waived.Suppressions[0].Kind)
	assert.Contains(t, waived.Suppressions[0].Justification, "Session Manager")
	assert.Equal(t, "etc/systemd/system/multi-user.target.wants/amazon-ssm-agent.service",
		waived.Locations[0].PhysicalLocation.ArtifactLocation.URI, "no fragment: the .wants link")
}

func TestArtifactURI(t *testing.T) {
	tests := []struct {
		name string
		f    finding.Finding
		want string
	}{
		{"fragment", finding.Finding{Evidence: map[string]any{"fragment": "/usr/lib/systemd/system/x.service"}, Chain: ecsChain}, "usr/lib/systemd/system/x.service"},
		{"wants link", finding.Finding{Chain: ecsChain}, "etc/systemd/system/multi-user.target.wants/ecs.service"},
		{"unit only", finding.Finding{Unit: "cups.socket"}, "etc/systemd/system/cups.socket"},
		{"nothing", finding.Finding{}, "etc/systemd/system"},
		{"escapes root", finding.Finding{Evidence: map[string]any{"path": "/../../etc/shadow"}}, "etc/shadow"},
		{"escaped chars", finding.Finding{Evidence: map[string]any{"path": "/etc/systemd/system/a b%.service"}}, "etc/systemd/system/a%20b%25.service"},
		{"colon in the first segment", finding.Finding{Evidence: map[string]any{"fragment": "/a:b/x.service"}}, "a%3Ab/x.service"},
		{"colon later", finding.Finding{Unit: "sys-devices-a:b.device"}, "etc/systemd/system/sys-devices-a:b.device"},
		{"backslash unit", finding.Finding{Unit: `dev-disk-by\x2duuid.swap`}, `etc/systemd/system/dev-disk-by%5Cx2duuid.swap`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, ArtifactURI(tt.f))
		})
	}
}

func TestFixCommands(t *testing.T) {
	tests := []struct {
		name string
		f    finding.Finding
		want []string
	}{
		{"explicit", finding.Finding{Unit: "a.service", Remediation: finding.Remediation{Action: "disable", Commands: []string{"amilint fix ."}}}, []string{"amilint fix ."}},
		{"disable unit", finding.Finding{Unit: "ecs.service", Remediation: finding.Remediation{Action: "disable"}}, []string{"systemctl disable ecs.service"}},
		{"mask units", finding.Finding{Unit: "x.service", Remediation: finding.Remediation{Action: "mask", Units: []string{"a.timer", "a.service"}}}, []string{"systemctl mask a.timer", "systemctl mask a.service"}},
		{"configure", finding.Finding{Unit: "a.service", Remediation: finding.Remediation{Action: "configure"}}, nil},
		{"none", finding.Finding{Unit: "a.service", Remediation: finding.Remediation{Action: "none"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, FixCommands(tt.f))
		})
	}
}

func TestChain(t *testing.T) {
	assert.Equal(t, "", Chain(nil))
	assert.Equal(t, "default.target → multi-user.target → ecs.service  (via /lib/systemd/system/default.target, /etc/systemd/system/multi-user.target.wants/ecs.service)", Chain(ecsChain))
	assert.Equal(t, "a.target → b.service", Chain([]unit.Edge{{From: "a.target", To: "b.service", Kind: "Wants"}}))
	assert.Equal(t, "a.target → b.target  (assumed: a cloud)", Chain([]unit.Edge{{From: "a.target", To: "b.target", Kind: ".wants", Assumes: "assumed: a cloud"}}))
}

func TestJUnitParsesBack(t *testing.T) {
	tests := []struct {
		failOn                          finding.Severity
		tests, failures, skipped, cases int
	}{
		{finding.Medium, 4, 2, 1, 4},
		{finding.High, 4, 1, 1, 4},
		{finding.Low, 4, 3, 1, 4},
		{finding.Critical, 4, 0, 1, 4},
	}
	for _, tt := range tests {
		t.Run(tt.failOn.String(), func(t *testing.T) {
			out := render(t, "junit", sampleReport(), WithFailOn(tt.failOn))
			var doc JUnitSuites
			require.NoError(t, xml.Unmarshal(out, &doc))
			assert.Equal(t, tt.tests, doc.Tests)
			assert.Equal(t, tt.failures, doc.Failures)
			assert.Equal(t, tt.skipped, doc.Skipped)
			require.Len(t, doc.Suites, 1)
			s := doc.Suites[0]
			require.Len(t, s.Cases, tt.cases)
			var failed, skipped int
			for _, c := range s.Cases {
				if c.Failure != nil {
					failed++
					assert.Contains(t, c.Failure.Text, "severity: ")
				}
				if c.Skipped != nil {
					skipped++
					assert.Equal(t, "ssm-agent-unconfigured amazon-ssm-agent.service", c.Name)
					assert.Nil(t, c.Failure, "a waived finding never fails")
				}
			}
			assert.Equal(t, tt.failures, failed)
			assert.Equal(t, tt.skipped, skipped)
			assert.Equal(t, "ecs-agent-unused ecs.service", s.Cases[0].Name)
		})
	}
}

func TestTextNeutralisesEscapes(t *testing.T) {
	r := finding.NewReport(finding.Target{Name: "t\x1b]0;owned\x07"}, []finding.Finding{{
		RuleID: "r\x1b[2J", Severity: finding.High, Unit: "x\x1b[31m.service", Title: "\x9b1m \u009b2m", Message: "m\x1b[0m \u202eecivres.sce\u202c \u2066\u200f\u061c",
		Chain:       []unit.Edge{{From: "default.target", To: "x\x1b.service", Source: "/etc/\x1b[8m"}},
		Remediation: finding.Remediation{Action: "disable", Commands: []string{"rm -rf /\x1b[8m"}},
		Waived:      true, Waiver: &finding.Waiver{Reason: "\x1bP", Expires: "\x1b\\"},
	}})
	for _, format := range []string{"text", "markdown"} {
		out := string(render(t, format, r))
		assert.NotContains(t, out, "\x1b", format)
		assert.NotContains(t, out, "\x9b", format)
		assert.NotContains(t, out, "\u009b", format)
		assert.NotContains(t, out, "\x07", format)
		for _, bidi := range []string{"\u202e", "\u202c", "\u2066", "\u200f", "\u061c"} {
			assert.NotContains(t, out, bidi, "%s: bidirectional formatting reorders what is shown", format)
		}
	}
}

func TestJUnitHostileText(t *testing.T) {
	r := finding.NewReport(finding.Target{Name: "t\x00"}, []finding.Finding{{
		RuleID: "r", Severity: finding.High, Unit: "x\x01.service", Message: "a\x00b ]]> <x/> \x1b[31m",
	}})
	var doc JUnitSuites
	require.NoError(t, xml.Unmarshal(render(t, "junit", r), &doc))
	require.Len(t, doc.Suites[0].Cases, 1)
	assert.Contains(t, doc.Suites[0].Cases[0].Failure.Text, "]]> <x/>")
}

func TestHTMLEscapesHostileText(t *testing.T) {
	r := finding.NewReport(finding.Target{Name: "<script>alert(1)</script>"}, []finding.Finding{{
		RuleID: "r", Severity: finding.High, Unit: "x.service", Message: `<img src=x onerror="alert(2)">`,
		Chain: []unit.Edge{{From: "default.target", To: "x.service", Kind: ".wants", Source: "/etc/<b>"}},
	}})
	out := string(render(t, "html", r))
	assert.NotContains(t, out, "<script>alert")
	assert.NotContains(t, out, "<img src=x")
	assert.Contains(t, out, "&lt;script&gt;")
	md := string(render(t, "markdown", r))
	assert.NotContains(t, md, " <img")
	assert.Contains(t, md, `\<img src=x`)
}

func TestHTMLSelfContained(t *testing.T) {
	out := string(render(t, "html", sampleReport(), WithLive(sampleLive())))
	for _, ext := range []string{`<link`, `src="http`, `href="http`, `@import`, `url(`} {
		assert.NotContains(t, out, ext, "external asset")
	}
	assert.Contains(t, out, "<svg")
	assert.Equal(t, 8, strings.Count(out, "<title>cpu"), "one bar per core")
	assert.Contains(t, out, ">70071<", "the zombie memcg figure")
	assert.Contains(t, out, "<strong>cpu5</strong> 97% system (serves eth0)")
}

// FuzzWriters feeds any amilint/v1 document that decodes through every
// writer and the aggregator: hostile report content must render, never
// panic, and SARIF must stay valid against the official schema.
func FuzzWriters(f *testing.F) {
	for _, name := range []string{"report.json", "report-live.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "golden", name))
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte(`{"schema":"amilint/v1","target":{"name":"\u0000<x>"},"findings":[{"rule_id":"]]>","severity":"critical","unit":"a\\b c.service","message":"\u001b[31m","chain":[{"from":"","to":""}],"remediation":{"action":"mask"},"waived":true,"evidence":{"fragment":"/../.."}}]}`))
	schema := sarifSchema(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := finding.Decode(b)
		if err != nil {
			return
		}
		for _, format := range Formats {
			w, err := Get(format, WithLive(sampleLive()))
			require.NoError(t, err)
			var out bytes.Buffer
			require.NoError(t, w.Write(&out, r), format)
			switch format {
			case "sarif":
				assert.NoError(t, validate(t, schema, out.Bytes()))
			case "junit":
				var doc JUnitSuites
				assert.NoError(t, xml.Unmarshal(out.Bytes(), &doc))
			case "json":
				_, err := finding.Decode(out.Bytes())
				assert.NoError(t, err)
			}
		}
		a := NewAggregator(finding.High)
		a.Add("fuzz", r)
		for _, format := range RolloutFormats {
			w, err := GetRollout(format)
			require.NoError(t, err)
			require.NoError(t, w.Write(io.Discard, a.Rollout()))
		}
	})
}

// TestMarkdownNeverNotifies renders text that would mention users and
// teams or reference issues in a GitHub comment: outside code, where
// GitHub looks for them, none is left once the Markdown is read as
// GitHub reads it (escapes undone, entities decoded).
func TestMarkdownFitsAComment(t *testing.T) {
	// Small enough: everything, in full.
	small := string(render(t, "markdown", exposureReport(20)))
	assert.NotContains(t, small, "Shortened")
	assert.Equal(t, 20, strings.Count(small, "  - starts at boot:"))

	// 2,000 services, a high finding first and one whose message a
	// hostile image made huge, on a live host: within the limit, the
	// high finding in full, the rest in brief or counted, and the numbers
	// add up.
	r := exposureReport(2000)
	r.Findings = append(r.Findings,
		finding.Finding{RuleID: "ecs-agent-unconfigured", Severity: finding.High, Unit: "ecs.service", Message: "ecs.service starts at boot", Remediation: finding.Remediation{Action: "disable", Units: []string{"ecs.service"}}},
		finding.Finding{RuleID: "exec-missing", Severity: finding.Medium, Unit: "huge.service", Message: strings.Repeat("x", 2*CommentLimit)},
	)
	r.Target.Name = strings.Repeat("é", CommentLimit)
	out := render(t, "markdown", r, WithLive(sampleLive()))
	require.LessOrEqual(t, len(out), CommentLimit)
	md := string(out)
	assert.True(t, utf8.ValidString(md))
	assert.Contains(t, md, "- **`ecs-agent-unconfigured` · `ecs.service`**")
	assert.Contains(t, md, "systemctl disable ecs.service")
	assert.True(t, strings.Contains(md, "- **`exec-missing` · `huge.service`**\n  "+strings.Repeat("x", messageLimit-3)+"…\n"), "the huge message clipped")
	assert.Contains(t, md, "### Live host", "the live section is kept")
	full := strings.Count(md, "\n- **`")
	brief := strings.Count(md, "\n- `")
	m := regexp.MustCompile(`_Shortened to fit a comment \(a GitHub comment holds at most 65536 characters\): (\d+) of (\d+) findings in brief, (\d+) left out\.`).FindStringSubmatch(md)
	require.NotNil(t, m, "the note")
	assert.Equal(t, strconv.Itoa(brief), m[1])
	assert.Equal(t, "2002", m[2])
	left, _ := strconv.Atoi(m[3])
	assert.Equal(t, 2002, full+brief+left, "each finding in full, in brief or counted as left out")
	assert.Greater(t, full, 10)
	assert.Greater(t, brief, 100)
	assert.Positive(t, left)
	// Full entries come before brief ones, highest severity first.
	assert.Less(t, strings.LastIndex(md, "\n- **`"), strings.Index(md, "\n- `"))
}

func TestMarkdownNeverNotifies(t *testing.T) {
	r := finding.NewReport(finding.Target{Name: "@octocat's image", Kind: "#1"}, []finding.Finding{{
		RuleID: "r", Severity: finding.High, Unit: "getty@tty1.service", Title: "ask @org/team",
		Message: "cc @octocat, see #12 and owner/repo#34, mail a@b.c; &#64;admin &commat;root",
		Waived:  true, Waiver: &finding.Waiver{Reason: "per @lead in #56"},
	}})
	md := string(render(t, "markdown", r))
	assert.Contains(t, md, "`getty@tty1.service`", "a unit name stays as written in its code span")
	text := regexp.MustCompile("(?s)```.*?```|`[^`]*`").ReplaceAllString(md, "")
	// CommonMark: a backslash before punctuation makes it literal, so an
	// escaped "&" starts no entity; other entities are decoded.
	inline := regexp.MustCompile(`\\[!-/:-@\[-` + "`" + `{-~]|&(#[0-9]+|#[xX][0-9a-fA-F]+|[A-Za-z][A-Za-z0-9]*);`)
	text = inline.ReplaceAllStringFunc(text, func(m string) string {
		if m[0] == '\\' {
			return m[1:]
		}
		return html.UnescapeString(m)
	})
	assert.NotRegexp(t, `(^|[^A-Za-z0-9_])@[A-Za-z0-9]`, text, "a mention")
	assert.NotRegexp(t, `#[0-9]`, text, "an issue reference")
	assert.Contains(t, text, "cc @\u200boctocat", "the text still reads as written")
}

func TestMarkdownEscape(t *testing.T) {
	for in, want := range map[string]string{
		"@a":          "@&#8203;a",
		"a@b":         "a@&#8203;b",
		"#1 #x":       `\#&#8203;1 \#x`,
		"&#64;":       `\&\#&#8203;64;`,
		"*[x](y)*":    `\*\[x\](y)\*`,
		"tab\tline\n": "tab line",
	} {
		assert.Equal(t, want, MarkdownEscape(in), "%q", in)
	}
}
