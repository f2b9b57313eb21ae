package amilint

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit/finding"
)

// recorder is a fake communicator that records every command and upload and
// answers amilint commands from a script of reports.
type recorder struct {
	mu       sync.Mutex
	commands []string
	uploads  []string
	dirs     []string
	// answer returns stdout and exit status for a command.
	answer func(cmd string) (string, int)
}

func (r *recorder) Start(_ context.Context, c *packersdk.RemoteCmd) error {
	r.mu.Lock()
	r.commands = append(r.commands, c.Command)
	r.mu.Unlock()
	out, code := "", 0
	if r.answer != nil {
		out, code = r.answer(c.Command)
	}
	go func() {
		if c.Stdout != nil {
			io.WriteString(c.Stdout, out)
		}
		if code == 2 && c.Stderr != nil {
			io.WriteString(c.Stderr, "amilint scan: open target: corrupt image\n")
		}
		c.SetExited(code)
	}()
	return nil
}

func (r *recorder) Upload(dst string, src io.Reader, _ *os.FileInfo) error {
	io.Copy(io.Discard, src)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.uploads = append(r.uploads, dst)
	return nil
}

func (r *recorder) UploadDir(dst, src string, _ []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dirs = append(r.dirs, dst+" <- "+src)
	return nil
}

func (r *recorder) Download(string, io.Writer) error           { return nil }
func (r *recorder) DownloadDir(string, string, []string) error { return nil }

// verbs returns the amilint subcommands run, in order.
func (r *recorder) verbs() []string {
	var out []string
	for _, c := range r.commands {
		if i := strings.Index(c, " "+EngineArg+" "); i >= 0 {
			out = append(out, strings.Fields(c[i+len(EngineArg)+2:])[0])
		} else {
			out = append(out, strings.Fields(c)[0])
		}
	}
	return out
}

func reportJSON(t *testing.T, fs ...finding.Finding) string {
	b, err := json.Marshal(finding.NewReport(finding.Target{Name: "/", Kind: "dir"}, fs))
	require.NoError(t, err)
	return string(b)
}

var ecs = finding.Finding{RuleID: "ecs-agent-unconfigured", Severity: finding.High, Unit: "ecs.service",
	Message:     "ecs.service starts at boot but no ECS cluster is configured",
	Remediation: finding.Remediation{Action: "disable", Units: []string{"ecs.service"}}}

func newProvisioner(t *testing.T, cfg map[string]interface{}) *Provisioner {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "plugin")
	require.NoError(t, os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755))
	p := &Provisioner{executable: func() (string, error) { return bin, nil }}
	require.NoError(t, p.Prepare(cfg))
	return p
}

func TestPrepareReportsEveryProblemAtOnce(t *testing.T) {
	p := &Provisioner{}
	err := p.Prepare(map[string]interface{}{
		"mode":                "nuke",
		"fail_on":             "severe",
		"root":                "relative/root",
		"report_formats":      []string{"pdf"},
		"policy_paths":        []string{"/nonexistent/policies"},
		"rules_paths":         []string{"/nonexistent/rules"},
		"data":                "/nonexistent/data.json",
		"waivers":             "/nonexistent/waivers.yaml",
		"policy_capabilities": "/nonexistent/caps.json",
		"policy_timeout":      "-1s",
		"traits":              []string{"immutable", "Not A Slug"},
		"execute_command":     "sudo amilint",
	})
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{
		`mode "nuke"`, `fail_on "severe"`, `root "relative/root"`, `"pdf" is not one of`,
		"report_formats is set but report_path is not", `policy_paths: "/nonexistent/policies"`,
		`rules_paths: "/nonexistent/rules"`, `data: "/nonexistent/data.json"`,
		`waivers: "/nonexistent/waivers.yaml"`, "execute_command must contain",
		`traits: "Not A Slug"`, `policy_capabilities: "/nonexistent/caps.json"`, "policy_timeout -1s",
	} {
		assert.Contains(t, msg, want)
	}
}

func TestPrepareDefaults(t *testing.T) {
	p := newProvisioner(t, map[string]interface{}{"report_path": t.TempDir()})
	assert.Equal(t, ModeAudit, p.config.Mode)
	assert.Equal(t, "high", p.config.FailOn)
	assert.Equal(t, "/", p.config.Root)
	assert.Equal(t, []string{"json"}, p.config.ReportFormats)
	assert.Equal(t, DefaultExecuteCommand, p.config.ExecuteCommand)
}

func TestAuditModeFailsTheBuildNamingTheUnit(t *testing.T) {
	reports := t.TempDir()
	policies := t.TempDir()
	p := newProvisioner(t, map[string]interface{}{
		"root": "/mnt/image", "report_path": reports, "report_formats": []string{"json", "sarif", "html"},
		"policy_paths": []string{policies}, "profile": "k8s-gpu-node", "traits": []string{"immutable", "gpu"},
	})
	comm := &recorder{answer: func(cmd string) (string, int) {
		if strings.Contains(cmd, " scan ") {
			return reportJSON(t, ecs), 1
		}
		return "", 0
	}}
	err := p.Provision(context.Background(), packersdk.TestUi(t), comm, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ecs.service")
	assert.Equal(t, []string{"mkdir", "mkdir", "scan", "rm"}, comm.verbs())
	scan := comm.commands[2]
	for _, want := range []string{"scan /mnt/image", "--fail-on high", "-o json", "--policy ", "--profile k8s-gpu-node", "--trait immutable --trait gpu", "AMILINT_NO_COLOR=1"} {
		assert.Contains(t, scan, want)
	}
	assert.Len(t, comm.uploads, 1, "the binary")
	assert.Len(t, comm.dirs, 1, "the policy directory")
	for _, f := range []string{"amilint.json", "amilint.sarif", "amilint.html"} {
		b, err := os.ReadFile(filepath.Join(reports, f))
		require.NoError(t, err, f)
		assert.Contains(t, string(b), "ecs.service", f)
	}
}

// TestPolicyBudgetReachesTheEngine: policy_timeout and the uploaded
// policy_capabilities file become the engine's flags, for the scan and
// the live audit alike.
func TestPolicyBudgetReachesTheEngine(t *testing.T) {
	caps := filepath.Join(t.TempDir(), "caps.json")
	require.NoError(t, os.WriteFile(caps, []byte(`{"builtins": []}`), 0o644))
	p := newProvisioner(t, map[string]interface{}{"policy_timeout": "7s", "policy_capabilities": caps, "live": true})
	comm := &recorder{answer: func(cmd string) (string, int) {
		if strings.Contains(cmd, " scan ") {
			return reportJSON(t), 0
		}
		if strings.Contains(cmd, " live ") {
			return reportJSON(t), 0
		}
		return "", 0
	}}
	require.NoError(t, p.Provision(context.Background(), packersdk.TestUi(t), comm, nil))
	n := 0
	for _, c := range comm.commands {
		if strings.Contains(c, " scan ") || strings.Contains(c, " live ") {
			n++
			assert.Contains(t, c, "--policy-timeout 7s")
			assert.Regexp(t, `--policy-capabilities \S+/capabilities\.json`, c)
		}
	}
	assert.Equal(t, 2, n, "a scan and a live audit: %v", comm.commands)
	assert.Len(t, comm.uploads, 2, "the binary and the capabilities file")
}

func TestFixModeFixesThenReaudits(t *testing.T) {
	fixed := false
	comm := &recorder{answer: func(cmd string) (string, int) {
		switch {
		case strings.Contains(cmd, " fix "):
			fixed = true
			return "rm /etc/systemd/system/multi-user.target.wants/ecs.service\n", 0
		case strings.Contains(cmd, " scan ") && !fixed:
			return reportJSON(t, ecs), 1
		case strings.Contains(cmd, " scan "):
			return reportJSON(t), 0
		}
		return "", 0
	}}
	p := newProvisioner(t, map[string]interface{}{"mode": "fix"})
	ui := packersdk.TestUi(t)
	require.NoError(t, p.Provision(context.Background(), ui, comm, nil))
	assert.Equal(t, []string{"mkdir", "scan", "fix", "scan", "rm"}, comm.verbs())
	assert.Contains(t, comm.commands[2], "fix / --fail-on high")
}

func TestFixModeFailsWhenSomethingRemains(t *testing.T) {
	comm := &recorder{answer: func(cmd string) (string, int) {
		if strings.Contains(cmd, " scan ") {
			return reportJSON(t, ecs), 1
		}
		return "", 0
	}}
	p := newProvisioner(t, map[string]interface{}{"mode": "fix"})
	err := p.Provision(context.Background(), packersdk.TestUi(t), comm, nil)
	require.Error(t, err)
	assert.Equal(t, []string{"mkdir", "scan", "fix", "scan", "rm"}, comm.verbs())
}

func TestWarnModeNeverFails(t *testing.T) {
	reports := t.TempDir()
	comm := &recorder{answer: func(cmd string) (string, int) {
		if strings.Contains(cmd, " scan ") {
			return reportJSON(t, ecs), 1
		}
		return "", 0
	}}
	p := newProvisioner(t, map[string]interface{}{"mode": "warn", "report_path": reports, "report_formats": []string{"junit", "markdown"}})
	require.NoError(t, p.Provision(context.Background(), packersdk.TestUi(t), comm, nil))
	assert.Equal(t, []string{"mkdir", "scan", "rm"}, comm.verbs())
	for _, f := range []string{"amilint.junit.xml", "amilint.md"} {
		_, err := os.Stat(filepath.Join(reports, f))
		assert.NoError(t, err, f)
	}
}

func TestEngineErrorIsABuildError(t *testing.T) {
	comm := &recorder{answer: func(cmd string) (string, int) {
		if strings.Contains(cmd, " scan ") {
			return "", 2
		}
		return "", 0
	}}
	p := newProvisioner(t, map[string]interface{}{"mode": "warn"})
	err := p.Provision(context.Background(), packersdk.TestUi(t), comm, nil)
	require.Error(t, err, "even warn mode fails when the image cannot be audited")
	assert.Contains(t, err.Error(), "corrupt image")
	assert.Equal(t, "rm", comm.verbs()[len(comm.verbs())-1], "cleans up")
}

func TestSudoExecuteCommandAndCustomBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "amilint-linux-arm64")
	require.NoError(t, os.WriteFile(bin, []byte("x"), 0o755))
	comm := &recorder{answer: func(cmd string) (string, int) {
		if strings.Contains(cmd, " scan ") {
			return reportJSON(t), 0
		}
		return "", 0
	}}
	p := newProvisioner(t, map[string]interface{}{
		"amilint_binary":  bin,
		"execute_command": "chmod 0755 {{.Path}} && sudo -n {{.Vars}} {{.Path}} {{.Args}}",
		"remote_folder":   "/var/tmp",
	})
	require.NoError(t, p.Provision(context.Background(), packersdk.TestUi(t), comm, nil))
	scan := comm.commands[1]
	assert.Contains(t, scan, "sudo -n AMILINT_NO_COLOR=1 /var/tmp/amilint-")
	assert.NotContains(t, scan, " "+EngineArg+" scan", "a standalone amilint binary takes no engine prefix")
	assert.Contains(t, scan, "/amilint scan /")
}

func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/tmp/x": "/tmp/x", "a b": "'a b'", "it's": `'it'\''s'`, "": "''", "$(rm -rf /)": "'$(rm -rf /)'",
	} {
		assert.Equal(t, want, shellQuote(in), fmt.Sprintf("%q", in))
	}
}

func TestLiveAddsTheRunningHostsFindings(t *testing.T) {
	crash := finding.Finding{RuleID: "live-unit-crashloop", Severity: finding.High, Unit: "ecs.service", Message: "ecs.service restarted 41 times"}
	comm := &recorder{answer: func(cmd string) (string, int) {
		switch {
		case strings.Contains(cmd, " scan "):
			return reportJSON(t, ecs), 1
		case strings.Contains(cmd, " live "):
			return reportJSON(t, crash, ecs), 1
		}
		return "", 0
	}}
	p := newProvisioner(t, map[string]interface{}{"live": true, "profile": "k8s-gpu-node", "traits": []string{"immutable"}})
	err := p.Provision(context.Background(), packersdk.TestUi(t), comm, nil)
	require.Error(t, err, "a high live finding fails the audit")
	assert.Contains(t, err.Error(), "live-unit-crashloop")
	assert.Equal(t, []string{"mkdir", "scan", "live", "rm"}, comm.verbs())
	assert.Contains(t, comm.commands[2], "live -o json --fail-on high")
	assert.Contains(t, comm.commands[2], "--profile k8s-gpu-node --trait immutable", "the live audit applies the scan's policy flags")
	assert.Equal(t, 1, strings.Count(err.Error(), "ecs.service (ecs-agent-unconfigured)"), "a finding both audits make counts once")
}

// TestHardenWritesDropInsEvenWithoutFindings: harden runs fix --harden
// whatever the scan found, with the uploaded catalogs, and audits again.
func TestHardenWritesDropInsEvenWithoutFindings(t *testing.T) {
	comm := &recorder{answer: func(cmd string) (string, int) {
		switch {
		case strings.Contains(cmd, " fix "):
			return "hardening 1 services (exposure as systemd-analyze security of systemd 252 scores it):\n  cron.service  9.6 UNSAFE → 5.2 MEDIUM  /etc/systemd/system/cron.service.d/50-amilint-hardening.conf\n", 0
		case strings.Contains(cmd, " scan "):
			return reportJSON(t), 0
		}
		return "", 0
	}}
	catalog := t.TempDir()
	p := newProvisioner(t, map[string]interface{}{"mode": "fix", "harden_catalog_paths": []string{catalog}})
	require.NoError(t, p.Provision(context.Background(), packersdk.TestUi(t), comm, nil))
	assert.Equal(t, []string{"mkdir", "mkdir", "scan", "fix", "scan", "rm"}, comm.verbs())
	fix := comm.commands[3]
	assert.Contains(t, fix, "fix / --fail-on high")
	assert.Regexp(t, `--harden-catalog '?/tmp/amilint-[^ ]+/harden-catalog-0'?`, fix)
	assert.NotContains(t, comm.commands[2], "--harden", "the scan is not asked to harden")
	assert.Contains(t, comm.dirs[0], "harden-catalog-0 <- "+catalog)

	comm2 := &recorder{answer: func(cmd string) (string, int) {
		if strings.Contains(cmd, " scan ") {
			return reportJSON(t), 0
		}
		return "", 0
	}}
	p = newProvisioner(t, map[string]interface{}{"mode": "fix", "harden": true})
	require.NoError(t, p.Provision(context.Background(), packersdk.TestUi(t), comm2, nil))
	assert.Contains(t, comm2.commands[2], "fix / --fail-on high")
	assert.Contains(t, comm2.commands[2], "--harden")
}

func TestHardenNeedsFixMode(t *testing.T) {
	p := &Provisioner{}
	err := p.Prepare(map[string]interface{}{"harden": true, "harden_catalog_paths": []string{"/nonexistent/catalog"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `harden writes drop-ins into the image: it needs mode = "fix" (mode is "audit")`)
	assert.Contains(t, err.Error(), `harden_catalog_paths: "/nonexistent/catalog"`)
}
