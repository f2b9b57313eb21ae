package amilint

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/amilint/amilint/internal/audit/bytesize"
	"github.com/amilint/amilint/internal/audit/finding"
)

// FuzzPrepare decodes arbitrary provisioner configurations, as Packer
// hands them over from a template: Prepare accepts or lists problems,
// never panics, and a configuration it accepts is one the provisioner
// can run (a known mode and severity, absolute guest paths, known report
// formats, a command with its placeholders, non-negative budgets).
func FuzzPrepare(f *testing.F) {
	f.Add("fix", "high", "/mnt/image", "json,sarif", "immutable", "sudo {{.Vars}} {{.Path}} {{.Args}}", "30s", "/tmp", "", "512MiB")
	f.Add("warn", "critical", "/", "", "", "", "0s", "/var/tmp", "k8s-gpu-node", "")
	f.Add("nuke", "severe", "relative", "pdf", "Not A Slug", "sudo amilint", "-1s", "tmp", "", "1GB")
	f.Add("audit", "", "", "junit", "gpu,immutable", "{{.Path}} {{.Args}} {{", "1h", "", "{{.Path}}", "-1Mi")
	f.Fuzz(func(t *testing.T, mode, failOn, root, formats, traits, command, timeout, remote, profile, memory string) {
		raw := map[string]interface{}{
			"mode": mode, "fail_on": failOn, "root": root, "execute_command": command,
			"policy_timeout": timeout, "remote_folder": remote, "profile": profile,
		}
		if memory != "" {
			raw["policy_memory"] = memory
		}
		if formats != "" {
			raw["report_formats"] = strings.Split(formats, ",")
			raw["report_path"] = filepath.Join(t.TempDir(), "reports")
		}
		if traits != "" {
			raw["traits"] = strings.Split(traits, ",")
		}
		p := &Provisioner{guests: fstest.MapFS{}}
		if err := p.Prepare(raw); err != nil {
			return
		}
		c := p.config
		if !slices.Contains([]string{ModeAudit, ModeFix, ModeWarn}, c.Mode) {
			t.Fatalf("accepted mode %q", c.Mode)
		}
		if _, err := finding.ParseSeverity(c.FailOn); err != nil {
			t.Fatalf("accepted fail_on %q", c.FailOn)
		}
		if !strings.HasPrefix(c.Root, "/") || !strings.HasPrefix(c.RemoteFolder, "/") {
			t.Fatalf("accepted relative guest paths %q, %q", c.Root, c.RemoteFolder)
		}
		if shellQuote(c.RemoteFolder) != c.RemoteFolder {
			t.Fatalf("accepted remote_folder %q, which the guest's shell would split", c.RemoteFolder)
		}
		for _, fm := range c.ReportFormats {
			if !slices.Contains(reportFormats, fm) {
				t.Fatalf("accepted report format %q", fm)
			}
		}
		if !strings.Contains(c.ExecuteCommand, "{{.Path}}") || !strings.Contains(c.ExecuteCommand, "{{.Args}}") {
			t.Fatalf("accepted execute_command %q", c.ExecuteCommand)
		}
		if c.PolicyTimeout < 0 {
			t.Fatalf("accepted policy_timeout %s", c.PolicyTimeout)
		}
		if _, err := bytesize.Parse(c.PolicyMemory); c.PolicyMemory != "" && err != nil {
			t.Fatalf("accepted policy_memory %q", c.PolicyMemory)
		}
	})
}
