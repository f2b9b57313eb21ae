// Package audit runs the static pipeline over one image view: the unit
// model (install states and the boot transaction) → the facts document →
// the policies → waivers → findings. It owns the joining of those steps and
// nothing else; it reads the image only through rootfs and never writes.
package audit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/audit/policy"
	"github.com/amilint/amilint/internal/audit/waiver"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/boot"
	"github.com/amilint/amilint/internal/systemd/condition"
	"github.com/amilint/amilint/internal/systemd/install"
	"github.com/amilint/amilint/internal/systemd/security"
	"github.com/amilint/amilint/internal/systemd/unit"
	"github.com/amilint/amilint/internal/systemd/version"
	"github.com/amilint/amilint/rules"
)

// Config says which knowledge and decisions an Auditor applies.
type Config struct {
	// RulesDirs add user rule directories (--rules) over the embedded catalog.
	RulesDirs []string
	// PolicyDirs add user Rego policy directories (--policy).
	PolicyDirs []string
	// DataFiles add user data (--data), seen by policies as data.user.
	DataFiles []string
	// Profile selects a role profile ("" for none).
	Profile string
	// Traits say what kind of image this is (--trait, e.g. immutable); the
	// selected profile's traits are added to them.
	Traits []string
	// Waivers, when set, waive matching findings.
	Waivers *waiver.File
	// Now is the date waivers expire against; zero means time.Now.
	Now time.Time
	// Params are more policy parameters (data.params), such as a live
	// audit's thresholds under "live".
	Params map[string]any
	// Model tunes the unit model of every image audited.
	Model ModelOptions
	// PolicyTimeout bounds each policy evaluation (--policy-timeout); 0
	// is no bound.
	PolicyTimeout time.Duration
	// PolicyMemory bounds the heap each policy evaluation may grow by, in
	// bytes (--policy-memory); 0 is no bound, policy.AutoMemory the
	// machine's default.
	PolicyMemory uint64
	// FactsOnly says the auditor only builds facts documents (the facts
	// command): New does not start compiling the policies, which would
	// take a core from the unit model for nothing; they are compiled the
	// first time an engine is asked for.
	FactsOnly bool
	// Capabilities are the OPA capabilities policies are compiled with
	// (--policy-capabilities); nil is the sandbox, policy.Sandbox.
	Capabilities *ast.Capabilities
}

// ModelOptions tune the unit model of an image.
type ModelOptions struct {
	// SystemdVersion, when its Major is set, is the systemd version to
	// model instead of the one the image ships (--systemd-version).
	SystemdVersion version.Info
	// SecurityPolicy weighs the services' exposure (--security-policy);
	// nil uses the image's own systemd-analyze-security.policy, if any.
	SecurityPolicy *security.Policy
	// Assume states what the image cannot say about the machine that
	// boots it (--assume KEY=VALUE), for Condition*= verdicts.
	Assume condition.Assumptions
	// ReadAhead reads the units ahead (boot.Graph.Prepare) on the core
	// that enablement leaves idle while the boot transaction is computed.
	// It is for a caller doing nothing else meanwhile: where another task
	// (preparing the policies' engine) takes that core, it only adds work.
	ReadAhead bool
	// Facts says that the caller builds the facts of the model
	// (Auditor.Facts; Audit sets it). On a remote view (rootfs.FS.Remote)
	// the model then looks up, beside each unit's conditions, the paths
	// the facts will resolve. Without it, the model reads nothing it does
	// not need itself: damage met in any read is kept (rootfs.Damaged), and
	// a command that only lists the units must not fail on a file that
	// only the facts would have read.
	Facts bool
}

// ForFacts returns o with Facts set: the options of a model whose facts
// the caller builds next.
func (o ModelOptions) ForFacts() ModelOptions {
	o.Facts = true
	return o
}

// Auditor holds the compiled policies and loaded rules; it is reused for
// every image a command audits (diff audits two).
type Auditor struct {
	cfg      Config
	rules    []rules.Rule
	requests []facts.ConfigRequest
	ruleData map[string]any
	profData map[string]any
	traits   []string

	mu      sync.Mutex
	engines map[string]*policy.Engine // prepared per target name

	// compile is the policies' compilation, started by New.
	compile *compilation
}

// compilation is the policies compiled once for every engine of an
// auditor (the target name and the query are the engine's, the policies
// are not). It needs neither the rule catalog nor an image, so New starts
// it first, on another core.
type compilation struct {
	cfg      policy.Config
	started  atomic.Bool // begin was called
	done     chan struct{}
	policies *policy.Compiled
	err      error
}

// compile returns the policies' compilation of cfg, not yet started.
func compile(cfg Config) *compilation {
	return &compilation{cfg: policy.Config{PolicyDirs: cfg.PolicyDirs, Capabilities: cfg.Capabilities}, done: make(chan struct{})}
}

// begin starts the compilation on another goroutine, once.
func (c *compilation) begin() {
	if c.started.CompareAndSwap(false, true) {
		go func() {
			defer close(c.done)
			c.policies, c.err = policy.Load(c.cfg)
		}()
	}
}

// New loads the rule catalog and profiles. Policies are compiled per
// target name by Audit, since the target is a policy parameter; see engine.
func New(cfg Config) (*Auditor, error) {
	policies := compile(cfg)
	if !cfg.FactsOnly {
		policies.begin()
	}
	rs, err := rules.LoadAll(cfg.RulesDirs...)
	if err != nil {
		return nil, fmt.Errorf("load rules: %w", err)
	}
	ps, err := rules.LoadAllProfiles(cfg.RulesDirs...)
	if err != nil {
		return nil, fmt.Errorf("load profiles: %w", err)
	}
	if err := rules.CheckTunings(rs, ps); err != nil {
		return nil, fmt.Errorf("load profiles: %w", err)
	}
	// A trait no rule or profile knows would switch nothing on, and a typo
	// (imutable) would silently switch a rule off: refuse it.
	known := map[string]bool{}
	for _, r := range rs {
		for _, t := range r.Traits {
			known[t] = true
		}
	}
	for _, p := range ps {
		for _, t := range p.Traits {
			known[t] = true
		}
	}
	traits := slices.Clone(cfg.Traits)
	for _, t := range traits {
		if !rules.ValidTrait(t) {
			return nil, fmt.Errorf("trait %q: want a slug like immutable", t)
		}
		if !known[t] {
			return nil, fmt.Errorf("trait %q: no rule or profile uses it (known: %s)", t, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
		}
	}
	if cfg.Profile != "" {
		i := slices.IndexFunc(ps, func(p rules.Profile) bool { return p.Name == cfg.Profile })
		if i < 0 {
			names := make([]string, len(ps))
			for i, p := range ps {
				names[i] = p.Name
			}
			return nil, fmt.Errorf("load profiles: no profile %q (have %v)", cfg.Profile, names)
		}
		traits = append(traits, ps[i].Traits...)
	}
	slices.Sort(traits)
	traits = slices.Compact(traits)
	rd, err := rules.Data(rs)
	if err != nil {
		return nil, fmt.Errorf("load rules: %w", err)
	}
	pd, err := rules.ProfilesData(ps)
	if err != nil {
		return nil, fmt.Errorf("load profiles: %w", err)
	}
	a := &Auditor{cfg: cfg, rules: rs, ruleData: rd, profData: pd, traits: traits, compile: policies}
	for _, c := range rules.ConfigRequests(rs) {
		a.requests = append(a.requests, facts.ConfigRequest{Path: c.Path, Format: c.Format})
	}
	return a, nil
}

// Rules returns the loaded catalog.
func (a *Auditor) Rules() []rules.Rule { return a.rules }

// ModelOptions returns the options Audit models images with.
func (a *Auditor) ModelOptions() ModelOptions { return a.cfg.Model }

// Engine compiles the policies for a target name once: fix and the live
// exporter audit the same target again and reuse it.
func (a *Auditor) Engine(ctx context.Context, targetName string) (*policy.Engine, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if e := a.engines[targetName]; e != nil {
		return e, nil
	}
	e, err := a.EngineQuery(ctx, targetName, "")
	if err != nil {
		return nil, err
	}
	if a.engines == nil {
		a.engines = map[string]*policy.Engine{}
	}
	a.engines[targetName] = e
	return e, nil
}

// EngineQuery is Engine evaluating query instead of the entry point
// (policy.Config.Query); "" is the entry point.
func (a *Auditor) EngineQuery(ctx context.Context, targetName, query string) (*policy.Engine, error) {
	cfg := a.PolicyConfig(targetName)
	cfg.Query = query
	return a.engineOf(ctx, cfg)
}

// EngineWithout is Engine evaluating the findings of every rule family
// but those named (policy.Config.Without) instead of the entry point.
func (a *Auditor) EngineWithout(ctx context.Context, targetName string, families ...string) (*policy.Engine, error) {
	cfg := a.PolicyConfig(targetName)
	cfg.Without = families
	return a.engineOf(ctx, cfg)
}

// engineOf is the engine of cfg over the compiled policies.
func (a *Auditor) engineOf(ctx context.Context, cfg policy.Config) (*policy.Engine, error) {
	p, err := a.compiled()
	if err != nil {
		return nil, err
	}
	return p.Engine(ctx, cfg)
}

// compiled waits for the policies' compilation New started (or starts it,
// for a FactsOnly auditor).
func (a *Auditor) compiled() (*policy.Compiled, error) {
	a.compile.begin()
	<-a.compile.done
	return a.compile.policies, a.compile.err
}

// PolicyConfig is what the policies are compiled with for a target name:
// the user's policies and data, the catalog, the profiles and parameters.
func (a *Auditor) PolicyConfig(targetName string) policy.Config {
	return policy.Config{
		PolicyDirs:   a.cfg.PolicyDirs,
		DataFiles:    a.cfg.DataFiles,
		Rules:        a.ruleData,
		Profiles:     a.profData,
		Profile:      a.cfg.Profile,
		Target:       targetName,
		Traits:       a.traits,
		Params:       a.cfg.Params,
		Timeout:      a.cfg.PolicyTimeout,
		Memory:       a.cfg.PolicyMemory,
		Capabilities: a.cfg.Capabilities,
	}
}

// Inventory is the unit model of one image: list-unit-files states, the boot
// transaction and the loaded units, joined per unit name.
type Inventory struct {
	Files     []install.UnitFile
	Boot      *boot.Boot
	Graph     *boot.Graph
	Presets   map[string]install.PresetAction
	FirstBoot bool
	// Systemd is the systemd version modelled: the image's, or the
	// override of ModelOptions.
	Systemd version.Info
	// Conditions decides the units' Condition*= and Assert*= settings.
	Conditions *condition.Env
	// Units is the join, sorted by name: every unit file, plus every unit
	// that starts or is activated without a file of its own name
	// (instances such as getty@tty1.service).
	Units []facts.UnitInput
}

// Version is the systemd version to model fsys as: the override, or the
// version the image ships.
func (o ModelOptions) Version(fsys *rootfs.FS) (version.Info, error) {
	if o.SystemdVersion.Major != 0 {
		return o.SystemdVersion, nil
	}
	sv, err := version.Detect(fsys)
	if err != nil {
		return sv, fmt.Errorf("read systemd version: %w", err)
	}
	return sv, nil
}

// ErrBootTooDeep is returned for an image whose boot tree is so deep that
// the units' chains from default.target, which the facts and reports carry
// whole, would not fit in memory: they grow with the square of its depth (a
// chain of units each starting the next: 1,000 of them make half a million
// edges, 5,000 twelve million).
var ErrBootTooDeep = errors.New("boot tree too deep to audit")

// maxChainEdges bounds the edges of all the chains of an image of n units:
// 32 a unit, at least 65,536. Real images have 2 to 3 a unit (the Debian
// and DLAMI roots: 443 for 252 units, 487 for 153).
func maxChainEdges(n int) int { return max(1<<16, 32*n) }

// ErrTooManyDirectives is returned for an image whose units' directives,
// which the facts carry for every name of a unit, would not fit in memory:
// an alias carries its unit's, so a unit with n aliases (n Alias= lines and
// n links) makes n² of them.
var ErrTooManyDirectives = errors.New("too many directives to audit")

// maxDirectives bounds the directives of all the names of an image of n
// units: 64 a name, at least 262,144. Real images have 8 to 12 a name (the
// Debian root: 2,649 for 252 names, the DLAMI root 1,269 for 153).
func maxDirectives(n int) int { return max(1<<18, 64*n) }

// Model computes the inventory of an image.
func Model(fsys *rootfs.FS, opts ModelOptions) (*Inventory, error) {
	// Enablement and the boot load walk the same directories and read the
	// same unit files: ask the image once (a view already remembering is
	// shared as it is, so a caller's facts reuse the answers too).
	fsys = fsys.Memo()
	// Enablement, the boot transaction and the machine the image boots are
	// independent readers of the same view (safe for concurrent use, as
	// every image source is): on a remote image their reads overlap, on a
	// local one their parsing runs on two cores. Their errors are reported
	// in the order the steps are listed below.
	var (
		first  bool
		env    *condition.Env
		envErr error
		wg     sync.WaitGroup
	)
	wg.Go(func() {
		first = install.FirstBoot(fsys)
		env, envErr = condition.NewEnv(fsys, first, opts.Assume)
	})
	sv, err := opts.Version(fsys)
	if err != nil {
		wg.Wait()
		return nil, err
	}
	var (
		files          []install.UnitFile
		ps             *install.Presets
		g              *boot.Graph
		b              *boot.Boot
		listErr, psErr error
		loadErr        error
		// Once the files are listed, the units are read ahead (Prepare,
		// with ReadAhead) on the core the enablement leaves idle, for
		// the boot transaction and the loading below, until that
		// loading is done.
		graph     = make(chan *boot.Graph, 1)
		preparing sync.WaitGroup
		prepared  atomic.Bool
	)
	defer func() {
		prepared.Store(true)
		preparing.Wait()
	}()
	wg.Go(func() {
		if files, listErr = install.List(fsys, sv.Major); listErr != nil {
			return
		}
		if fsys.IsRemote() && slices.ContainsFunc(files, func(f install.UnitFile) bool { return unit.Type(f.Name) == "timer" }) {
			// A timer's calendar specs need the image's local time
			// zone, which the boot model reads when it loads the
			// timer: on a remote image a chain of round trips of its
			// own, begun late. Read now, beside the loading, it is in
			// the view's caches when the model asks.
			wg.Go(func() { unit.ImageZones(fsys) })
		}
		if opts.ReadAhead {
			preparing.Go(func() {
				if g := <-graph; g != nil {
					names := make([]string, len(files))
					for i, f := range files {
						names[i] = f.Name
					}
					g.Prepare(names, prepared.Load)
				}
			})
		}
		// Query the presets for the files just listed: install.Preset
		// would list every unit file of the image a second time.
		ps, psErr = install.LoadPresets(fsys, sv.Major)
	})
	wg.Go(func() {
		// The generators read the kernel command line the user
		// assumes, else the image's boot loader's, and the
		// virtualization the user assumes.
		var bo boot.Options
		bo.CmdLine, bo.CmdLineSet = opts.Assume.KernelCommandLine()
		// getty-generator reads the virtualization, cloud-init-generator
		// the cloud the machine offers.
		bo.Machine.Virtualization, _ = opts.Assume.Virtualization()
		bo.Machine.Datasource, _ = opts.Assume.Datasource()
		bo.Machine.Architecture, _ = opts.Assume.Architecture()
		g, loadErr = boot.LoadWith(fsys, sv.Major, bo)
		if loadErr != nil {
			graph <- nil
			return
		}
		graph <- g
		b = g.Boot()
	})
	wg.Wait()
	switch {
	case listErr != nil:
		return nil, fmt.Errorf("list unit files: %w", listErr)
	case psErr != nil:
		return nil, fmt.Errorf("read presets: %w", psErr)
	case loadErr != nil:
		return nil, fmt.Errorf("load units: %w", loadErr)
	case envErr != nil:
		return nil, fmt.Errorf("read the machine the image boots: %w", envErr)
	}
	env.Version = sv.Major
	presets := make(map[string]install.PresetAction, len(files))
	for _, f := range files {
		presets[f.Name] = ps.Query(f.Name)
	}
	inv := &Inventory{Files: files, Boot: b, Graph: g, Presets: presets, FirstBoot: first, Systemd: sv, Conditions: env}
	// The units: every unit file, then what the boot transaction starts
	// or activates without one.
	ins := make([]facts.UnitInput, 0, len(files)+len(b.Start)+len(b.Activated))
	seen := make(map[string]bool, cap(ins))
	for _, f := range files {
		seen[f.Name] = true
		ins = append(ins, facts.UnitInput{Name: f.Name, State: string(f.State), Path: f.Path, Fragment: f.Fragment, DropIns: f.DropIns, Aliases: f.Aliases})
	}
	for _, name := range slices.Concat(b.Start, b.Activated) {
		if !seen[name] {
			seen[name] = true
			ins = append(ins, facts.UnitInput{Name: name})
		}
	}
	inv.Units = ins
	// Every unit carries its chain from default.target: refuse a tree
	// whose chains together would not fit, before building one.
	names := make([]string, len(ins))
	for i := range ins {
		names[i] = ins[i].Name
	}
	if n, most := b.ChainEdges(names), maxChainEdges(len(ins)); n > most {
		return nil, fmt.Errorf("%w: the units' boot chains hold %d edges in all, over the %d amilint builds for %d units", ErrBootTooDeep, n, most, len(ins))
	}
	scorer, scorerErr := inv.scorer(fsys, opts)
	// Loading is systemd's, one name after another: an alias seen first
	// decides what a later name gets. A loaded unit does not change, and
	// what only reads it (its conditions, which test paths of the image,
	// and its exposure) is done beside the loading of the next ones, then
	// on every core.
	loaded := make([]*boot.Unit, len(ins))
	errs := make([]error, len(ins))
	// On a remote image, the paths the facts will resolve for a unit (its
	// executables) are looked up here too when the facts are to be built,
	// beside the conditions' paths, instead of in round trips of their own
	// after the model.
	remote := fsys.IsRemote()
	prefetch := remote && opts.Facts
	work := func(i int) {
		in, u := &ins[i], loaded[i]
		if u != nil {
			sources := make([][]*unit.Option, len(u.Sources))
			for i, s := range u.Sources {
				sources[i] = s.Options
			}
			in.Conditions = env.Unit(u.Name, sources)
		}
		if prefetch {
			facts.Prefetch(fsys, in)
		}
		if scorer != nil {
			errs[i] = assess(scorer, in, u)
		}
	}
	jobs := make(chan int, len(ins))
	workers := runtime.GOMAXPROCS(0) - 1
	if remote {
		// The paths tested and looked up are round trips, many of them
		// waiting for the same block: on the Debian root as an AMI, 64
		// workers made 12 dependent rounds, 16 made 13, one per core 14.
		workers = 4 * rootfs.InFlight
	}
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				work(i)
			}
		})
	}
	// Every name carries its unit's directives, an alias's too: a unit of
	// a thousand Alias= lines and a thousand alias links makes a million.
	// Counted as the units load, refused before the facts render one.
	directives, mostDirectives := 0, maxDirectives(len(ins))
	var tooMany error
	for i := range ins {
		in := &ins[i]
		u := g.Unit(in.Name)
		if u != nil {
			if directives += len(u.Options); directives > mostDirectives {
				tooMany = fmt.Errorf("%w: the units' directives, each alias carrying its unit's, number over %d, the most amilint builds for %d units", ErrTooManyDirectives, mostDirectives, len(ins))
				break
			}
			in.Options = u.Options
			if in.DropIns == nil {
				in.DropIns = u.DropIns
			}
		}
		in.StartsAtBoot = b.StartsAtBoot(in.Name)
		in.Chain = b.Chain(in.Name)
		in.ActivatedBy = b.ActivatedBy[in.Name]
		in.Preset = string(presets[in.Name])
		loaded[i] = u
		jobs <- i
	}
	close(jobs)
	prepared.Store(true)
	for i := range jobs {
		work(i)
	}
	wg.Wait()
	if tooMany != nil {
		return nil, tooMany
	}
	if scorerErr != nil {
		return nil, fmt.Errorf("assess services: %w", scorerErr)
	}
	// The first failure in the order of the names, as the units are sorted.
	var failure error
	failed := ""
	for i, err := range errs {
		if err != nil && (failure == nil || ins[i].Name < failed) {
			failure, failed = err, ins[i].Name
		}
	}
	if failure != nil {
		return nil, fmt.Errorf("assess services: %w", failure)
	}
	slices.SortFunc(inv.Units, func(x, y facts.UnitInput) int { return strings.Compare(x.Name, y.Name) })
	return inv, nil
}

// BootFacts is the boot transaction of an inventory as the facts document
// carries it.
func (inv *Inventory) BootFacts() facts.Boot {
	b := inv.Boot
	fb := facts.Boot{DefaultTarget: b.Default, Target: b.Root, CommandLineUnit: b.CmdLineUnit, Fallback: b.Fallback}
	if b.Fallback != "" {
		fb.Target = boot.RescueTarget
	}
	if f := b.Failure; f != nil {
		fb.Failed, fb.FailedUnit, fb.FailedChain = f.Reason, f.Unit, f.Chain
	}
	for _, c := range b.Cycles {
		fb.OrderingCycles = append(fb.OrderingCycles, facts.OrderingCycle{Units: c.Units, Deletable: c.Deletable, Deleted: c.Deleted})
	}
	fb.MayNotStart = b.Uncertain
	return fb
}

// ErrNoUnits reports an image with no systemd unit at all: not an image of
// a systemd system (or not an image root), which no rule can judge.
var ErrNoUnits = errors.New("no systemd unit files: not the root of a systemd image")

// Facts builds the policy input document of an inventory. An image whose
// reader met damage on the way (a structure failing its checksum, an
// unreadable block) fails here, even where the reading itself went on as
// systemd's would (an unreadable directory taken as absent): a damaged
// image is not audited as an intact one.
func (a *Auditor) Facts(fsys *rootfs.FS, inv *Inventory) (*facts.Document, error) {
	return a.facts(fsys, inv, false)
}

// facts is Facts, without the services' security checks when omitChecks.
func (a *Auditor) facts(fsys *rootfs.FS, inv *Inventory, omitChecks bool) (*facts.Document, error) {
	machine := inv.Conditions.Host
	doc, err := facts.Build(fsys, inv.Units, facts.Options{ConfigFiles: a.requests, Systemd: inv.Systemd, Boot: inv.BootFacts(), Machine: machine, OmitChecks: omitChecks})
	if err != nil {
		return nil, fmt.Errorf("build facts: %w", err)
	}
	if err := rootfs.Damaged(fsys); err != nil {
		return nil, fmt.Errorf("read image: %w", err)
	}
	return doc, nil
}

// Result is one image's audit.
type Result struct {
	Inventory *Inventory
	// Facts are the document the policies judged: with the built-in
	// catalog alone, without the services' security checks (Facts builds
	// the whole document).
	Facts  *facts.Document
	Report *finding.Report
}

// Document runs the pipeline over fsys, the target named name, up to the
// policies: the inventory and the facts document they judge, with every
// check that refuses an input (a damaged image, no systemd at all).
func (a *Auditor) Document(fsys *rootfs.FS, name string) (*Inventory, *facts.Document, error) {
	fsys = fsys.Memo() // one view remembering for the model and the facts
	inv, err := Model(fsys, a.cfg.Model.ForFacts())
	if err != nil {
		return nil, nil, err
	}
	doc, err := a.document(fsys, name, inv, false)
	if err != nil {
		return nil, nil, err
	}
	return inv, doc, nil
}

// document is Document for an image already modelled on the view fsys;
// without the services' security checks when omitChecks.
func (a *Auditor) document(fsys *rootfs.FS, name string, inv *Inventory, omitChecks bool) (*facts.Document, error) {
	if err := rootfs.Damaged(fsys); err != nil {
		return nil, fmt.Errorf("read image: %w", err)
	}
	// An image whose boot transaction systemd cannot queue is a critical
	// finding (boot-transaction-fails), not a failure of the audit. A tree
	// with no unit file at all is no systemd image: auditing it would pass
	// it with no findings, and a wrong input never yields 0.
	if inv.Boot.Err != nil && len(inv.Files) == 0 {
		return nil, fmt.Errorf("model boot of %s: %w", name, ErrNoUnits)
	}
	return a.facts(fsys, inv, omitChecks)
}

// prepare starts preparing the engine for the target name: it needs
// nothing of the image, so it runs on another core while the image is read
// and modelled (a scan of the Debian root spends about a fifth of its CPU
// time on each). The function returned waits for it.
func (a *Auditor) prepare(ctx context.Context, name string) func() (*policy.Engine, error) {
	var eng *policy.Engine
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		eng, err = a.Engine(ctx, name)
	}()
	return func() (*policy.Engine, error) {
		<-done
		return eng, err
	}
}

// Audit runs the whole pipeline over fsys, naming the target t.
func (a *Auditor) Audit(ctx context.Context, fsys *rootfs.FS, t finding.Target) (*Result, error) {
	prepared := a.prepare(ctx, t.Name)
	fsys = fsys.Memo() // one view remembering for the model and the facts
	inv, err := Model(fsys, a.cfg.Model.ForFacts())
	if err != nil {
		prepared()
		return nil, err
	}
	return a.audit(ctx, fsys, inv, t, prepared)
}

// AuditModelled is Audit of an image the caller has modelled already
// (Model(fsys, a.ModelOptions())): a command can read and model the image
// while the auditor is still being built.
func (a *Auditor) AuditModelled(ctx context.Context, fsys *rootfs.FS, inv *Inventory, t finding.Target) (*Result, error) {
	return a.audit(ctx, fsys.Memo(), inv, t, a.prepare(ctx, t.Name))
}

// audit is the pipeline after the model: the facts, the policies (whose
// engine prepared returns), waivers.
func (a *Auditor) audit(ctx context.Context, fsys *rootfs.FS, inv *Inventory, t finding.Target, prepared func() (*policy.Engine, error)) (*Result, error) {
	// The built-in catalog alone never reads the services' 81 security
	// checks (its engine is not given them): they are not built.
	doc, err := a.document(fsys, t.Name, inv, policy.CatalogOnly(a.cfg.PolicyDirs))
	eng, engErr := prepared()
	if err != nil {
		return nil, err
	}
	if engErr != nil {
		return nil, engErr
	}
	if t.OS == "" {
		t.OS = doc.Image.OSRelease["PRETTY_NAME"]
	}
	fs, err := eng.Evaluate(ctx, doc)
	if err != nil {
		return nil, err
	}
	addFragments(fs, doc)
	if a.cfg.Waivers != nil {
		now := a.cfg.Now
		if now.IsZero() {
			now = time.Now()
		}
		fs = a.cfg.Waivers.Apply(fs, t.Name, now)
	}
	return &Result{Inventory: inv, Facts: doc, Report: finding.NewReport(t, fs)}, nil
}

// addFragments records each unit finding's unit file in its evidence
// ("fragment"), so reports can point at the file (SARIF locations).
func addFragments(fs []finding.Finding, doc *facts.Document) {
	for i := range fs {
		u := doc.Units[fs[i].Unit]
		if u == nil || u.Fragment == "" {
			continue
		}
		if _, ok := fs[i].Evidence["fragment"]; ok {
			continue
		}
		if fs[i].Evidence == nil {
			fs[i].Evidence = map[string]any{}
		}
		fs[i].Evidence["fragment"] = u.Fragment
	}
}
