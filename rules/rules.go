// Package rules owns amilint's rule catalog: what is known about the units
// images ship — which units belong to which agent, why they hurt, when they
// are needed, how bad it is, and what fixes it. Rules are data, one YAML file
// per rule, embedded; users add theirs with --rules DIR. Decisions are not
// made here: the Rego policies (package policies) read the catalog as
// data.rules and the role profiles as data.profiles.
//
// The package never holds shell strings (remediations are actions on named
// units, the policies spell the commands) and never reads an image.
//
// # Rule ids
//
// An id is a lowercase slug, [a-z][a-z0-9]*(-[a-z0-9]+)*, at most 64
// characters, naming the problem, not a number: "ecs-agent-unconfigured",
// "crash-loop-restart". A rule's file is ID.yaml. The generic rules whose
// logic lives in Rego have fixed ids the policies look up:
// crash-loop-restart, container-per-restart, exec-missing,
// first-boot-presets, profile-allowlist.
//
// # Conditions
//
// A unit rule's needed_when says when its units ARE needed; a matched unit
// that starts at boot is a finding unless the condition holds. A condition is
// one leaf, or any:/all: of leaves (one level, as the Rego evaluates it):
//
//	config_key: {file: /etc/ecs/ecs.config, key: ECS_CLUSTER}  # env file sets KEY non-empty
//	file_exists: /var/lib/amazon/ssm/registration              # the path exists in the image
//	config_valid: /etc/amazon/ssm/amazon-ssm-agent.json        # exists and parses (a dir: has entries)
//
// A leaf may add format: env|json|dir|file, the way the facts builder
// parses the file (default: env for config_key, file for file_exists, a
// guess from the name for config_valid). Paths are image-absolute.
//
// # Traits
//
// Some knowledge holds only for some kinds of image: unattended upgrades
// are drift on an image that is rebuilt and replaced, not on one patched in
// place. A rule's traits (e.g. [immutable]) restrict it to audits whose
// traits include them all; an audit's traits are the selected profile's
// traits plus those given with --trait. Trait names are slugs.
package rules

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// hardeningCatalog holds the embedded hardening catalog. The rules and
// profiles (*.yaml, profiles/*.yaml) are compiled into Go instead
// (compiled.go); their YAML is the source, not part of the binary.
//
//go:embed hardening/*.yaml
var hardeningCatalog embed.FS

// Rule is one entry of the catalog.
type Rule struct {
	// ID is the rule's slug; see the package doc.
	ID string `yaml:"id" json:"id"`
	// Kind is "unit" (a rule about named units, decided by needed_when)
	// or "generic" (a pattern any unit can show; its logic is in Rego).
	Kind string `yaml:"kind" json:"kind"`
	// Title is one line naming the problem.
	Title string `yaml:"title" json:"title"`
	// Severity is info, low, medium, high or critical.
	Severity string `yaml:"severity" json:"severity"`
	// Rationale says why it matters, citing incidents where there are.
	Rationale string `yaml:"rationale" json:"rationale"`
	// References are URLs.
	References []string `yaml:"references,omitempty" json:"references,omitempty"`
	// Units are the unit names (or globs) a unit rule matches.
	Units []string `yaml:"units,omitempty" json:"units,omitempty"`
	// NeededWhen is when the units are needed; nil means never (on the
	// images this rule applies to).
	NeededWhen *Condition `yaml:"needed_when,omitempty" json:"needed_when,omitempty"`
	// Remediation is what fixes a finding.
	Remediation Remediation `yaml:"remediation" json:"remediation"`
	// Profiles restrict the rule to scans with one of these role
	// profiles; empty means every scan.
	Profiles []string `yaml:"profiles,omitempty" json:"profiles,omitempty"`
	// Traits restrict the rule to audits of images with all these traits
	// (the profile's and --trait's, e.g. immutable); empty means every
	// audit. See the package doc.
	Traits []string `yaml:"traits,omitempty" json:"traits,omitempty"`
	// Tags are free labels (aws, immutable, server, desktop, incident…).
	Tags []string `yaml:"tags,omitempty" json:"tags,omitempty"`
	// Params are the rule's numeric defaults (thresholds), seen by
	// policies as data.rules[ID].params; data.params.live overrides them.
	Params map[string]float64 `yaml:"params,omitempty" json:"params,omitempty"`
	// UnitParams override Params for some units: a unit name or glob →
	// param → value (a per-unit threshold). A unit's own name wins over
	// globs, and among globs the longest; a selected
	// profile's tuning wins over both (see Profile.Rules).
	UnitParams map[string]map[string]float64 `yaml:"unit_params,omitempty" json:"unit_params,omitempty"`

	// Source is where the rule was loaded from ("embedded:ID.yaml" or a
	// file path); not part of the YAML.
	Source string `yaml:"-" json:"-"`
}

// Remediation is the fix of a rule's findings: an action on units.
type Remediation struct {
	// Action is disable, mask or configure.
	Action string `yaml:"action" json:"action"`
	// Units are the units the action applies to, the matched unit and its
	// companions (Also= units of the same package); empty means the
	// matched unit alone. A fix skips listed units the image lacks.
	Units []string `yaml:"units,omitempty" json:"units,omitempty"`
	// Text explains the fix to a person.
	Text string `yaml:"text" json:"text"`
}

// Condition is a needed_when condition: exactly one of its operator fields
// is set. See the package doc.
type Condition struct {
	ConfigKey   *ConfigKey  `yaml:"config_key,omitempty" json:"config_key,omitempty"`
	FileExists  string      `yaml:"file_exists,omitempty" json:"file_exists,omitempty"`
	ConfigValid string      `yaml:"config_valid,omitempty" json:"config_valid,omitempty"`
	Any         []Condition `yaml:"any,omitempty" json:"any,omitempty"`
	All         []Condition `yaml:"all,omitempty" json:"all,omitempty"`
	// Format is how the facts builder parses the leaf's file.
	Format string `yaml:"format,omitempty" json:"format,omitempty"`
}

// ConfigKey is the config_key leaf: File (an env file) sets Key to a
// non-empty value.
type ConfigKey struct {
	File string `yaml:"file" json:"file"`
	Key  string `yaml:"key" json:"key"`
}

// Profile is a role profile: a default-deny allowlist of the units that may
// start at boot on that kind of host.
type Profile struct {
	// Name is the profile's slug, also its file name (NAME.yaml).
	Name string `yaml:"name" json:"name"`
	// Description says what kind of host it describes.
	Description string `yaml:"description" json:"description"`
	// Traits are what kind of image it is (immutable, server…): the rules
	// restricted to a trait apply when the profile is selected.
	Traits []string `yaml:"traits,omitempty" json:"traits,omitempty"`
	// Allow are unit names or globs (*, ?, [...]) allowed to start at boot.
	Allow []string `yaml:"allow" json:"allow"`
	// Rules tune rules on this kind of host: a severity, params and
	// per-unit params replacing the rule's (service-exposure's threshold,
	// say). The rules and params must exist (CheckTunings).
	Rules map[string]RuleTuning `yaml:"rules,omitempty" json:"rules,omitempty"`

	Source string `yaml:"-" json:"-"`
}

// Generic rule ids the policies look up.
const (
	CrashLoop           = "crash-loop-restart"
	ContainerPerRestart = "container-per-restart"
	ExecMissing         = "exec-missing"
	FirstBootPresets    = "first-boot-presets"
	ProfileAllowlist    = "profile-allowlist"
)

var (
	idPattern      = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)
	envKeyPattern  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	kinds          = []string{"unit", "generic"}
	actions        = []string{"disable", "mask", "configure"}
	formats        = []string{"env", "json", "dir", "file"}
	severityNames  = []string{"info", "low", "medium", "high", "critical"}
	maxIDLen       = 64
	maxRuleFileLen = 1 << 20
)

// Load returns the embedded catalog, validated, sorted by id.
//
// The catalog is compiled into Go (compiled.go, made from *.yaml by `go
// test ./rules -update`, which fails when it is stale): parsing its YAML
// with yaml.v3 was about 5% of a scan's CPU time.
func Load() ([]Rule, error) {
	return compiledRules(), nil
}

// LoadDir returns the rules in the *.yaml and *.yml files of dir (not its
// subdirectories), validated, sorted by id.
func LoadDir(dir string) ([]Rule, error) {
	fsys, err := userDir(dir, "rules")
	if err != nil {
		return nil, err
	}
	return load(fsys, ".", dir+"/")
}

// LoadAll returns the embedded catalog with the rules of each dir merged
// over it, later directories winning: a user rule replaces the rule with
// the same id.
func LoadAll(dirs ...string) ([]Rule, error) {
	rs, err := Load()
	if err != nil {
		return nil, err
	}
	for _, d := range dirs {
		user, err := LoadDir(d)
		if err != nil {
			return nil, err
		}
		rs = Merge(rs, user)
	}
	return rs, nil
}

// Merge returns base with every rule of override added, replacing the base
// rule of the same id; the result is sorted by id.
func Merge(base, override []Rule) []Rule {
	return mergeBy(base, override, func(r Rule) string { return r.ID })
}

func load(fsys fs.FS, dir, prefix string) ([]Rule, error) {
	files, errs, err := readCatalog(fsys, dir, prefix, "rules")
	if err != nil {
		return nil, err
	}
	var rs []Rule
	seen := map[string]string{}
	parsed, perrs := parseEach(files, Parse)
	for i, f := range files {
		r, err := parsed[i], perrs[i]
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.src, err))
			continue
		}
		r.Source = f.src
		var problems []error
		if r.ID != "" && r.ID != f.stem {
			problems = append(problems, fmt.Errorf("id %q does not match the file name %s", r.ID, f.name))
		}
		if first, dup := seen[r.ID]; dup && r.ID != "" {
			problems = append(problems, fmt.Errorf("duplicate id %q (also in %s)", r.ID, first))
		}
		seen[r.ID] = f.src
		if err := errors.Join(append(problems, r.Validate())...); err != nil {
			errs = append(errs, prefixEach(f.src, err)...)
			continue
		}
		rs = append(rs, r)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("load rules: %w", err)
	}
	slices.SortFunc(rs, func(a, b Rule) int { return strings.Compare(a.ID, b.ID) })
	return rs, nil
}

// prefixEach names src in front of every problem of a joined error, so
// each line of the report says which file it is about.
func prefixEach(src string, err error) []error {
	var out []error
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		out = append(out, fmt.Errorf("%s: %w", src, e))
	}
	walk(err)
	return out
}

func readLimited(fsys fs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(maxRuleFileLen)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxRuleFileLen {
		return nil, fmt.Errorf("larger than %d bytes", maxRuleFileLen)
	}
	return b, nil
}

// Parse decodes one rule strictly: an unknown field, a wrong type or a
// second document is an error. It does not validate; see Rule.Validate.
func Parse(b []byte) (Rule, error) {
	var r Rule
	if err := decodeStrict(b, &r); err != nil {
		return Rule{}, err
	}
	return r, nil
}

func decodeStrict(b []byte, v any) error {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("decode: empty document")
		}
		return fmt.Errorf("decode: %w", err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return fmt.Errorf("decode: want exactly one YAML document")
	}
	return nil
}

// Validate reports every problem of the rule at once.
func (r Rule) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch {
	case r.ID == "":
		bad("id: missing")
	case len(r.ID) > maxIDLen || !idPattern.MatchString(r.ID):
		bad("id %q: want a lowercase slug like ecs-agent-unconfigured ([a-z][a-z0-9]*(-[a-z0-9]+)*, at most %d characters)", r.ID, maxIDLen)
	}
	if !slices.Contains(kinds, r.Kind) {
		bad("kind %q: want one of %s", r.Kind, strings.Join(kinds, ", "))
	}
	if strings.TrimSpace(r.Title) == "" {
		bad("title: missing")
	}
	if strings.Contains(r.Title, "\n") {
		bad("title: must be one line")
	}
	if !slices.Contains(severityNames, r.Severity) {
		bad("severity %q: want one of %s", r.Severity, strings.Join(severityNames, ", "))
	}
	if strings.TrimSpace(r.Rationale) == "" {
		bad("rationale: missing")
	}
	for _, ref := range r.References {
		if u, err := url.Parse(ref); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			bad("reference %q: want an http(s) URL", ref)
		}
	}
	if r.Kind == "unit" && len(r.Units) == 0 {
		bad("units: a unit rule names at least one unit")
	}
	if r.Kind == "generic" && len(r.Units) > 0 {
		bad("units: a generic rule matches any unit; it names none")
	}
	if r.Kind == "generic" && r.NeededWhen != nil {
		bad("needed_when: only unit rules have one")
	}
	for _, u := range r.Units {
		if !validUnitPattern(u) {
			bad("unit %q: not a unit name or glob", u)
		}
	}
	if r.NeededWhen != nil {
		for _, err := range r.NeededWhen.problems(0) {
			errs = append(errs, fmt.Errorf("needed_when: %w", err))
		}
	}
	if !slices.Contains(actions, r.Remediation.Action) {
		bad("remediation.action %q: want one of %s", r.Remediation.Action, strings.Join(actions, ", "))
	}
	if strings.TrimSpace(r.Remediation.Text) == "" {
		bad("remediation.text: missing")
	}
	if r.Remediation.Action == "configure" && len(r.Remediation.Units) > 0 {
		bad("remediation.units: a configure remediation names no units to act on")
	}
	for _, u := range r.Remediation.Units {
		if !unit.Valid(u) {
			bad("remediation unit %q: not a unit name", u)
		}
	}
	errs = append(errs, unitParamProblems(r.UnitParams, r.Params)...)
	for _, p := range r.Profiles {
		if !idPattern.MatchString(p) {
			bad("profile %q: want a slug", p)
		}
	}
	for _, t := range r.Tags {
		if !idPattern.MatchString(t) {
			bad("tag %q: want a slug", t)
		}
	}
	for _, t := range r.Traits {
		if !ValidTrait(t) {
			bad("trait %q: want a slug like immutable", t)
		}
	}
	return errors.Join(errs...)
}

// ValidTrait reports whether t is a well-formed trait name (a slug).
func ValidTrait(t string) bool { return len(t) <= maxIDLen && idPattern.MatchString(t) }

// Level returns the rule's severity as the finding model's type.
func (r Rule) Level() finding.Severity {
	s, err := finding.ParseSeverity(r.Severity)
	if err != nil {
		return finding.Medium
	}
	return s
}

// unitParamProblems checks per-unit params: unit names or globs, each
// overriding a param the rule declares.
func unitParamProblems(up map[string]map[string]float64, declared map[string]float64) []error {
	var errs []error
	for _, pattern := range slices.Sorted(maps.Keys(up)) {
		if !validUnitPattern(pattern) {
			errs = append(errs, fmt.Errorf("unit_params %q: not a unit name or glob", pattern))
		}
		for _, name := range slices.Sorted(maps.Keys(up[pattern])) {
			if _, ok := declared[name]; !ok {
				errs = append(errs, fmt.Errorf("unit_params %q: %s is not a param of the rule (params: %s)", pattern, name, strings.Join(slices.Sorted(maps.Keys(declared)), ", ")))
			}
		}
	}
	return errs
}

func validUnitPattern(p string) bool {
	if unit.Valid(p) {
		return true
	}
	if !strings.ContainsAny(p, "*?[") {
		return false
	}
	if _, err := path.Match(p, ""); err != nil {
		return false
	}
	// A glob must still end in a unit type: "snap.*.service", not "snap*".
	return unit.Type(p) != ""
}

func (c Condition) problems(depth int) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	set := 0
	if c.ConfigKey != nil {
		set++
		if !absClean(c.ConfigKey.File) {
			bad("config_key.file %q: want an absolute, clean image path", c.ConfigKey.File)
		}
		if !envKeyPattern.MatchString(c.ConfigKey.Key) {
			bad("config_key.key %q: want an environment variable name", c.ConfigKey.Key)
		}
		if c.Format != "" && c.Format != "env" {
			bad("format %q: config_key reads env files", c.Format)
		}
	}
	if c.FileExists != "" {
		set++
		if !absClean(c.FileExists) {
			bad("file_exists %q: want an absolute, clean image path", c.FileExists)
		}
	}
	if c.ConfigValid != "" {
		set++
		if !absClean(c.ConfigValid) {
			bad("config_valid %q: want an absolute, clean image path", c.ConfigValid)
		}
	}
	if c.Format != "" && !slices.Contains(formats, c.Format) {
		bad("format %q: want one of %s", c.Format, strings.Join(formats, ", "))
	}
	for _, group := range []struct {
		name string
		cs   []Condition
	}{{"any", c.Any}, {"all", c.All}} {
		if group.cs == nil {
			continue
		}
		set++
		if depth > 0 {
			bad("%s: conditions nest one level only", group.name)
			continue
		}
		if len(group.cs) == 0 {
			bad("%s: empty", group.name)
		}
		if c.Format != "" {
			bad("format: belongs on a leaf, not on %s", group.name)
		}
		for i, sub := range group.cs {
			for _, err := range sub.problems(depth + 1) {
				errs = append(errs, fmt.Errorf("%s[%d]: %w", group.name, i, err))
			}
		}
	}
	if set != 1 {
		bad("want exactly one of config_key, file_exists, config_valid, any, all (got %d)", set)
	}
	return errs
}

func formatRank(f string) int {
	switch f {
	case "file":
		return 0
	case "":
		return 1
	}
	return 2
}

func absClean(p string) bool {
	return strings.HasPrefix(p, "/") && path.Clean(p) == p && p != "/"
}

// ConfigRequest is a file the facts builder must read for the rules to be
// decided, with the format to parse it in ("" lets the builder guess).
type ConfigRequest struct {
	Path   string
	Format string
}

// ConfigRequests returns, without duplicates and sorted by path, the files
// the rules' conditions read.
func ConfigRequests(rs []Rule) []ConfigRequest {
	seen := map[string]ConfigRequest{}
	var add func(c Condition)
	add = func(c Condition) {
		put := func(p, def string) {
			f := c.Format
			if f == "" {
				f = def
			}
			// A parsing request wins over a guess, a guess over presence only.
			if old, ok := seen[p]; ok && formatRank(old.Format) >= formatRank(f) {
				return
			}
			seen[p] = ConfigRequest{Path: p, Format: f}
		}
		if c.ConfigKey != nil {
			put(c.ConfigKey.File, "env")
		}
		if c.FileExists != "" {
			put(c.FileExists, "file")
		}
		if c.ConfigValid != "" {
			put(c.ConfigValid, "")
		}
		for _, s := range c.Any {
			add(s)
		}
		for _, s := range c.All {
			add(s)
		}
	}
	for _, r := range rs {
		if r.NeededWhen != nil {
			add(*r.NeededWhen)
		}
	}
	out := make([]ConfigRequest, 0, len(seen))
	for _, v := range seen {
		out = append(out, v)
	}
	slices.SortFunc(out, func(a, b ConfigRequest) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// Data returns the rules as the policies see them, data.rules: a map from
// id to the rule's JSON form, decoded as OPA decodes JSON (numbers are
// json.Number), so the policy engine takes it without another round trip.
func Data(rs []Rule) (map[string]any, error) {
	out := make(map[string]any, len(rs))
	for _, r := range rs {
		b, err := json.Marshal(r)
		if err != nil {
			return nil, fmt.Errorf("rule %s as data: %w", r.ID, err)
		}
		v, err := jsonShaped(b)
		if err != nil {
			return nil, fmt.Errorf("rule %s as data: %w", r.ID, err)
		}
		out[r.ID] = v
	}
	return out, nil
}

// jsonShaped decodes b as OPA's util.UnmarshalJSON does: objects as
// map[string]any, arrays as []any, numbers as json.Number. It is not that
// function: this package is part of the Packer plugin too, which links
// no OPA.
func jsonShaped(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}
