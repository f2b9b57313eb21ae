package rules

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// LoadProfiles returns the embedded role profiles (rules/profiles/*.yaml),
// validated, sorted by name.
func LoadProfiles() ([]Profile, error) {
	return loadProfiles(catalog, "profiles", "embedded:profiles/")
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
// data.profiles: a map from name to the profile's JSON form.
func ProfilesData(ps []Profile) (map[string]any, error) {
	out := make(map[string]any, len(ps))
	for _, p := range ps {
		b, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("profile %s as data: %w", p.Name, err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return nil, fmt.Errorf("profile %s as data: %w", p.Name, err)
		}
		out[p.Name] = v
	}
	return out, nil
}
