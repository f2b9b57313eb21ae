package live

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// Rule ids of the live findings, decided by the live policy family
// (policies/amilint/rules/live) from the rules' params.
const (
	RuleMemcgZombies      = "live-memcg-zombies"
	RuleUnitCrashLoop     = "live-unit-crashloop"
	RuleContainerPerStart = "live-container-per-restart"
	RuleIRQCoreSaturated  = "live-irq-core-saturated"
	RuleCoreSaturated     = "live-core-saturated"
)

// Policy parameter names under data.params.live, as the live rules'
// params spell them.
const (
	ParamZombies    = "zombie_threshold"
	ParamRestarts   = "restart_threshold"
	ParamSaturation = "saturation"
)

// StaticTTL bounds how long Host reuses the static facts of the root: unit
// files change on package installs and fixes, not between two scrapes.
const StaticTTL = 10 * time.Minute

// Host audits a running host through the same facts, rules and policies
// as a static scan: the static facts of its root filesystem, overlaid with
// the collectors' facts (NewDocument), evaluated by the policy engine.
type Host struct {
	root   string
	aud    *audit.Auditor
	target string // the target name the policies are compiled for
	split  *split // nil with user policies: they may read anything
	live   *Auditor
	cfg    audit.Config
	thresh Thresholds

	mu       sync.Mutex
	fsys     *rootfs.FS
	closeFS  func() error
	static   *facts.Document
	staticAt time.Time
}

// NewHost loads the rules and policies of cfg and prepares the collectors
// of o. A threshold of o left zero is the live rule's param; the effective
// thresholds drive both the collectors and the policies (data.params.live).
func NewHost(ctx context.Context, o Options, cfg audit.Config, targetName string) (*Host, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	a, err := audit.New(cfg)
	if err != nil {
		return nil, err
	}
	params := map[string]map[string]float64{}
	for _, r := range a.Rules() {
		params[r.ID] = r.Params
	}
	pick := func(rule, name string, def float64) float64 {
		if v, ok := params[rule][name]; ok && v > 0 {
			return v
		}
		return def
	}
	if o.ZombieThreshold <= 0 {
		o.ZombieThreshold = int(pick(RuleMemcgZombies, ParamZombies, DefaultZombieThreshold))
	}
	if o.RestartThreshold == 0 {
		o.RestartThreshold = uint32(pick(RuleUnitCrashLoop, ParamRestarts, 3))
	}
	if o.Saturation <= 0 {
		o.Saturation = pick(RuleCoreSaturated, ParamSaturation, 0.95)
	}
	o = o.withDefaults()
	cfg.Params = map[string]any{"live": map[string]any{
		ParamZombies: o.ZombieThreshold, ParamRestarts: o.RestartThreshold, ParamSaturation: o.Saturation,
	}}
	if a, err = audit.New(cfg); err != nil {
		return nil, err
	}
	// The full engine is compiled only when Evaluate needs it (user
	// policies); with the split, EvaluateFull compiles it on first use.
	var sp *split
	if len(cfg.PolicyDirs) > 0 {
		if _, err := a.Engine(ctx, targetName); err != nil {
			return nil, err
		}
	} else {
		sp = &split{}
		if sp.static, err = a.EngineWithout(ctx, targetName, liveFamily); err != nil {
			return nil, err
		}
		if sp.live, err = a.EngineQuery(ctx, targetName, liveQuery); err != nil {
			return nil, err
		}
	}
	la, err := NewAuditor(o)
	if err != nil {
		return nil, err
	}
	return &Host{root: o.Root, aud: a, target: targetName, split: sp, live: la, cfg: cfg,
		thresh: Thresholds{Zombies: o.ZombieThreshold, Restarts: o.RestartThreshold, Saturation: o.Saturation}}, nil
}

// Auditor returns the rules and policies Host applies.
func (h *Host) Auditor() *audit.Auditor { return h.aud }

// Thresholds are the effective thresholds.
func (h *Host) Thresholds() Thresholds { return h.thresh }

// Close closes the systemd connection and the root.
func (h *Host) Close() {
	h.live.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closeFS != nil {
		_ = h.closeFS()
		h.fsys, h.closeFS = nil, nil
	}
}

// Forget drops the cached static facts, so the next audit reads the root
// again (after a fix changed its unit files).
func (h *Host) Forget() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.static = nil
}

// Static returns the static facts of the root, built at most once per
// StaticTTL.
func (h *Host) Static() (*facts.Document, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.static != nil && time.Since(h.staticAt) < StaticTTL {
		return h.static, nil
	}
	if h.fsys == nil {
		src, err := rootfs.OpenDir(h.root)
		if err != nil {
			return nil, fmt.Errorf("open root %s: %w", h.root, err)
		}
		h.fsys, h.closeFS = rootfs.New(src), src.Close
	}
	inv, err := audit.Model(h.fsys, h.aud.ModelOptions().ForFacts())
	if err != nil {
		return nil, fmt.Errorf("root %s: %w", h.root, err)
	}
	doc, err := h.aud.Facts(h.fsys, inv)
	if err != nil {
		return nil, fmt.Errorf("root %s: %w", h.root, err)
	}
	h.static, h.staticAt = doc, time.Now()
	return doc, nil
}

// Audit runs the collectors, builds the live facts document and evaluates
// the policies over it. A collector that failed is joined into the error
// while the document and findings of the others are still returned; a
// document that cannot be built or evaluated returns no document.
func (h *Host) Audit(ctx context.Context) (*Document, []finding.Finding, error) {
	f, cerr := h.live.Audit(ctx)
	if f == nil {
		return nil, nil, cerr
	}
	f.Thresholds = h.thresh
	static, err := h.Static()
	if err != nil {
		return nil, nil, errors.Join(cerr, err)
	}
	doc := NewDocument(static, f)
	fs, err := h.Evaluate(ctx, doc)
	if err != nil {
		return nil, nil, errors.Join(cerr, err)
	}
	return doc, fs, cerr
}

// AuditLive is Audit for an exporter (metrics.AuditFunc): the live facts
// of the document, the findings and the error.
func (h *Host) AuditLive(ctx context.Context) (*Facts, []finding.Finding, error) {
	doc, fs, err := h.Audit(ctx)
	if doc == nil {
		return nil, nil, err
	}
	return doc.Live, fs, err
}

// Evaluate runs the policies over doc and applies the waivers. With the
// shipped policies alone it evaluates the static rule families once per
// static document and overlay (see split), the live family every time;
// the findings are those of EvaluateFull.
func (h *Host) Evaluate(ctx context.Context, doc *Document) ([]finding.Finding, error) {
	if h.split == nil {
		return h.EvaluateFull(ctx, doc)
	}
	fs, err := h.split.evaluate(ctx, doc)
	if err != nil {
		return nil, err
	}
	return h.waive(fs, doc), nil
}

// EvaluateFull runs every policy over the whole of doc and applies the
// waivers: the reference Evaluate must agree with.
func (h *Host) EvaluateFull(ctx context.Context, doc *Document) ([]finding.Finding, error) {
	eng, err := h.aud.Engine(ctx, h.target) // compiled once, then cached by the Auditor
	if err != nil {
		return nil, err
	}
	fs, err := eng.Evaluate(ctx, doc)
	if err != nil {
		return nil, err
	}
	return h.waive(fs, doc), nil
}

// waive applies the configured waivers to fs.
func (h *Host) waive(fs []finding.Finding, doc *Document) []finding.Finding {
	if h.cfg.Waivers != nil {
		now := h.cfg.Now
		if now.IsZero() {
			now = time.Now()
		}
		name := h.root
		if doc.Live != nil && doc.Live.Hostname != "" {
			name = doc.Live.Hostname
		}
		fs = h.cfg.Waivers.Apply(fs, name, now)
	}
	return fs
}
