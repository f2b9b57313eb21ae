package amilint

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/packer-plugin/guest"
)

// recorder is a fake communicator that records every command and upload and
// answers amilint commands from a script of reports.
type recorder struct {
	mu       sync.Mutex
	commands []string
	uploads  []string
	// contents are the uploaded files' contents, by guest path, and
	// modes their modes.
	contents map[string]string
	modes    map[string]os.FileMode
	dirs     []string
	// uname is what `uname -sm` prints (default "Linux x86_64").
	uname string
	// answer returns stdout and exit status for a command; status -1 is a
	// command that never exits.
	answer func(cmd string) (string, int)
	// stderr, when set, is what an amilint command that exits 2 prints on
	// stderr.
	stderr string
}

func (r *recorder) Start(ctx context.Context, c *packersdk.RemoteCmd) error {
	if err := ctx.Err(); err != nil {
		return err // a cancelled command does not start
	}
	r.mu.Lock()
	r.commands = append(r.commands, c.Command)
	r.mu.Unlock()
	out, code := "", 0
	switch {
	case c.Command == "uname -sm" && r.uname == "":
		out = "Linux x86_64\n"
	case c.Command == "uname -sm":
		out = r.uname + "\n"
	case r.answer != nil:
		out, code = r.answer(c.Command)
	}
	// The writers are taken here, as the SSH communicator's Start does:
	// RunWithUi puts the command's own back once it returns.
	stdout, stderr := c.Stdout, c.Stderr
	go func() {
		if stdout != nil {
			io.WriteString(stdout, out)
		}
		if code == 2 && stderr != nil {
			msg := "amilint scan: open target: corrupt image\n"
			if r.stderr != "" {
				msg = r.stderr
			}
			io.WriteString(stderr, msg)
		}
		if code != -1 {
			c.SetExited(code)
		}
	}()
	return nil
}

func (r *recorder) Upload(dst string, src io.Reader, fi *os.FileInfo) error {
	b, err := io.ReadAll(src)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.uploads = append(r.uploads, dst)
	if r.contents == nil {
		r.contents, r.modes = map[string]string{}, map[string]os.FileMode{}
	}
	r.contents[dst] = string(b)
	if fi != nil {
		if (*fi).Size() != int64(len(b)) {
			return fmt.Errorf("upload %s: FileInfo says %d bytes, got %d", dst, (*fi).Size(), len(b))
		}
		r.modes[dst] = (*fi).Mode()
	}
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

// verbs returns the commands run, in order: the amilint subcommand for an
// amilint command, else the command's first word.
func (r *recorder) verbs() []string {
	var out []string
	for _, c := range r.commands {
		if i := strings.LastIndex(c, "/amilint "); i >= 0 {
			out = append(out, strings.Fields(c[i+len("/amilint "):])[0])
		} else {
			out = append(out, strings.Fields(c)[0])
		}
	}
	return out
}

// guests returns compressed fake guest binaries whose contents name their
// architecture, for archs.
func guests(t *testing.T, archs ...string) fstest.MapFS {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	require.NoError(t, err)
	defer enc.Close()
	fsys := fstest.MapFS{}
	for _, a := range archs {
		fsys[guest.FileName(a)] = &fstest.MapFile{Data: enc.EncodeAll([]byte("amilint for linux/"+a), nil)}
	}
	return fsys
}

// elfHeader returns a minimal 64-bit little-endian ELF header for machine.
func elfHeader(machine elf.Machine) []byte {
	h := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT), Ehsize: 64}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, h)
	return b.Bytes()
}

// said returns what the provisioner said to a Ui.
func said(ui packersdk.Ui) string {
	return ui.(*packersdk.BasicUi).Writer.(*bytes.Buffer).String()
}

func testUi() packersdk.Ui {
	return &packersdk.BasicUi{Reader: new(bytes.Buffer), Writer: new(bytes.Buffer), ErrorWriter: new(bytes.Buffer), PB: &packersdk.NoopProgressTracker{}}
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
	p := &Provisioner{guests: guests(t, guest.Archs...)}
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
		"policy_memory":       "1GB",
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
		`policy_memory: size "1GB": want a whole number`,
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
	assert.Equal(t, []string{"mkdir", "uname", "mkdir", "scan", "rm"}, comm.verbs())
	assert.Regexp(t, `^mkdir -p -m 0700 /tmp/amilint-[0-9a-f-]+$`, comm.commands[0], "the guest directory is its owner's only")
	scan := comm.commands[3]
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

// TestPolicyBudgetReachesTheEngine: policy_timeout, policy_memory and
// the uploaded policy_capabilities file become the engine's flags, for the scan and
// the live audit alike.
func TestPolicyBudgetReachesTheEngine(t *testing.T) {
	caps := filepath.Join(t.TempDir(), "caps.json")
	require.NoError(t, os.WriteFile(caps, []byte(`{"builtins": []}`), 0o644))
	p := newProvisioner(t, map[string]interface{}{"policy_timeout": "7s", "policy_memory": "512Mi", "policy_capabilities": caps, "live": true})
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
			assert.Contains(t, c, "--policy-memory 512Mi")
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
	assert.Equal(t, []string{"mkdir", "uname", "scan", "fix", "scan", "rm"}, comm.verbs())
	assert.Contains(t, comm.commands[3], "fix / --fail-on high")
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
	assert.Equal(t, []string{"mkdir", "uname", "scan", "fix", "scan", "rm"}, comm.verbs())
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
	assert.Equal(t, []string{"mkdir", "uname", "scan", "rm"}, comm.verbs())
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
	require.NoError(t, os.WriteFile(bin, elfHeader(elf.EM_AARCH64), 0o755))
	comm := &recorder{uname: "Linux aarch64", answer: func(cmd string) (string, int) {
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
	require.NoError(t, p.Provision(context.Background(), testUi(), comm, nil))
	scan := comm.commands[2]
	assert.Contains(t, scan, "sudo -n AMILINT_NO_COLOR=1 /var/tmp/amilint-")
	assert.Contains(t, scan, "/amilint scan /")
	require.Len(t, comm.uploads, 1)
	assert.Equal(t, string(elfHeader(elf.EM_AARCH64)), comm.contents[comm.uploads[0]], "amilint_binary, not the carried one")
}

// TestUploadsTheBinaryForTheGuestsArchitecture: the guest's `uname -sm`
// picks the carried binary, with no option; what cannot run there fails
// the build before anything runs, naming why.
func TestUploadsTheBinaryForTheGuestsArchitecture(t *testing.T) {
	for _, tc := range []struct {
		name, uname string
		carried     []string
		binary      []byte // amilint_binary's contents, when set
		want, err   string
	}{
		{name: "x86_64", uname: "Linux x86_64", carried: guest.Archs, want: "amilint for linux/amd64"},
		{name: "aarch64", uname: "Linux aarch64", carried: guest.Archs, want: "amilint for linux/arm64"},
		{name: "not carried", uname: "Linux aarch64", carried: []string{"amd64"},
			err: "no amilint for linux/arm64 guests: this plugin build carries linux/amd64 only; set amilint_binary to a linux/arm64 build"},
		{name: "development build", uname: "Linux x86_64",
			err: "this plugin build carries no guest binaries (a development build: run make guest-binaries"},
		{name: "32-bit arm", uname: "Linux armv7l", carried: guest.Archs, err: `guest architecture "armv7l": amilint guests are x86_64 or aarch64`},
		{name: "not linux", uname: "FreeBSD amd64", carried: guest.Archs, err: "the guest runs FreeBSD: amilint audits Linux guests"},
		{name: "no uname", uname: "sh: uname: not found", carried: guest.Archs, err: "uname -sm printed"},
		{name: "amilint_binary for another arch", uname: "Linux aarch64", carried: guest.Archs,
			binary: elfHeader(elf.EM_X86_64), err: "is built for EM_X86_64, the guest is linux/arm64"},
		{name: "amilint_binary script", uname: "Linux aarch64", carried: guest.Archs,
			binary: []byte("#!/bin/sh\nexec amilint \"$@\"\n"), want: "#!/bin/sh\nexec amilint \"$@\"\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := map[string]interface{}{}
			if tc.binary != nil {
				bin := filepath.Join(t.TempDir(), "amilint")
				require.NoError(t, os.WriteFile(bin, tc.binary, 0o755))
				cfg["amilint_binary"] = bin
			}
			p := &Provisioner{guests: guests(t, tc.carried...)}
			require.NoError(t, p.Prepare(cfg))
			comm := &recorder{uname: tc.uname, answer: func(cmd string) (string, int) {
				if strings.Contains(cmd, " scan ") {
					return reportJSON(t), 0
				}
				return "", 0
			}}
			ui := testUi()
			err := p.Provision(context.Background(), ui, comm, nil)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				assert.Equal(t, []string{"mkdir", "uname", "rm"}, comm.verbs(), "nothing runs; the guest directory is removed")
				assert.Empty(t, comm.uploads)
				return
			}
			require.NoError(t, err)
			require.Len(t, comm.uploads, 1)
			up := comm.uploads[0]
			assert.Equal(t, tc.want, comm.contents[up])
			assert.Equal(t, os.FileMode(0o755), comm.modes[up], "uploaded executable, with its size")
			assert.Regexp(t, `amilint: uploaded .* for linux/(amd64|arm64) \(0\.0 MB\) in [0-9.]+[µnm]?s`, said(ui), "says how long the upload took")
		})
	}
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
	assert.Equal(t, []string{"mkdir", "uname", "scan", "live", "rm"}, comm.verbs())
	assert.Contains(t, comm.commands[3], "live -o json --fail-on high")
	assert.Contains(t, comm.commands[3], "--profile k8s-gpu-node --trait immutable", "the live audit applies the scan's policy flags")
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
	assert.Equal(t, []string{"mkdir", "uname", "mkdir", "scan", "fix", "scan", "rm"}, comm.verbs())
	fix := comm.commands[4]
	assert.Contains(t, fix, "fix / --fail-on high")
	assert.Regexp(t, `--harden-catalog '?/tmp/amilint-[^ ]+/harden-catalog-0'?`, fix)
	assert.NotContains(t, comm.commands[3], "--harden", "the scan is not asked to harden")
	assert.Contains(t, comm.dirs[0], "harden-catalog-0 <- "+catalog)

	comm2 := &recorder{answer: func(cmd string) (string, int) {
		if strings.Contains(cmd, " scan ") {
			return reportJSON(t), 0
		}
		return "", 0
	}}
	p = newProvisioner(t, map[string]interface{}{"mode": "fix", "harden": true})
	require.NoError(t, p.Provision(context.Background(), packersdk.TestUi(t), comm2, nil))
	assert.Contains(t, comm2.commands[3], "fix / --fail-on high")
	assert.Contains(t, comm2.commands[3], "--harden")
}

func TestHardenNeedsFixMode(t *testing.T) {
	p := &Provisioner{}
	err := p.Prepare(map[string]interface{}{"harden": true, "harden_catalog_paths": []string{"/nonexistent/catalog"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `harden writes drop-ins into the image: it needs mode = "fix" (mode is "audit")`)
	assert.Contains(t, err.Error(), `harden_catalog_paths: "/nonexistent/catalog"`)
}

// TestReportsReplaceALinkNeverWriteThroughIt: a symbolic link (or a hard
// link) where a report goes is replaced by the report; the file it points
// to, outside report_path, is left as it was.
func TestReportsReplaceALinkNeverWriteThroughIt(t *testing.T) {
	reports, outside := t.TempDir(), t.TempDir()
	victim := filepath.Join(outside, "victim")
	require.NoError(t, os.WriteFile(victim, []byte("precious"), 0o600))
	require.NoError(t, os.Symlink(victim, filepath.Join(reports, "amilint.json")))
	linked := filepath.Join(outside, "linked")
	require.NoError(t, os.WriteFile(linked, []byte("precious"), 0o600))
	require.NoError(t, os.Link(linked, filepath.Join(reports, "amilint.sarif")))
	comm := &recorder{answer: func(cmd string) (string, int) {
		if strings.Contains(cmd, " scan ") {
			return reportJSON(t, ecs), 1
		}
		return "", 0
	}}
	p := newProvisioner(t, map[string]interface{}{"mode": "warn", "report_path": reports, "report_formats": []string{"json", "sarif"}})
	require.NoError(t, p.Provision(context.Background(), testUi(), comm, nil))
	for _, f := range []string{victim, linked} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.Equal(t, "precious", string(b), f)
	}
	for _, f := range []string{"amilint.json", "amilint.sarif"} {
		fi, err := os.Lstat(filepath.Join(reports, f))
		require.NoError(t, err)
		assert.True(t, fi.Mode().IsRegular(), f)
		assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), f)
		b, err := os.ReadFile(filepath.Join(reports, f))
		require.NoError(t, err)
		assert.Contains(t, string(b), "ecs.service", f)
	}
	entries, err := os.ReadDir(reports)
	require.NoError(t, err)
	assert.Len(t, entries, 2, "no temporary file is left")
}

// TestGuestTextReachesNoTerminalEscapes: what the guest prints or reports
// (unit names, fix's lines, stderr) reaches the Packer UI and the build
// error with its control characters replaced: a hostile image cannot send
// the terminal escape sequences.
func TestGuestTextReachesNoTerminalEscapes(t *testing.T) {
	const esc = "\x1b]0;owned\x07\x1b[2J"
	evil := ecs
	evil.Unit = "ecs" + esc + ".service"
	evil.RuleID = "rule" + esc
	comm := &recorder{answer: func(cmd string) (string, int) {
		switch {
		case strings.Contains(cmd, " fix "):
			return "rm /etc/systemd/system/multi-user.target.wants/" + esc + "ecs.service\n", 0
		case strings.Contains(cmd, " scan "):
			return reportJSON(t, evil), 1
		}
		return "", 0
	}}
	p := newProvisioner(t, map[string]interface{}{"mode": "fix"})
	ui := testUi()
	err := p.Provision(context.Background(), ui, comm, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ecs\uFFFD]0;owned\uFFFD\uFFFD[2J.service")
	assert.NotContains(t, err.Error(), "\x1b")
	assert.Contains(t, said(ui), "owned")
	assert.NotContains(t, said(ui), "\x1b")

	comm = &recorder{stderr: "amilint scan: open " + esc + "\nsecond line" + esc + "\n", answer: func(cmd string) (string, int) {
		if strings.Contains(cmd, " scan ") {
			return "", 2
		}
		return "", 0
	}}
	p = newProvisioner(t, map[string]interface{}{})
	ui = testUi()
	err = p.Provision(context.Background(), ui, comm, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "open \uFFFD]0;owned\uFFFD\uFFFD[2J\nsecond line", "line breaks kept")
	assert.NotContains(t, err.Error(), "\x1b")
	streamed := ui.(*packersdk.BasicUi).ErrorWriter.(*bytes.Buffer).String()
	assert.Contains(t, streamed, "owned", "stderr is streamed")
	assert.NotContains(t, streamed, "\x1b")
}

// TestPrepareRefusesARemoteFolderTheGuestShellWouldSplit: the SSH
// communicator's scp runs "scp -t DIR" in the guest's shell with DIR
// unquoted, so a remote_folder that needs quoting would split (a space)
// or run a command there (;, $(), backticks): Prepare refuses it.
func TestPrepareRefusesARemoteFolderTheGuestShellWouldSplit(t *testing.T) {
	for _, bad := range []string{"/tmp/a b", "/tmp/x;touch /pwned", "/tmp/$(id)", "/tmp/`id`", "/tmp/it's", "/tmp/a\nb", "/tmp/*"} {
		p := &Provisioner{guests: guests(t)}
		err := p.Prepare(map[string]interface{}{"remote_folder": bad})
		require.Error(t, err, "%q", bad)
		assert.Contains(t, err.Error(), fmt.Sprintf("remote_folder %q: the communicator passes it to the guest's shell unquoted", bad))
	}
	for _, good := range []string{"/", "/var/tmp", "/tmp/packer-build_1.2", "/mnt/image@x,y+z:1=2"} {
		p := &Provisioner{guests: guests(t)}
		require.NoError(t, p.Prepare(map[string]interface{}{"remote_folder": good}), good)
	}
}

// TestCancelStopsPromptlyAndStillRemovesTheGuestDirectory: Ctrl-C while
// the guest audits (a communicator that, like SSH's, does not stop the
// command) returns at once with the cancellation, and the guest directory
// is still removed, its removal waited for rather than reported failed.
func TestCancelStopsPromptlyAndStillRemovesTheGuestDirectory(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	comm := &recorder{answer: func(cmd string) (string, int) {
		if strings.Contains(cmd, " scan ") {
			cancel()
			return "", -1 // still running on the guest
		}
		return "", 0
	}}
	p := newProvisioner(t, map[string]interface{}{})
	ui := testUi()
	done := make(chan error)
	go func() { done <- p.Provision(ctx, ui, comm, nil) }()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Provision did not return after the cancellation")
	}
	assert.Equal(t, []string{"mkdir", "uname", "scan", "rm"}, comm.verbs(), "the guest directory is removed")
	assert.Empty(t, ui.(*packersdk.BasicUi).ErrorWriter.(*bytes.Buffer).String(), "the removal is not reported failed")
}

// TestFixModeAuditsLiveAgain: with live, the audit after fix is live too:
// a crash loop on the running instance, which fixing the image does not
// end, still fails the build and is in the report.
func TestFixModeAuditsLiveAgain(t *testing.T) {
	crash := finding.Finding{RuleID: "live-unit-crashloop", Severity: finding.High, Unit: "nvidia-persistenced.service", Message: "restarted 41 times"}
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
		case strings.Contains(cmd, " live ") && !fixed:
			return reportJSON(t, crash, ecs), 1
		case strings.Contains(cmd, " live "):
			return reportJSON(t, crash), 1
		}
		return "", 0
	}}
	reports := t.TempDir()
	p := newProvisioner(t, map[string]interface{}{"mode": "fix", "live": true, "report_path": reports})
	err := p.Provision(context.Background(), testUi(), comm, nil)
	require.Error(t, err, "the crash loop remains")
	assert.Contains(t, err.Error(), "nvidia-persistenced.service (live-unit-crashloop)")
	assert.NotContains(t, err.Error(), "ecs.service", "fixed")
	assert.Equal(t, []string{"mkdir", "uname", "scan", "live", "fix", "scan", "live", "rm"}, comm.verbs())
	b, err := os.ReadFile(filepath.Join(reports, "amilint.json"))
	require.NoError(t, err)
	assert.Contains(t, string(b), "live-unit-crashloop")
}

// slowUpload is a recorder whose Upload reads a byte at a time and, after
// the first, cancels the build (Ctrl-C during the upload).
type slowUpload struct {
	*recorder
	cancel  context.CancelFunc
	readErr error
}

func (u *slowUpload) Upload(dst string, src io.Reader, fi *os.FileInfo) error {
	var b [1]byte
	for n := 0; ; n++ {
		if _, err := src.Read(b[:]); err == io.EOF {
			return nil
		} else if err != nil {
			u.readErr = err
			return err
		}
		if n == 0 {
			u.cancel()
		}
	}
}

// TestCancelStopsTheBinaryUpload: the communicators' Upload takes no
// context, so Ctrl-C during the upload of the binary (tens of megabytes,
// seconds to minutes over SSH) stops it through its reader.
func TestCancelStopsTheBinaryUpload(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	comm := &slowUpload{recorder: &recorder{}, cancel: cancel}
	p := newProvisioner(t, map[string]interface{}{})
	err := p.Provision(ctx, testUi(), comm, nil)
	require.Error(t, err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, comm.readErr, context.Canceled, "the upload was stopped")
	assert.Equal(t, []string{"mkdir", "uname", "rm"}, comm.verbs(), "nothing runs after it; the guest directory is removed")
}
