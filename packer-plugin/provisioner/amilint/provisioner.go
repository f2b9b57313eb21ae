//go:generate packer-sdc mapstructure-to-hcl2 -type Config

// Package amilint is the Packer provisioner that audits the image being
// built with amilint, over whatever communicator the builder gives, and
// fails the build, fixes the image, or only warns.
//
// The provisioner asks the guest its architecture (`uname -sm`), uploads
// the amilint binary this plugin carries for it (see the guest package),
// uploads the user's policies, rules, data and waivers, runs `amilint scan`
// on `root`, reads the JSON report back and writes the requested report
// formats on the Packer host. The guest needs neither systemd as PID 1 nor
// internet access, and the Packer host may run any OS.
package amilint

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2/hcldec"
	"github.com/hashicorp/packer-plugin-sdk/common"
	packersdk "github.com/hashicorp/packer-plugin-sdk/packer"
	"github.com/hashicorp/packer-plugin-sdk/template/config"
	"github.com/hashicorp/packer-plugin-sdk/template/interpolate"
	"github.com/hashicorp/packer-plugin-sdk/uuid"

	"github.com/amilint/amilint/internal/audit/bytesize"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/report"
	"github.com/amilint/amilint/packer-plugin/guest"
	"github.com/amilint/amilint/rules"
)

// Modes of the provisioner.
const (
	ModeAudit = "audit"
	ModeFix   = "fix"
	ModeWarn  = "warn"
)

// DefaultExecuteCommand runs amilint as the communicator's user.
const DefaultExecuteCommand = "chmod 0755 {{.Path}} && {{.Vars}} {{.Path}} {{.Args}}"

var reportFormats = []string{"json", "sarif", "junit", "html", "markdown", "text"}

// Config is the provisioner's configuration; each field's comment is its
// user documentation.
type Config struct {
	common.PackerConfig `mapstructure:",squash"`

	// What to do with findings. `audit` (the default) fails the build when a
	// finding at or above `fail_on` is not waived. `fix` disables or masks
	// the units policy rejects, exactly as `systemctl disable` or `mask` would,
	// audits again, prints what it changed, and fails only if something at
	// or above `fail_on` remains. `warn` reports and never fails.
	Mode string `mapstructure:"mode"`
	// The lowest severity that fails the build: `info`, `low`, `medium`,
	// `high` (the default) or `critical`.
	FailOn string `mapstructure:"fail_on"`
	// A role profile (for example `k8s-gpu-node`): a default-deny allowlist of
	// the units that may start at boot.
	Profile string `mapstructure:"profile"`
	// What kind of image this is, for example `["immutable"]`: rules
	// restricted to a trait (such as `auto-upgrades-immutable`) apply only
	// with it. The profile's own traits are added.
	Traits []string `mapstructure:"traits"`
	// Directories of your own Rego policies, on the Packer host, evaluated
	// with the embedded ones.
	PolicyPaths []string `mapstructure:"policy_paths"`
	// Directories of your own rule files (YAML), on the Packer host.
	RulesPaths []string `mapstructure:"rules_paths"`
	// A JSON or YAML data file on the Packer host, available to policies as
	// `data.user`.
	Data string `mapstructure:"data"`
	// A waivers file on the Packer host: findings it names are reported as
	// waived and do not fail the build until the waiver expires.
	Waivers string `mapstructure:"waivers"`
	// How long one policy evaluation may run, for example `"10s"`; past it
	// the audit stops and the build fails naming the policy package that
	// ran out of time. Defaults to `30s`.
	PolicyTimeout time.Duration `mapstructure:"policy_timeout"`
	// How much memory one policy evaluation may hold, for example
	// `"512MiB"`; past it the audit stops and the build fails naming the
	// policy package that ran out of memory, instead of the guest's kernel
	// killing the audit. Defaults to a quarter of the guest's memory, at
	// most `2GiB`.
	PolicyMemory string `mapstructure:"policy_memory"`
	// An OPA capabilities file on the Packer host (the JSON `opa
	// capabilities` prints) the policies are compiled with. Without it,
	// policies cannot call `http.send`, `net.lookup_ip_addr` or
	// `opa.runtime`: they cannot reach the network or read the
	// environment, where builds keep cloud credentials.
	PolicyCapabilities string `mapstructure:"policy_capabilities"`
	// The image root to audit, on the guest. Defaults to `/`; set it for
	// builders that mount the target volume elsewhere (amazon-chroot).
	Root string `mapstructure:"root"`
	// Where reports are written on the Packer host: a directory, created if
	// missing. Each format is written as `amilint.<ext>` inside it.
	ReportPath string `mapstructure:"report_path"`
	// Report formats to write to `report_path`: any of `json`, `sarif`,
	// `junit`, `html`, `markdown`, `text`. Defaults to `json` when
	// `report_path` is set.
	ReportFormats []string `mapstructure:"report_formats"`
	// The command that runs amilint on the guest, a template with `{{.Path}}`
	// (the uploaded binary), `{{.Args}}` and `{{.Vars}}` (environment
	// assignments). Defaults to running it directly; for a non-root SSH user
	// use for example `chmod 0755 {{.Path}} && sudo -n {{.Vars}} {{.Path}} {{.Args}}`.
	ExecuteCommand string `mapstructure:"execute_command"`
	// Also audit the build instance's running systemd and cgroups (crash
	// loops, zombie memory cgroups), when the guest has them.
	Live bool `mapstructure:"live"`
	// Also sandbox the services the image keeps (needs `mode = "fix"`):
	// write the hardening catalog's drop-ins, as `amilint fix --harden`
	// does, under `/etc/systemd/system/UNIT.d/` for the catalog's services
	// the image has and enables (cron, rsyslog, ssh, chrony,
	// unattended-upgrades, containerd, docker), and print each one's
	// exposure before and after, as systemd-analyze security scores it.
	Harden bool `mapstructure:"harden"`
	// Directories of your own hardening catalog entries (YAML), on the
	// Packer host, over the shipped ones by id (`disabled: true` turns one
	// off); implies `harden`.
	HardenCatalogPaths []string `mapstructure:"harden_catalog_paths"`
	// An amilint binary on the Packer host to upload instead of the one
	// this plugin carries for the guest's architecture (linux/amd64 and
	// linux/arm64, picked by `uname -m` on the guest): a build of your own,
	// or one for another architecture. It must be a linux binary for the
	// guest's architecture; an ELF file for another one is refused.
	AmilintBinary string `mapstructure:"amilint_binary"`
	// The guest directory for uploaded files. Defaults to `/tmp`.
	RemoteFolder string `mapstructure:"remote_folder"`

	ctx interpolate.Context
}

// Provisioner is the amilint provisioner.
type Provisioner struct {
	config Config
	// guests holds the compressed guest binaries (guest.Embedded unless a
	// test sets it).
	guests fs.FS
}

// ConfigSpec returns the HCL2 spec of Config.
func (p *Provisioner) ConfigSpec() hcldec.ObjectSpec { return p.config.FlatMapstructure().HCL2Spec() }

// Prepare decodes and validates the configuration, reporting every problem
// at once.
func (p *Provisioner) Prepare(raws ...interface{}) error {
	err := config.Decode(&p.config, &config.DecodeOpts{
		PluginType:         "amilint",
		Interpolate:        true,
		InterpolateContext: &p.config.ctx,
		InterpolateFilter:  &interpolate.RenderFilter{Exclude: []string{"execute_command"}},
	}, raws...)
	if err != nil {
		return err
	}
	c := &p.config
	if c.Mode == "" {
		c.Mode = ModeAudit
	}
	if c.FailOn == "" {
		c.FailOn = "high"
	}
	if c.Root == "" {
		c.Root = "/"
	}
	if c.RemoteFolder == "" {
		c.RemoteFolder = "/tmp"
	}
	if c.ExecuteCommand == "" {
		c.ExecuteCommand = DefaultExecuteCommand
	}
	if c.ReportPath != "" && len(c.ReportFormats) == 0 {
		c.ReportFormats = []string{"json"}
	}
	if p.guests == nil {
		p.guests = guest.Embedded()
	}

	var errs *packersdk.MultiError
	add := func(format string, a ...any) { errs = packersdk.MultiErrorAppend(errs, fmt.Errorf(format, a...)) }
	if !slices.Contains([]string{ModeAudit, ModeFix, ModeWarn}, c.Mode) {
		add("mode %q: want audit, fix or warn", c.Mode)
	}
	if _, err := finding.ParseSeverity(c.FailOn); err != nil {
		add("fail_on %q: want info, low, medium, high or critical", c.FailOn)
	}
	if !path.IsAbs(c.Root) {
		add("root %q: must be an absolute path on the guest", c.Root)
	}
	if !path.IsAbs(c.RemoteFolder) {
		add("remote_folder %q: must be an absolute path on the guest", c.RemoteFolder)
	} else if shellQuote(c.RemoteFolder) != c.RemoteFolder {
		// The SSH communicator's scp runs "scp -t DIR" in the guest's
		// shell with DIR unquoted: a space splits it, a ; or $( runs a
		// command.
		add("remote_folder %q: the communicator passes it to the guest's shell unquoted: use letters, digits and -_./=:@,+ only", c.RemoteFolder)
	}
	for _, f := range c.ReportFormats {
		if !slices.Contains(reportFormats, f) {
			add("report_formats: %q is not one of %s", f, strings.Join(reportFormats, ", "))
		}
	}
	if len(c.ReportFormats) > 0 && c.ReportPath == "" {
		add("report_formats is set but report_path is not")
	}
	for _, t := range c.Traits {
		if !rules.ValidTrait(t) {
			add("traits: %q is not a trait name (a slug like immutable)", t)
		}
	}
	for _, d := range c.PolicyPaths {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			add("policy_paths: %q is not a directory on the Packer host", d)
		}
	}
	for _, d := range c.RulesPaths {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			add("rules_paths: %q is not a directory on the Packer host", d)
		}
	}
	for _, d := range c.HardenCatalogPaths {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			add("harden_catalog_paths: %q is not a directory on the Packer host", d)
		}
	}
	if c.hardens() && c.Mode != ModeFix {
		add("harden writes drop-ins into the image: it needs mode = \"fix\" (mode is %q)", c.Mode)
	}
	if c.PolicyTimeout < 0 {
		add("policy_timeout %s: want a positive duration", c.PolicyTimeout)
	}
	if c.PolicyMemory != "" {
		if _, err := bytesize.Parse(c.PolicyMemory); err != nil {
			add("policy_memory: %v", err)
		}
	}
	for name, f := range map[string]string{"data": c.Data, "waivers": c.Waivers, "amilint_binary": c.AmilintBinary, "policy_capabilities": c.PolicyCapabilities} {
		if f == "" {
			continue
		}
		if fi, err := os.Stat(f); err != nil || !fi.Mode().IsRegular() {
			add("%s: %q is not a file on the Packer host", name, f)
		}
	}
	if !strings.Contains(c.ExecuteCommand, "{{.Path}}") || !strings.Contains(c.ExecuteCommand, "{{.Args}}") {
		add("execute_command must contain {{.Path}} and {{.Args}}")
	}
	if errs != nil && len(errs.Errors) > 0 {
		return errs
	}
	return nil
}

// session is one provisioning run on the guest.
type session struct {
	p      *Provisioner
	ui     packersdk.Ui
	comm   packersdk.Communicator
	dir    string // guest working directory
	binary string // guest path of amilint
	// flags are the policy inputs as uploaded.
	flags []string
	// hardenFlags are fix's --harden and --harden-catalog, as uploaded.
	hardenFlags []string
}

// hardens reports whether the provisioner writes hardening drop-ins.
func (c *Config) hardens() bool { return c.Harden || len(c.HardenCatalogPaths) > 0 }

// Provision audits (and in fix mode fixes) the guest's image root.
func (p *Provisioner) Provision(ctx context.Context, ui packersdk.Ui, comm packersdk.Communicator, _ map[string]interface{}) error {
	c := &p.config
	s := &session{p: p, ui: ui, comm: comm, dir: path.Join(c.RemoteFolder, "amilint-"+uuid.TimeOrderedUUID())}
	ui.Say(fmt.Sprintf("amilint: auditing %s on the guest (mode %s, fail_on %s)", c.Root, c.Mode, c.FailOn))
	// Whatever was uploaded is removed, even when the upload fails half-way.
	defer s.cleanup(ctx)
	if err := s.upload(ctx); err != nil {
		return err
	}

	rep, code, err := s.audit(ctx)
	if err != nil {
		return err
	}
	s.show(rep)
	if c.Mode == ModeFix && (code == 1 || c.hardens()) {
		if err := s.fix(ctx); err != nil {
			return err
		}
		// The same audit again: with live, what fix cannot change on the
		// running instance (a crash loop) still fails the build.
		if rep, code, err = s.audit(ctx); err != nil {
			return err
		}
		ui.Say("amilint: after fixing:")
		s.show(rep)
	}
	if err := p.writeReports(rep); err != nil {
		return err
	}
	if code == 1 && c.Mode != ModeWarn {
		return fmt.Errorf("amilint: %s", failure(rep, c.FailOn))
	}
	if code == 1 {
		ui.Error("amilint: findings at or above " + c.FailOn + " (mode warn: not failing the build)")
	}
	return nil
}

// audit scans root and, with live, the running instance: one report and
// its exit code.
func (s *session) audit(ctx context.Context) (*finding.Report, int, error) {
	c := &s.p.config
	rep, code, err := s.scan(ctx)
	if err != nil || !c.Live {
		return rep, code, err
	}
	lf, err := s.live(ctx)
	if err != nil {
		return nil, 0, err
	}
	rep = finding.NewReport(rep.Target, merge(rep.Findings, lf))
	failOn, _ := finding.ParseSeverity(c.FailOn)
	return rep, finding.ExitCode(rep.Findings, failOn), nil
}

// failure names what fails the build: the units of the failing findings.
func failure(rep *finding.Report, failOn string) string {
	min, _ := finding.ParseSeverity(failOn)
	var what []string
	for _, f := range rep.Findings {
		if f.Waived || f.Severity < min {
			continue
		}
		w := f.RuleID
		if f.Unit != "" {
			w = f.Unit + " (" + f.RuleID + ")"
		}
		w = report.Printable(w)
		if !slices.Contains(what, w) {
			what = append(what, w)
		}
	}
	return fmt.Sprintf("%d finding(s) at or above %s: %s", len(what), failOn, strings.Join(what, ", "))
}

func (s *session) upload(ctx context.Context) error {
	c := &s.p.config
	// Only its owner (and root, which runs amilint) reads what goes in:
	// the user's policies, waivers and data stay private to the build.
	if err := s.run(ctx, "mkdir -p -m 0700 "+shellQuote(s.dir), nil); err != nil {
		return fmt.Errorf("amilint: create %s on the guest: %w", s.dir, err)
	}
	if err := s.uploadBinary(ctx); err != nil {
		return err
	}
	for i, d := range c.PolicyPaths {
		dst := path.Join(s.dir, fmt.Sprintf("policy-%d", i))
		if err := s.uploadDir(ctx, dst, d); err != nil {
			return err
		}
		s.flags = append(s.flags, "--policy", dst)
	}
	for i, d := range c.RulesPaths {
		dst := path.Join(s.dir, fmt.Sprintf("rules-%d", i))
		if err := s.uploadDir(ctx, dst, d); err != nil {
			return err
		}
		s.flags = append(s.flags, "--rules", dst)
	}
	for i, d := range c.HardenCatalogPaths {
		dst := path.Join(s.dir, fmt.Sprintf("harden-catalog-%d", i))
		if err := s.uploadDir(ctx, dst, d); err != nil {
			return err
		}
		s.hardenFlags = append(s.hardenFlags, "--harden-catalog", dst)
	}
	if c.Harden && len(s.hardenFlags) == 0 {
		s.hardenFlags = []string{"--harden"}
	}
	if c.Data != "" {
		dst := path.Join(s.dir, "data"+filepath.Ext(c.Data))
		if err := s.uploadFile(dst, c.Data); err != nil {
			return err
		}
		s.flags = append(s.flags, "--data", dst)
	}
	if c.Waivers != "" {
		dst := path.Join(s.dir, "waivers"+filepath.Ext(c.Waivers))
		if err := s.uploadFile(dst, c.Waivers); err != nil {
			return err
		}
		s.flags = append(s.flags, "--waivers", dst)
	}
	if c.PolicyCapabilities != "" {
		dst := path.Join(s.dir, "capabilities.json")
		if err := s.uploadFile(dst, c.PolicyCapabilities); err != nil {
			return err
		}
		s.flags = append(s.flags, "--policy-capabilities", dst)
	}
	if c.PolicyTimeout != 0 {
		s.flags = append(s.flags, "--policy-timeout", c.PolicyTimeout.String())
	}
	if c.PolicyMemory != "" {
		s.flags = append(s.flags, "--policy-memory", c.PolicyMemory)
	}
	if c.Profile != "" {
		s.flags = append(s.flags, "--profile", c.Profile)
	}
	for _, t := range c.Traits {
		s.flags = append(s.flags, "--trait", t)
	}
	return nil
}

// uploadBinary uploads the amilint for the guest's architecture, as the
// guest reports it, and says how long that took.
func (s *session) uploadBinary(ctx context.Context) error {
	c := &s.p.config
	arch, err := s.guestArch(ctx)
	if err != nil {
		return err
	}
	var bin []byte
	what := "the amilint this plugin carries"
	if c.AmilintBinary != "" {
		what = c.AmilintBinary
		if bin, err = os.ReadFile(c.AmilintBinary); err != nil {
			return fmt.Errorf("amilint: amilint_binary: %w", err)
		}
		if err := checkELF(bin, arch); err != nil {
			return fmt.Errorf("amilint: amilint_binary %s: %w", c.AmilintBinary, err)
		}
	} else if bin, err = guest.Binary(s.p.guests, arch); err != nil {
		return fmt.Errorf("amilint: %w; set amilint_binary to a linux/%s build of amilint", err, arch)
	}
	s.binary = path.Join(s.dir, "amilint")
	start := time.Now()
	var fi os.FileInfo = executable{size: int64(len(bin))}
	if err := s.comm.Upload(s.binary, ctxReader{ctx, bytes.NewReader(bin)}, &fi); err != nil {
		return fmt.Errorf("amilint: upload %s to %s: %w", what, s.binary, err)
	}
	s.ui.Say(fmt.Sprintf("amilint: uploaded %s for linux/%s (%.1f MB) in %s",
		what, arch, float64(len(bin))/1e6, time.Since(start).Round(time.Millisecond)))
	return nil
}

// guestArch asks the guest its kernel and machine (`uname -sm`) and returns
// the GOARCH of the amilint it needs; a guest that is not Linux is an error.
func (s *session) guestArch(ctx context.Context) (string, error) {
	var out bytes.Buffer
	if err := s.run(ctx, "uname -sm", &out); err != nil {
		return "", fmt.Errorf("amilint: detect the guest's architecture: %w", err)
	}
	f := strings.Fields(out.String())
	if len(f) != 2 {
		return "", fmt.Errorf("amilint: detect the guest's architecture: uname -sm printed %q", strings.TrimSpace(out.String()))
	}
	if f[0] != "Linux" {
		return "", fmt.Errorf("amilint: the guest runs %s: amilint audits Linux guests", f[0])
	}
	arch, err := guest.Arch(f[1])
	if err != nil {
		return "", fmt.Errorf("amilint: %w", err)
	}
	return arch, nil
}

// elfMachines are the ELF machines of the guest architectures.
var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// checkELF refuses an ELF binary built for another architecture than
// arch; a file that is not ELF (a wrapper script) is the user's to vouch
// for.
func checkELF(bin []byte, arch string) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return nil
	}
	defer f.Close()
	if want, ok := elfMachines[arch]; ok && f.Machine != want {
		return fmt.Errorf("is built for %s, the guest is linux/%s", f.Machine, arch)
	}
	return nil
}

// ctxReader reads r until ctx is done. The communicators' Upload takes no
// context: through its reader, Ctrl-C stops the upload of the binary (tens
// of megabytes) without waiting for it to end.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// executable describes the binary uploaded from memory: a regular file,
// mode 0755, of size bytes (the SSH communicator's scp needs the size up
// front, and would otherwise copy the binary to a temporary file first).
type executable struct{ size int64 }

func (e executable) Name() string       { return "amilint" }
func (e executable) Size() int64        { return e.size }
func (e executable) Mode() fs.FileMode  { return 0o755 }
func (e executable) ModTime() time.Time { return time.Time{} }
func (e executable) IsDir() bool        { return false }
func (e executable) Sys() any           { return nil }

func (s *session) uploadFile(dst, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("amilint: upload %s: %w", src, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("amilint: upload %s: %w", src, err)
	}
	if err := s.comm.Upload(dst, f, &fi); err != nil {
		return fmt.Errorf("amilint: upload %s to %s: %w", src, dst, err)
	}
	return nil
}

func (s *session) uploadDir(ctx context.Context, dst, src string) error {
	if err := s.run(ctx, "mkdir -p "+shellQuote(dst), nil); err != nil {
		return fmt.Errorf("amilint: create %s on the guest: %w", dst, err)
	}
	// A trailing slash uploads the directory's contents, not the directory.
	if err := s.comm.UploadDir(dst, strings.TrimSuffix(src, "/")+"/", nil); err != nil {
		return fmt.Errorf("amilint: upload %s to %s: %w", src, dst, err)
	}
	return nil
}

// amilint runs the engine with args and returns its stdout and exit code;
// exit 2 (could not audit) and transport failures are errors.
func (s *session) amilint(ctx context.Context, args ...string) ([]byte, int, error) {
	c := &s.p.config
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	c.ctx.Data = map[string]string{
		"Path": shellQuote(s.binary),
		"Args": strings.Join(quoted, " "),
		"Vars": "AMILINT_NO_COLOR=1",
	}
	command, err := interpolate.Render(c.ExecuteCommand, &c.ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("amilint: render execute_command: %w", err)
	}
	var stdout, stderr bytes.Buffer
	cmd := &packersdk.RemoteCmd{Command: command, Stdout: &stdout, Stderr: &stderr}
	if err := cmd.RunWithUi(ctx, s.comm, quietUi{s.ui}); err != nil {
		return nil, 0, fmt.Errorf("amilint: run on the guest: %w", err)
	}
	code := cmd.ExitStatus()
	if code != 0 && code != 1 {
		msg := printableLines(strings.TrimSpace(stderr.String()))
		if msg == "" {
			msg = "no message"
		}
		return nil, code, fmt.Errorf("amilint %s exited %d: %s", args[0], code, msg)
	}
	return stdout.Bytes(), code, nil
}

func (s *session) scanArgs(cmd string) []string {
	c := &s.p.config
	args := []string{cmd, c.Root, "--fail-on", c.FailOn}
	if cmd == "scan" {
		args = append(args, "-o", "json")
	}
	return append(args, s.flags...)
}

// merge adds to the image's findings the live ones it lacks: a live audit
// also judges the instance's own unit files, which the scan of root has
// already judged when root is "/".
func merge(static, live []finding.Finding) []finding.Finding {
	type key struct{ rule, unit string }
	seen := map[key]bool{}
	for _, f := range static {
		seen[key{f.RuleID, f.Unit}] = true
	}
	out := slices.Clone(static)
	for _, f := range live {
		if !seen[key{f.RuleID, f.Unit}] {
			out = append(out, f)
		}
	}
	return out
}

// live audits the build instance's running systemd and cgroups and returns
// its findings; the guest must run systemd for that.
func (s *session) live(ctx context.Context) ([]finding.Finding, error) {
	// The same policies, rules, data, waivers, profile and traits as the scan.
	out, _, err := s.amilint(ctx, append([]string{"live", "-o", "json", "--fail-on", s.p.config.FailOn}, s.flags...)...)
	if err != nil {
		return nil, err
	}
	rep, err := finding.Decode(out)
	if err != nil {
		return nil, fmt.Errorf("amilint: read the guest's live report: %w", err)
	}
	return rep.Findings, nil
}

func (s *session) scan(ctx context.Context) (*finding.Report, int, error) {
	out, code, err := s.amilint(ctx, s.scanArgs("scan")...)
	if err != nil {
		return nil, 0, err
	}
	rep, err := finding.Decode(out)
	if err != nil {
		return nil, 0, fmt.Errorf("amilint: read the guest's report: %w", err)
	}
	return rep, code, nil
}

func (s *session) fix(ctx context.Context) error {
	out, _, err := s.amilint(ctx, append(s.scanArgs("fix"), s.hardenFlags...)...)
	if err != nil {
		return err
	}
	s.ui.Say("amilint: changed the image:")
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			s.ui.Say("  " + report.Printable(l))
		}
	}
	return nil
}

func (s *session) show(rep *finding.Report) {
	w, err := report.Get("text")
	if err != nil {
		return
	}
	var buf bytes.Buffer
	if err := w.Write(&buf, rep); err != nil {
		return
	}
	for _, l := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n") {
		s.ui.Message(l)
	}
}

// cleanupTimeout bounds the removal of the guest directory.
const cleanupTimeout = 10 * time.Second

// cleanup removes the guest directory. It runs when the build is cancelled
// too (the cancelled context would not start the command, or not wait for
// it): the binary and the user's policy inputs are not left in the image.
func (s *session) cleanup(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := s.run(ctx, "rm -rf "+shellQuote(s.dir), nil); err != nil {
		s.ui.Error(fmt.Sprintf("amilint: remove %s on the guest: %v", s.dir, err))
	}
}

// run runs a plain shell command on the guest.
func (s *session) run(ctx context.Context, command string, stdout io.Writer) error {
	cmd := &packersdk.RemoteCmd{Command: command, Stdout: stdout}
	if err := cmd.RunWithUi(ctx, s.comm, quietUi{s.ui}); err != nil {
		return err
	}
	if code := cmd.ExitStatus(); code != 0 {
		return fmt.Errorf("%q exited %d", command, code)
	}
	return nil
}

func (p *Provisioner) writeReports(rep *finding.Report) error {
	c := &p.config
	if c.ReportPath == "" {
		return nil
	}
	if err := os.MkdirAll(c.ReportPath, 0o755); err != nil {
		return fmt.Errorf("amilint: create report_path: %w", err)
	}
	var errs []error
	for _, f := range c.ReportFormats {
		w, err := report.Get(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var buf bytes.Buffer
		if err := w.Write(&buf, rep); err != nil {
			errs = append(errs, fmt.Errorf("amilint: write %s report: %w", f, err))
			continue
		}
		dst := filepath.Join(c.ReportPath, "amilint."+extension(f))
		if err := replaceFile(dst, buf.Bytes()); err != nil {
			errs = append(errs, fmt.Errorf("amilint: write %s: %w", dst, err))
		}
	}
	return errors.Join(errs...)
}

// replaceFile writes b as the file dst, mode 0644: into a new file beside
// it, renamed over dst, so that a symbolic link (or another hard link)
// already at dst is replaced, never written through.
func replaceFile(dst string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

func extension(format string) string {
	switch format {
	case "markdown":
		return "md"
	case "junit":
		return "junit.xml"
	case "text":
		return "txt"
	}
	return format
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:@,+", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// printableLines replaces the control characters of each line of s, as
// report.Printable does, keeping its line breaks.
func printableLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = report.Printable(l)
	}
	return strings.Join(lines, "\n")
}

// quietUi drops the streamed output of commands whose output the
// provisioner reads itself; errors still reach the user, their control
// characters replaced (what the guest prints is the guest's to choose:
// its escape sequences must not reach the terminal).
type quietUi struct{ packersdk.Ui }

func (q quietUi) Say(string) {}

func (q quietUi) Error(m string) { q.Ui.Error(report.Printable(m)) }
