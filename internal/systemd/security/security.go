// Package security scores how exposed each service of an image is, exactly
// as `systemd-analyze security --offline=true` of the image's systemd
// version scores it: the same 81 checks with their weights, ranges and
// descriptions, the same overall exposure (0.0 to 10.0) and level, the
// same reading of every setting (values systemd ignores are ignored and
// noted, values it refuses make the unit fail to load), drop-ins and
// systemd's own security policy format included. It reads units through
// the boot package's unit model and the image only through rootfs; it
// never runs systemd and never writes.
//
// # Reference
//
// The reference is systemd-analyze of each supported version (252 and
// 257): the oracle tests score the Debian roots and seeded random service
// trees with both and require every check and every overall score to be
// equal. The per-version data under data/ (the check table of
// src/analyze/analyze-security.c, the system call groups, the capability,
// address family and errno names, what libseccomp knows of each system
// call) is regenerated and verified from those binaries by TestTables.
//
// # Limits
//
//   - Specifiers that depend on the machine systemd-analyze runs on (%H,
//     %m, %b, %v, %h, %s, …) expand to fixed stand-ins and are noted.
//   - MountImages= is modelled only as set or not (it matters only with a
//     closed device policy); credentials only as encrypted or not.
//   - Units that systemd refuses for settings outside the assessment
//     (beyond what the boot model checks) are scored, where
//     systemd-analyze would fail to load them.
package security

import (
	"errors"
	"fmt"
	"slices"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/boot"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// ErrNotLoaded reports a service systemd does not load (not found,
// masked, refused for its settings), which systemd-analyze cannot score.
var ErrNotLoaded = errors.New("unit not loaded")

// ErrNotService reports a unit name that is not a service.
var ErrNotService = errors.New("not a service unit")

// Check is one check of an assessment.
type Check struct {
	// ID is systemd's json_field ("PrivateTmp", "UserOrDynamicUser").
	ID string `json:"id"`
	// Name is systemd's check name ("PrivateTmp=").
	Name string `json:"name"`
	// Set is true when the check passes, false when it does not (fully or
	// partly), null when it does not apply.
	Set *bool `json:"set"`
	// Exposure is what the check adds to the overall exposure, null when
	// it does not apply.
	Exposure    *Tenths `json:"exposure"`
	Description string  `json:"description"`
	// Weight, Badness and Range are systemd's numbers (Badness null when
	// the check does not apply).
	Weight  uint64  `json:"weight"`
	Badness *uint64 `json:"badness"`
	Range   uint64  `json:"range"`
}

// Assessment is one service's exposure.
type Assessment struct {
	// Unit is the name asked for; ID the unit's id as systemd names it
	// (the fragment's name, an instance for a template).
	Unit     string   `json:"unit"`
	ID       string   `json:"id"`
	Fragment string   `json:"fragment,omitempty"`
	DropIns  []string `json:"dropins,omitempty"`
	// Exposure is the overall exposure, 0.0 (perfect) to 10.0; Level its
	// name (PERFECT, SAFE, OK, MEDIUM, EXPOSED, UNSAFE, DANGEROUS).
	Exposure Tenths  `json:"exposure"`
	Level    string  `json:"level"`
	Checks   []Check `json:"checks"`
	// Notes say which settings systemd ignores and what amilint could
	// only approximate.
	Notes []string `json:"notes,omitempty"`
}

// Scorer scores the services of one image.
type Scorer struct {
	fsys   *rootfs.FS
	graph  *boot.Graph
	tables *Tables
	policy *Policy
}

// NewScorer returns a Scorer of the units of g (loaded from fsys) with the
// tables of one systemd version and an optional policy.
func NewScorer(fsys *rootfs.FS, g *boot.Graph, t *Tables, p *Policy) *Scorer {
	return &Scorer{fsys: fsys, graph: g, tables: t, policy: p}
}

// Tables returns the tables the scorer uses.
func (s *Scorer) Tables() *Tables { return s.tables }

// Services lists the service unit files of the image a whole-image
// assessment scores, sorted: every service name in the unit search path
// that is not an alias of another and not masked, templates included
// (scored as systemd-analyze scores a template name), and not made by
// systemd-sysv-generator (which systemd-analyze does not run).
func (s *Scorer) Services() []string {
	var out []string
	for _, n := range s.candidates() {
		if s.scorable(n) {
			out = append(out, n)
		}
	}
	return out
}

// candidates are the service names of the search path that are not
// aliases; scorable tells which of them Services keeps (it loads them).
func (s *Scorer) candidates() []string {
	var out []string
	for _, n := range s.graph.Names() {
		if unit.Type(n) != "service" {
			continue
		}
		if _, _, alias := s.graph.AliasLink(n); alias {
			continue
		}
		out = append(out, n)
	}
	return out
}

func (s *Scorer) scorable(n string) bool {
	u := s.graph.Unit(s.loadName(n))
	return u != nil && u.State != boot.Masked && u.SourcePath == ""
}

// loadName is the name systemd-analyze loads for a name it is given: a
// template gets the version's instance.
func (s *Scorer) loadName(name string) string {
	if unit.IsTemplate(name) {
		return unit.WithInstance(name, s.tables.templateInstance())
	}
	return name
}

// Score assesses one service.
func (s *Scorer) Score(name string) (*Assessment, error) {
	if !unit.Valid(name) {
		return nil, fmt.Errorf("%s: invalid unit name", name)
	}
	if unit.Type(name) != "service" {
		return nil, fmt.Errorf("%s: %w", name, ErrNotService)
	}
	u := s.graph.Unit(s.loadName(name))
	if u == nil {
		return nil, fmt.Errorf("%s: invalid unit name", name)
	}
	return s.score(name, u)
}

// ScoreLoaded is Score for a service whose unit the caller loaded already
// from the scorer's graph (u is graph.Unit(name)), without asking the
// graph again: it scores while the graph loads other units. A template
// name (scored under the version's instance) goes through Score.
func (s *Scorer) ScoreLoaded(name string, u *boot.Unit) (*Assessment, error) {
	if !unit.Valid(name) || unit.Type(name) != "service" || unit.IsTemplate(name) || u == nil {
		return s.Score(name)
	}
	return s.score(name, u)
}

// score assesses the service name, loaded as u.
func (s *Scorer) score(name string, u *boot.Unit) (*Assessment, error) {
	switch {
	case u.State == boot.Masked:
		return nil, fmt.Errorf("%s: %w: masked", name, ErrNotLoaded)
	case u.State != boot.Loaded:
		return nil, fmt.Errorf("%s: %w: %s: %v", name, ErrNotLoaded, u.State, u.LoadError)
	case u.SourcePath != "":
		return nil, fmt.Errorf("%s: %w: made by systemd-sysv-generator from %s, which systemd-analyze does not run", name, ErrNotLoaded, u.SourcePath)
	}
	st := s.load(u)
	if st.fatal != nil {
		return nil, fmt.Errorf("%s: %w: bad-setting: %v", name, ErrNotLoaded, st.fatal)
	}
	a, err := s.tables.assessInfo(st.info(), s.policy)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	a.Unit, a.ID, a.Fragment, a.DropIns, a.Notes = name, u.Name, u.Fragment, u.DropIns, st.notes
	return a, nil
}

// load applies every assignment of the unit's fragment and drop-ins, as
// the boot model read them, in systemd's order; then what
// unit_patch_contexts adds.
func (s *Scorer) load(u *boot.Unit) *settings {
	st := newSettings(s.tables, u.Name)
	for i, src := range u.Sources {
		for _, o := range src.Options {
			st.apply(src.Path, o)
			if st.fatal == nil {
				continue
			}
			if i == 0 && src.Path == u.Fragment {
				return st // the fragment: systemd refuses the unit
			}
			// A drop-in: config_parse stops at the setting, and
			// unit_load_dropin ignores the error, so the rest of the
			// drop-in is not applied but the unit loads.
			st.notes = append(st.notes, fmt.Sprintf("%v; systemd stops reading %s there", st.fatal, src.Path))
			st.fatal = nil
			break
		}
	}
	st.patch()
	return st
}

// patch is unit_patch_contexts (and 257's unit_verify_contexts) as far as
// the assessment reads.
func (st *settings) patch() {
	caps := st.t.caps
	bit := func(names ...string) uint64 {
		var m uint64
		for _, n := range names {
			m |= 1 << caps[n]
		}
		return m
	}
	if st.privateDevices {
		st.bounding &^= bit("cap_mknod", "cap_sys_rawio")
	}
	if st.protectKernelMods {
		st.bounding &^= bit("cap_sys_module")
	}
	if st.protectKernelLogs {
		st.bounding &^= bit("cap_syslog")
	}
	if st.protectClock {
		st.bounding &^= bit("cap_sys_time", "cap_wake_alarm")
	}
	if st.dynamicUser {
		if st.user == nil {
			n := userFromUnitName(st.id)
			st.user = &n
		}
		if st.t.Version >= 257 {
			if st.privateTmp == "no" {
				st.privateTmp = "disconnected"
			}
		} else {
			st.privateTmp = "connected"
		}
		st.removeIPC = true
		st.protectSystem = "strict"
		if st.protectHome == "no" {
			st.protectHome = "read-only"
		}
		st.noNewPrivileges = true
		st.restrictSUIDSGID = true
	}
	if st.privateDevices && st.devicePolicy == "auto" {
		st.devicePolicy = "closed"
	}
	if st.devicePolicy != "auto" || len(st.deviceAllow) > 0 {
		add := func(p string, r, w, m bool) {
			st.deviceAllow = append([]deviceAllow{{p, r, w, m}}, st.deviceAllow...)
		}
		if st.rootImage != nil || st.mountImages {
			add("/dev/loop-control", true, true, false)
			add("/dev/mapper/control", true, true, false)
			add("block-loop", true, true, true)
			add("block-blkext", true, true, true)
			add("block-device-mapper", true, true, true)
		}
		if st.protectClock {
			add("char-rtc", true, false, false)
		}
		if st.encryptedCredentials() {
			if st.t.Version >= 257 {
				add("char-tpm", true, true, false)
			} else {
				add("/dev/tpmrm0", true, true, false)
			}
		}
	}
}

func (st *settings) encryptedCredentials() bool {
	for _, m := range []map[string]bool{st.loadCreds, st.setCreds} {
		for _, enc := range m {
			if enc {
				return true
			}
		}
	}
	return false
}

// assessInfo scores the info with the tables and policy, as assess() does.
func (t *Tables) assessInfo(in *info, p *Policy) (*Assessment, error) {
	n := len(t.Checks)
	// One allocation each for the checks and their pointers: 81 checks of
	// every service would otherwise be hundreds of small allocations.
	a := &Assessment{Checks: make([]Check, n)}
	sets, badnesses, exposures := make([]bool, n), make([]uint64, n), make([]Tenths, n)
	var badnessSum, weightSum uint64
	for i := range t.Checks {
		c, ch := &t.Checks[i], &a.Checks[i]
		w, r := p.weight(c), p.rangeOf(c)
		var badness uint64
		var d string
		switch {
		case c.DefaultDependenciesOnly && !in.defaultDeps:
			badness, d = notApplicable, "Service runs in special boot phase, option is not appropriate"
		case w == 0:
			badness, d = notApplicable, "Option excluded by policy, skipping"
		default:
			badness, d = t.assess(c, in)
		}
		if r == 0 {
			return nil, fmt.Errorf("security policy: %s: range 0", c.JSONField)
		}
		*ch = Check{ID: c.JSONField, Name: c.Name, Weight: w, Range: r, Description: d}
		if badness != notApplicable {
			if badness > r {
				return nil, fmt.Errorf("security policy: %s: range %d is below the check's badness %d", c.JSONField, r, badness)
			}
			badnessSum += divRoundUp(badness*w, r)
			weightSum += w
			badnesses[i] = badness
			ch.Badness = &badnesses[i]
		}
	}
	if weightSum == 0 {
		return nil, errors.New("security policy: every check is excluded")
	}
	for i := range a.Checks {
		c, ch := &t.Checks[i], &a.Checks[i]
		desc := ""
		switch {
		case ch.Badness == nil:
			desc = p.description(c, "na")
		case *ch.Badness == c.Range:
			desc = p.description(c, "bad")
			ch.Set = &sets[i]
		case *ch.Badness == 0:
			desc = p.description(c, "good")
			sets[i] = true
			ch.Set = &sets[i]
		default:
			ch.Set = &sets[i]
		}
		if ch.Description == "" {
			ch.Description = desc
		}
		if ch.Badness != nil {
			if b := *ch.Badness; b != 0 {
				exposures[i] = Tenths(divRoundUp(divRoundUp(b*ch.Weight*100, ch.Range), weightSum))
			}
			ch.Exposure = &exposures[i]
		}
	}
	a.Exposure = Tenths(divRoundUp(badnessSum*100, weightSum))
	a.Level = Level(a.Exposure)
	return a, nil
}

// divRoundUp is systemd's DIV_ROUND_UP: x/y, plus one if there is a rest.
func divRoundUp(x, y uint64) uint64 {
	q := x / y
	if x%y != 0 {
		q++
	}
	return q
}

// Top returns the n failing checks whose fix would lower the exposure
// most (the largest badness × weight / range first; ties by id). It keeps
// the n best while it reads the checks, in order, instead of sorting them
// all: every service of an image is asked for its three.
func (a *Assessment) Top(n int) []Check {
	gain := func(c *Check) float64 { return float64(*c.Badness) * float64(c.Weight) / float64(c.Range) }
	before := func(x, y int) bool {
		cx, cy := &a.Checks[x], &a.Checks[y]
		if gx, gy := gain(cx), gain(cy); gx != gy {
			return gx > gy
		}
		return cx.ID < cy.ID
	}
	best := make([]int, 0, max(0, min(n, len(a.Checks)))+1)
	for i, c := range a.Checks {
		if n <= 0 || c.Badness == nil || *c.Badness == 0 || c.Range == 0 {
			continue
		}
		j := len(best)
		for j > 0 && before(i, best[j-1]) {
			j--
		}
		if j < n {
			best = slices.Insert(best, j, i)
			if len(best) > n {
				best = best[:n]
			}
		}
	}
	out := make([]Check, len(best))
	for i, j := range best {
		out[i] = a.Checks[j]
	}
	return out
}
