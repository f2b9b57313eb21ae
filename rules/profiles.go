package rules

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// LoadProfiles returns the embedded role profiles (rules/profiles/*.yaml),
// validated, sorted by name.
// Like Load's, they are compiled into Go (compiled.go).
func LoadProfiles() ([]Profile, error) {
	return compiledProfiles(), nil
}

// LoadProfilesDir returns the profiles in the *.yaml and *.yml files of
// dir, validated, sorted by name.
func LoadProfilesDir(dir string) ([]Profile, error) {
	fsys, err := userDir(dir, "profiles")
	if err != nil {
		return nil, err
	}
	return loadProfiles(fsys, ".", dir+"/")
}

// LoadAllProfiles returns the embedded profiles with those of each rules
// directory's profiles/ subdirectory (DIR/profiles/*.yaml, when it exists)
// merged over them, later directories winning by name. It pairs with
// LoadAll for --rules DIR.
func LoadAllProfiles(dirs ...string) ([]Profile, error) {
	ps, err := LoadProfiles()
	if err != nil {
		return nil, err
	}
	for _, d := range dirs {
		pd := filepath.Join(d, "profiles")
		if _, err := os.Stat(pd); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		user, err := LoadProfilesDir(pd)
		if err != nil {
			return nil, err
		}
		ps = MergeProfiles(ps, user)
	}
	return ps, nil
}

// MergeProfiles returns base with every profile of override added,
// replacing the base profile of the same name; sorted by name.
func MergeProfiles(base, override []Profile) []Profile {
	return mergeBy(base, override, func(p Profile) string { return p.Name })
}

func loadProfiles(fsys fs.FS, dir, prefix string) ([]Profile, error) {
	files, errs, err := readCatalog(fsys, dir, prefix, "profiles")
	if err != nil {
		return nil, err
	}
	var ps []Profile
	for _, f := range files {
		var p Profile
		if err := decodeStrict(f.data, &p); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.src, err))
			continue
		}
		p.Source = f.src
		var problems []error
		if p.Name != "" && p.Name != f.stem {
			problems = append(problems, fmt.Errorf("name %q does not match the file name %s", p.Name, f.name))
		}
		if err := errors.Join(append(problems, p.Validate())...); err != nil {
			errs = append(errs, prefixEach(f.src, err)...)
			continue
		}
		ps = append(ps, p)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("load profiles: %w", err)
	}
	slices.SortFunc(ps, func(a, b Profile) int { return strings.Compare(a.Name, b.Name) })
	return ps, nil
}

// Validate reports every problem of the profile at once.
func (p Profile) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !idPattern.MatchString(p.Name) || len(p.Name) > maxIDLen {
		bad("name %q: want a lowercase slug like k8s-gpu-node", p.Name)
	}
	if strings.TrimSpace(p.Description) == "" {
		bad("description: missing")
	}
	if len(p.Allow) == 0 {
		bad("allow: a default-deny profile allows at least one unit")
	}
	for _, t := range p.Traits {
		if !ValidTrait(t) {
			bad("trait %q: want a slug like immutable", t)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(p.Rules)) {
		t := p.Rules[id]
		if !idPattern.MatchString(id) {
			bad("rules %q: want a rule id", id)
		}
		if t.Severity != "" && !slices.Contains(severityNames, t.Severity) {
			bad("rules %s: severity %q: want one of %s", id, t.Severity, strings.Join(severityNames, ", "))
		}
		for _, pattern := range slices.Sorted(maps.Keys(t.UnitParams)) {
			if !validUnitPattern(pattern) {
				bad("rules %s: unit_params %q: not a unit name or glob", id, pattern)
			}
		}
	}
	seen := map[string]bool{}
	for _, a := range p.Allow {
		if !validUnitPattern(a) {
			bad("allow %q: not a unit name or glob", a)
		}
		if seen[a] {
			bad("allow %q: listed twice", a)
		}
		seen[a] = true
	}
	return errors.Join(errs...)
}

// RuleTuning is how a profile tunes one rule for its kind of host.
type RuleTuning struct {
	// Severity replaces the rule's severity ("" keeps it).
	Severity string `yaml:"severity,omitempty" json:"severity,omitempty"`
	// Params override the rule's params.
	Params map[string]float64 `yaml:"params,omitempty" json:"params,omitempty"`
	// UnitParams override them for some units (names or globs).
	UnitParams map[string]map[string]float64 `yaml:"unit_params,omitempty" json:"unit_params,omitempty"`
}

// CheckTunings reports every profile tuning of a rule that is not in rs
// or of a param the rule does not declare: a typo would otherwise tune
// nothing.
func CheckTunings(rs []Rule, ps []Profile) error {
	byID := map[string]Rule{}
	for _, r := range rs {
		byID[r.ID] = r
	}
	var errs []error
	for _, p := range ps {
		for _, id := range slices.Sorted(maps.Keys(p.Rules)) {
			r, ok := byID[id]
			if !ok {
				errs = append(errs, fmt.Errorf("profile %s: rules %s: no such rule", p.Name, id))
				continue
			}
			t := p.Rules[id]
			for _, name := range slices.Sorted(maps.Keys(t.Params)) {
				if _, ok := r.Params[name]; !ok {
					errs = append(errs, fmt.Errorf("profile %s: rules %s: %s is not a param of the rule", p.Name, id, name))
				}
			}
			for _, err := range unitParamProblems(t.UnitParams, r.Params) {
				errs = append(errs, fmt.Errorf("profile %s: rules %s: %w", p.Name, id, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Allows reports whether the profile allows unit name to start at boot.
func (p Profile) Allows(name string) bool {
	for _, a := range p.Allow {
		if a == name {
			return true
		}
		if ok, _ := path.Match(a, name); ok {
			return true
		}
	}
	return false
}

// ProfilesData returns the profiles as the policies see them,
// data.profiles: a map from name to the profile's JSON form, decoded as
// Data decodes the rules.
func ProfilesData(ps []Profile) (map[string]any, error) {
	out := make(map[string]any, len(ps))
	for _, p := range ps {
		b, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("profile %s as data: %w", p.Name, err)
		}
		v, err := jsonShaped(b)
		if err != nil {
			return nil, fmt.Errorf("profile %s as data: %w", p.Name, err)
		}
		out[p.Name] = v
	}
	return out, nil
}
