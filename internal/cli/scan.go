package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/bytesize"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/audit/policy"
	"github.com/amilint/amilint/internal/audit/waiver"
	"github.com/amilint/amilint/internal/image/target"
	"github.com/amilint/amilint/internal/report"
	"github.com/amilint/amilint/internal/systemd/condition"
	sdversion "github.com/amilint/amilint/internal/systemd/version"
)

// docsBase is where each rule's documentation page lives.
const docsBase = "https://github.com/amilint/amilint/blob/main/rules/docs/"

// listFlag is a repeatable string flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// traitFlag is --trait: repeatable, each value one or more comma-separated
// trait names; audit.New validates them (a slug some rule or profile uses).
type traitFlag []string

func (t *traitFlag) String() string { return strings.Join(*t, ",") }
func (t *traitFlag) Set(v string) error {
	for _, n := range strings.Split(v, ",") {
		*t = append(*t, strings.TrimSpace(n))
	}
	return nil
}

// memoryFlag is --policy-memory: a size as bytesize.Parse reads it (at
// most 2^63 bytes), or, unset, policy.AutoMemory.
type memoryFlag uint64

func (m *memoryFlag) String() string {
	if m == nil || uint64(*m) == policy.AutoMemory {
		return ""
	}
	return bytesize.Format(uint64(*m))
}

func (m *memoryFlag) Set(v string) error {
	n, err := bytesize.Parse(v)
	if err == nil {
		*m = memoryFlag(n)
	}
	return err
}

// policyFlags choose the knowledge and decisions an audit applies: the
// flags scan, facts, diff, fix and live share.
type policyFlags struct {
	rules, policies, data listFlag
	traits                traitFlag
	profile, waivers      string
	budget                budgetFlags
}

// budgetFlags bound untrusted policies: --policy-timeout,
// --policy-memory and --policy-capabilities, shared by every command
// evaluating policies.
type budgetFlags struct {
	timeout      time.Duration
	memory       memoryFlag
	capabilities string
}

func (b *budgetFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&b.timeout, "policy-timeout", policy.DefaultTimeout, "stop a policy evaluation after this long (exit 2 naming the package); 0 for no limit")
	b.memory = policy.AutoMemory
	fs.Var(&b.memory, "policy-memory", "stop a policy evaluation once it holds more than `SIZE` of memory (512MiB, 2GiB; exit 2 naming the package); 0 for no limit (default: a quarter of the memory the process may use, at most 2GiB)")
	fs.StringVar(&b.capabilities, "policy-capabilities", "", "OPA capabilities `FILE` (JSON, as `opa capabilities` prints) policies are compiled with; the default leaves out http.send, net.lookup_ip_addr and opa.runtime")
}

// apply sets the budget of cfg.
func (b *budgetFlags) apply(cfg *audit.Config) error {
	if b.timeout < 0 {
		return fmt.Errorf("--policy-timeout %s: want 0 (no limit) or more", b.timeout)
	}
	cfg.PolicyTimeout, cfg.PolicyMemory = b.timeout, uint64(b.memory)
	if b.capabilities != "" {
		c, err := policy.LoadCapabilities(b.capabilities)
		if err != nil {
			return err
		}
		cfg.Capabilities = c
	}
	return nil
}

func (p *policyFlags) register(fs *flag.FlagSet) {
	fs.Var(&p.rules, "rules", "directory of extra rule files (YAML); repeatable")
	fs.Var(&p.policies, "policy", "directory of extra Rego policies; repeatable")
	fs.Var(&p.data, "data", "JSON or YAML file of data for policies (data.user); repeatable")
	fs.StringVar(&p.profile, "profile", "", "role profile: a default-deny allowlist of units started at boot (e.g. k8s-gpu-node)")
	fs.Var(&p.traits, "trait", "what kind of image this is, e.g. immutable (rules restricted to a trait apply only with it); repeatable or comma-separated")
	fs.StringVar(&p.waivers, "waivers", "", "waivers file (YAML)")
	p.budget.register(fs)
}

// config is the audit configuration the flags name, waivers loaded.
func (p *policyFlags) config() (audit.Config, error) {
	cfg := audit.Config{RulesDirs: p.rules, PolicyDirs: p.policies, DataFiles: p.data, Profile: p.profile, Traits: p.traits}
	if err := p.budget.apply(&cfg); err != nil {
		return cfg, err
	}
	if p.waivers != "" {
		w, err := waiver.Load(p.waivers)
		if err != nil {
			return cfg, err
		}
		cfg.Waivers = w
	}
	return cfg, nil
}

// auditFlags are the flags every auditing command of an image shares.
type auditFlags struct {
	policyFlags
	failOn string
	disk   diskFlags
	model  modelFlags
	// factsOnly is set by a command that prints facts and judges nothing.
	factsOnly bool
}

// modelFlags tune the unit model: units, scan, facts, diff and fix share
// them.
type modelFlags struct {
	opts audit.ModelOptions
}

func (m *modelFlags) register(fs *flag.FlagSet) {
	m.opts.Assume = condition.Assumptions{}
	fs.Func("assume", "state what the image cannot say about the machine that boots it, for Condition*= verdicts and the generators that read it: `KEY=VALUE` (virtualization=amazon, memory=16G, cpus=4, kernel-command-line=..., architecture=arm64, first-boot=no, datasource=Ec2 (cloud-init's), ...); repeatable", m.opts.Assume.Set)
	fs.Func("systemd-version", "model systemd `N` (e.g. 257) instead of the version the image ships", func(v string) error {
		info, err := sdversion.Override(v)
		if err != nil {
			return err
		}
		m.opts.SystemdVersion = info
		return nil
	})
}

// diskFlags choose how a disk image target is read (and, --platform,
// which image of a multi-arch container image).
type diskFlags struct {
	partition    int
	backing      string
	platform     string
	allowCorrupt bool
}

func (d *diskFlags) register(fs *flag.FlagSet) {
	fs.Func("partition", "partition `N`umber of a disk image holding the root (default: find the one with os-release)", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("want a partition number, 1 or more")
		}
		d.partition = n
		return nil
	})
	fs.StringVar(&d.backing, "backing", "", "backing file of a qcow2 overlay or parent of a VHD/VHDX differencing disk (refused without it)")
	fs.StringVar(&d.platform, "platform", "", "`os/arch[/variant]` of the image to audit in a multi-arch container image (default: the host's)")
	fs.BoolVar(&d.allowCorrupt, "allow-corrupt", false, "read on past structures that fail their checksums, reporting each as an image-corrupt finding (a forensic look at a damaged image; without it a mismatch is exit 2)")
}

func (a *auditFlags) register(fs *flag.FlagSet) {
	a.policyFlags.register(fs)
	fs.StringVar(&a.failOn, "fail-on", "high", "lowest severity that makes the exit code 1: info, low, medium, high, critical")
	a.disk.register(fs)
	a.model.register(fs)
}

// auditor validates the shared flags and builds the auditor.
func (a *auditFlags) auditor() (*audit.Auditor, finding.Severity, error) {
	failOn, err := finding.ParseSeverity(a.failOn)
	if err != nil {
		return nil, 0, fmt.Errorf("--fail-on: %w", err)
	}
	cfg, err := a.config()
	if err != nil {
		return nil, 0, err
	}
	cfg.Model = a.model.opts
	cfg.FactsOnly = a.factsOnly
	aud, err := audit.New(cfg)
	if err != nil {
		return nil, 0, err
	}
	return aud, failOn, nil
}

// pendingAuditor is an auditor being built on another goroutine (see
// buildAuditor).
type pendingAuditor struct {
	name  chan string
	ready chan struct{} // closed once aud, sev and err are set
	aud   *audit.Auditor
	sev   finding.Severity
	err   error
}

// buildAuditor builds the auditor of the flags on another goroutine, then
// prepares its engine for the target name given to target: neither needs
// the image, so both run while the image is opened and modelled.
func buildAuditor(e *env, af *auditFlags) *pendingAuditor {
	p := &pendingAuditor{name: make(chan string, 1), ready: make(chan struct{})}
	go func() {
		p.aud, p.sev, p.err = af.auditor()
		close(p.ready)
		if p.err != nil {
			return
		}
		// An error preparing the engine is the audit's to report; the
		// engine is cached by name for it.
		if name := <-p.name; name != "" {
			_, _ = p.aud.Engine(e.ctx, name)
		}
	}()
	return p
}

// target gives the auditor the target's name, once: its engine is prepared
// for that name as soon as the auditor is built ("" prepares none).
func (p *pendingAuditor) target(name string) { p.name <- name }

// wait returns the auditor as auditor() would, once built; the engine may
// still be in preparation. target must have been called.
func (p *pendingAuditor) wait() (*audit.Auditor, finding.Severity, error) {
	<-p.ready
	return p.aud, p.sev, p.err
}

// ruleMeta tells report writers what the catalog knows of each rule.
func ruleMeta(aud *audit.Auditor) map[string]report.RuleMeta {
	m := map[string]report.RuleMeta{}
	for _, r := range aud.Rules() {
		m[r.ID] = report.RuleMeta{Title: r.Title, Rationale: r.Rationale, HelpURI: docsBase + r.ID + ".md", Severity: r.Level()}
	}
	return m
}

// openTarget opens the one positional TARGET, or the embedded default.
func openTarget(e *env, pos []string, d diskFlags) (*target.Image, error) {
	// Without a TARGET, the embedded DLAMI-like image is audited; reports
	// name it as their target.
	spec := target.DefaultTarget
	switch len(pos) {
	case 0:
	case 1:
		spec = pos[0]
	default:
		return nil, fmt.Errorf("one TARGET expected, got %d", len(pos))
	}
	return openSpec(e, spec, d)
}

// openSpec opens one target and prints on stderr each reason the tree read
// may not be the state the image boots with (a dirty XFS log).
func openSpec(e *env, spec string, d diskFlags) (*target.Image, error) {
	im, err := target.Open(e.ctx, spec, targetOptions(e, d))
	if err != nil {
		return nil, err
	}
	if err := checkImageRoot(e, im); err != nil {
		im.Close()
		return nil, err
	}
	for _, w := range im.Warnings {
		fmt.Fprintf(e.stderr, "amilint: warning: %s: %s\n", im.Name, w)
	}
	return im, nil
}

// errNotImageRoot reports a target with neither /etc nor a unit directory:
// the wrong directory (an image's parent, a home directory), whose units
// and facts would otherwise be an empty list and exit 0.
var errNotImageRoot = errors.New("not an image root: no /etc and no unit directory (/etc/systemd/system, /usr/lib/systemd/system, /lib/systemd/system); give the directory that holds the image's etc/ and usr/")

// checkImageRoot refuses a target that is no image root at all, and warns
// about one without /etc (a /usr-only image, or a half-unpacked one): its
// enablement links, masks and configuration are not there, and every
// command reads the units as shipped.
func checkImageRoot(e *env, im *target.Image) error {
	has := func(name string) bool {
		fi, err := im.FS.Stat(name)
		return err == nil && fi.IsDir()
	}
	if has("etc") {
		return nil
	}
	if !has("usr/lib/systemd/system") && !has("lib/systemd/system") {
		return fmt.Errorf("%s: %w", im.Name, errNotImageRoot)
	}
	im.Warnings = append(im.Warnings, "no /etc: the image's enablement links, masks and configuration are missing; units are read as shipped in /usr")
	return nil
}

// warnCorrupt prints on stderr each structure of im that failed its
// checksum and was read as stored (--allow-corrupt), once everything is
// read.
func warnCorrupt(e *env, im *target.Image) {
	for _, line := range im.Corruption() {
		fmt.Fprintf(e.stderr, "amilint: warning: %s (read as stored: --allow-corrupt)\n", line)
	}
}

// targetOptions are the options of target.Open, with a progress line on
// stderr for remote snapshots when stderr is a terminal.
func targetOptions(e *env, d diskFlags) target.Options {
	opt := target.Options{Partition: d.partition, Backing: d.backing, Stdin: os.Stdin, Platform: d.platform, AllowCorrupt: d.allowCorrupt}
	if report.IsTerminal(e.stderr) {
		opt.Progress = func(fetched, total int64) {
			fmt.Fprintf(e.stderr, "\rfetched %d MiB of the image's %d MiB", fetched>>20, total>>20)
		}
	}
	return opt
}

// output returns where the report goes: stdout, or a file. A regular
// file (or a new one) is written beside itself and renamed into place by
// Commit once the report is whole, so that a CI gate never reads half a
// report from a run that failed or was killed while writing; links to it
// are followed, as a shell's redirection follows them. Anything else
// (/dev/stdout, a FIFO) is written as it is.
func output(e *env, path string) (*reportOut, error) {
	if path == "" || path == "-" {
		return &reportOut{w: e.stdout}, nil
	}
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() {
		f, err := os.Create(path)
		if err != nil {
			return nil, fmt.Errorf("create output: %w", err)
		}
		return &reportOut{w: f, f: f}, nil
	}
	dst := path
	if real, err := filepath.EvalSymlinks(path); err == nil {
		dst = real
	}
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(dst); err == nil {
		mode = fi.Mode().Perm()
	}
	f, err := createTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".*")
	if err != nil {
		// A file the user may write in a directory they may not (a log
		// directory, say): written in place, as before.
		f, err := os.Create(path)
		if err != nil {
			return nil, fmt.Errorf("create output: %w", err)
		}
		return &reportOut{w: f, f: f}, nil
	}
	return &reportOut{w: f, f: f, dst: dst, mode: mode, path: path}, nil
}

// createTemp is os.CreateTemp; tests make it fail.
var createTemp = os.CreateTemp

// reportOut is where a report is written.
type reportOut struct {
	w    io.Writer
	f    *os.File    // nil for stdout
	dst  string      // set when f is a temporary file to rename to dst
	mode fs.FileMode // of the file at dst
	path string      // as the user gave it
}

func (o *reportOut) Write(p []byte) (int, error) { return o.w.Write(p) }

// Commit ends a report written whole: the file is closed and, written
// beside its destination, renamed into place.
func (o *reportOut) Commit() error {
	if o.f == nil {
		return nil
	}
	if o.dst == "" {
		return o.f.Close()
	}
	err := o.f.Chmod(o.mode)
	if cerr := o.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(o.f.Name(), o.dst)
	}
	if err != nil {
		os.Remove(o.f.Name())
		return fmt.Errorf("write output %s: %w", o.path, err)
	}
	return nil
}

// Discard drops a report that could not be written whole: the file at
// the destination stays as it was.
func (o *reportOut) Discard() {
	if o.f == nil {
		return
	}
	o.f.Close()
	if o.dst != "" {
		os.Remove(o.f.Name())
	}
}

// runScan implements `amilint scan [TARGET]`: facts → policies → findings.
func runScan(e *env, args []string) int {
	fs := newFlags(e, "scan")
	var af auditFlags
	af.register(fs)
	format := fs.String("o", "text", "output format: "+strings.Join(report.Formats, ", "))
	out := fs.String("output", "", "write the report to this file instead of stdout")
	pos, err := parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return usageOf(e, fs, "amilint scan [TARGET] [-o FORMAT] [--fail-on SEVERITY] [--profile NAME] [--trait NAME] [--rules DIR] [--policy DIR] [--data FILE] [--waivers FILE]")
	}
	if err != nil {
		return fail(e, "scan", err)
	}
	if _, err := report.Get(*format); err != nil {
		return fail(e, "scan", err)
	}
	// The auditor (the rule catalog, then the policies' engine for the
	// target) is built while the image is opened and modelled; its errors
	// still come first.
	built := buildAuditor(e, &af)
	im, err := openTarget(e, pos, af.disk)
	if err != nil {
		built.target("")
		if _, _, aerr := built.wait(); aerr != nil {
			return fail(e, "scan", aerr)
		}
		return fail(e, "scan", err)
	}
	defer im.Close()
	// The engine for the target's name is prepared while the image is
	// modelled, not after.
	built.target(im.Name)
	fsys := im.FS.Memo() // the model and the facts share what they read
	inv, modelErr := audit.Model(fsys, af.model.opts.ForFacts())
	aud, failOn, err := built.wait()
	if err != nil {
		return fail(e, "scan", err)
	}
	if modelErr != nil {
		return fail(e, "scan", modelErr)
	}
	w, err := report.Get(*format, report.WithFailOn(failOn), report.WithRules(ruleMeta(aud)), report.WithVersion(version()))
	if err != nil {
		return fail(e, "scan", err)
	}
	res, err := aud.AuditModelled(e.ctx, fsys, inv, finding.Target{Name: im.Name, Kind: im.Kind})
	if err != nil {
		return fail(e, "scan", err)
	}
	res.Report.Generated = generatedAt()
	warnCorrupt(e, im)
	dst, err := output(e, *out)
	if err != nil {
		return fail(e, "scan", err)
	}
	if err := w.Write(dst, res.Report); err != nil {
		dst.Discard()
		return fail(e, "scan", err)
	}
	if err := dst.Commit(); err != nil {
		return fail(e, "scan", err)
	}
	return finding.ExitCode(res.Report.Findings, failOn)
}

// runFacts implements `amilint facts [TARGET]`: the exact policy input.
func runFacts(e *env, args []string) int {
	fs := newFlags(e, "facts")
	af := auditFlags{factsOnly: true}
	af.register(fs)
	pos, err := parse(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return usageOf(e, fs, "amilint facts [TARGET] [--rules DIR]")
	}
	if err != nil {
		return fail(e, "facts", err)
	}
	// The auditor (the rule catalog: which configuration files the facts
	// read) is built while the image is opened and modelled; its errors
	// still come first.
	built := buildAuditor(e, &af)
	im, err := openTarget(e, pos, af.disk)
	if err != nil {
		built.target("")
		if _, _, aerr := built.wait(); aerr != nil {
			return fail(e, "facts", aerr)
		}
		return fail(e, "facts", err)
	}
	defer im.Close()
	fsys := im.FS.Memo() // the model and the facts share what they read
	// facts does nothing else while the image is modelled: the units are
	// read ahead on the core that leaves idle.
	opts := af.model.opts.ForFacts()
	opts.ReadAhead = true
	inv, modelErr := audit.Model(fsys, opts)
	built.target("")
	aud, _, err := built.wait()
	if err != nil {
		return fail(e, "facts", err)
	}
	if modelErr != nil {
		return fail(e, "facts", modelErr)
	}
	doc, err := aud.Facts(fsys, inv)
	if err != nil {
		return fail(e, "facts", err)
	}
	warnCorrupt(e, im)
	if err := report.WriteFacts(e.stdout, doc); err != nil {
		return fail(e, "facts", err)
	}
	return ExitOK
}
