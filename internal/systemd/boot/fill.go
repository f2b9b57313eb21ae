package boot

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// ErrNoFragment reports a unit whose type needs a unit file and has none.
var ErrNoFragment = errors.New("unit file not found")

// ErrBadSetting reports a unit systemd refuses to load for its settings.
var ErrBadSetting = errors.New("bad unit setting")

// ErrRefusedSetting reports a unit systemd fails to load because a
// parser refuses a setting with an error other than -ENOEXEC: the unit
// is left in the error state rather than bad-setting.
var ErrRefusedSetting = errors.New("refused unit setting")

// depKinds are the [Unit] dependency settings, with whether they pull the
// named unit into a start transaction. Dependency settings are never reset
// by an empty assignment.
var depSettings = []string{
	"Wants", "Requires", "Requisite", "BindsTo", "Upholds", "PartOf", "Conflicts",
}

// fragmentRequired reports whether systemd refuses to load a unit of type t
// without a unit file (unit_load_fragment_and_dropin(u, true), or a verify
// step that fails without one).
func fragmentRequired(t string) bool {
	switch t {
	case "slice", "device":
		return false
	}
	return true
}

// fill loads u's fragment, drop-ins and dependencies and sets its state.
// Specifiers expand with the name the unit was first requested by, as
// systemd parses a unit file before it merges the unit's names.
func (g *Graph) fill(u *Unit, requested string) {
	if g.fillFiles(u, requested, g.nullOrEmpty) {
		g.implicitDeps(u, unit.Type(u.Name), requested)
	}
}

// fillFiles is what fill reads of the image, which depends on the unit's
// names and the name it is requested by alone (state tells whether a file
// is a mask; specifiers in settings expand with requested); it reports whether
// the implicit dependencies are still to be added: not for a unit that
// did not load.
func (g *Graph) fillFiles(u *Unit, requested string, state func(string) fileState) bool {
	t := unit.Type(u.Name)
	var fatal error // why the unit file stopped being read, if it did
	var fatalState LoadState
	if u.Fragment != "" {
		switch state(u.Fragment) {
		case fileMasked:
			if perpetual(u.Name) {
				break
			}
			u.State, u.Masked = Masked, true
			return false
		case fileMissing:
			u.State = NotFound
			u.LoadError = fmt.Errorf("open %s: %w", u.Fragment, fs.ErrNotExist)
			return false
		}
		data, err := g.readFragment(u.Fragment)
		if err != nil {
			u.State, u.LoadError = NotFound, fmt.Errorf("read %s: %w", u.Fragment, err)
			return false
		}
		opts, err := unit.ParseConfig(data)
		if err != nil {
			u.State, u.LoadError = Error, fmt.Errorf("parse %s: %w", u.Fragment, err)
			if t == "mount" {
				g.merge(u, opts, u.Fragment)
				u.LoadError = g.mountExtrasRan(u, requested, u.LoadError)
			}
			return false
		}
		cut, state, err := fatalSetting(opts, u.Fragment, t, requested, g.version)
		if err != nil {
			fatal, fatalState = fmt.Errorf("%s: %w", u.Name, err), state
		}
		u.Sources = append(u.Sources, Source{Path: u.Fragment, Options: opts[:cut]})
		g.merge(u, opts[:cut], u.Fragment)
		if fatal != nil && t == "mount" {
			fatal = g.mountExtrasRan(u, requested, fatal)
		}
	} else if fragmentRequired(t) && !perpetual(u.Name) {
		u.State, u.LoadError = NotFound, fmt.Errorf("load %s: %w", u.Name, ErrNoFragment)
		return false
	}
	u.State = Loaded

	// Dependencies from .wants and .requires directories, then .conf
	// drop-ins, as unit_load_dropin does. .upholds directories count from
	// systemd 254 on (the oracle tests prove 252 ignores them); Upholds=
	// in a unit file counts in every version.
	names := ownNames(u)
	bases := dropinBases(names)
	for _, d := range g.depDirs() {
		for _, p := range g.dropinFiles(u, bases, d, "") {
			if name, ok := g.depLink(p, u, state); ok {
				u.Deps = append(u.Deps, Dep{Kind: d, Name: name, Source: "/" + p})
			}
		}
	}
	for _, n := range names {
		u.Deps = append(u.Deps, g.genDeps[n]...)
	}
	for _, p := range g.dropinFiles(u, bases, ".d", ".conf") {
		data, err := g.fsys.ReadFile(p)
		if err != nil {
			// A masked drop-in (-> /dev/null) is empty; anything else
			// unreadable is skipped as systemd skips it.
			if errors.Is(err, rootfs.ErrMasked) {
				u.DropIns = append(u.DropIns, "/"+p)
			}
			continue
		}
		opts, err := unit.ParseConfig(data)
		if err != nil {
			u.Problems = append(u.Problems, fmt.Sprintf("parse /%s: %v", p, err))
		}
		cut, _, err := fatalSetting(opts, "/"+p, t, requested, g.version)
		if err != nil {
			u.Problems = append(u.Problems, fmt.Sprintf("%v; the rest of the drop-in is not read", err))
		}
		opts = opts[:cut]
		u.DropIns = append(u.DropIns, "/"+p)
		u.Sources = append(u.Sources, Source{Path: "/" + p, Options: opts})
		g.merge(u, opts, "/"+p)
	}

	if fatal != nil {
		u.State, u.LoadError = fatalState, fatal
	} else if err := g.verify(u, t, requested); err != nil {
		u.State, u.LoadError = BadSetting, err
		if !errors.Is(err, ErrBadSetting) {
			u.State = Error
		}
	}
	return true
}

// mountExtrasRan marks err, why the unit file of the mount u failed, with
// errRefusedLate when systemd still runs the mount's extras: it counts a
// unit file as loaded before parsing it, so a parse error or a bad
// setting fails the load only after the extras ran on what was read
// (drop-ins are not read), unless the extras themselves fail or the
// Where= read puts the mount point elsewhere (see mountDeps).
func (g *Graph) mountExtrasRan(u *Unit, requested string, err error) error {
	if v := g.verify(u, "mount", requested); v == nil || errors.Is(v, errRefusedLate) {
		return fmt.Errorf("%w (%w)", err, errRefusedLate)
	}
	return err
}

// UpholdsDirs is the systemd version that reads .upholds directories.
const UpholdsDirs = 254

// depDirs are the dependency directory suffixes of the version modelled.
func (g *Graph) depDirs() []string {
	if g.version >= UpholdsDirs {
		return []string{".wants", ".requires", ".upholds"}
	}
	return []string{".wants", ".requires"}
}

// perpetual units exist whatever the image says and cannot be masked.
func perpetual(name string) bool {
	switch name {
	case "-.slice", "system.slice", "-.mount", "init.scope":
		return true
	}
	return false
}

// merge appends opts from src to u's merged options, applying systemd's
// reset semantics: an empty assignment clears a setting's earlier values,
// except for dependency settings, where it does nothing.
func (g *Graph) merge(u *Unit, opts []*unit.Option, src string) {
	for _, o := range opts {
		if o.Value == "" {
			if o.Section == "Unit" && (slices.Contains(depSettings, o.Name) || o.Name == "Before" || o.Name == "After") {
				continue
			}
			keep := u.Options[:0]
			keepSrc := u.srcs[:0]
			for i, p := range u.Options {
				if p.Section == o.Section && p.Name == o.Name {
					continue
				}
				keep = append(keep, p)
				keepSrc = append(keepSrc, u.srcs[i])
			}
			u.Options, u.srcs = keep, keepSrc
			continue
		}
		u.Options = append(u.Options, o)
		u.srcs = append(u.srcs, src)
	}
}

// ownNames are the unit's id and then its names, each once.
func ownNames(u *Unit) []string {
	set := nameSet{list: make([]string, 0, 1+len(u.Names))}
	set.add(u.Name)
	for _, n := range u.Names {
		set.add(n)
	}
	return set.list
}

// dropinBases are the names whose drop-in directories a unit of these
// names (ownNames) reads, for each name in order, without the directory's
// suffix: the same for every kind of drop-in directory.
func dropinBases(names []string) [][]string {
	out := make([][]string, len(names))
	for i, n := range names {
		out[i] = unit.DropInDirs(nil, n, "")
	}
	return out
}

// dropinFiles is unit_file_find_dropin_paths: the files (image names) of
// every "NAME+suffix" directory of the unit's names, their templates and
// dash prefixes, and the type-level directory, in every search directory;
// the first file of a given name wins; the result is sorted by file name.
// fileSuffix filters names (".conf"); "" keeps every entry.
func (g *Graph) dropinFiles(u *Unit, bases [][]string, suffix, fileSuffix string) []string {
	var dirs []string
	for _, cands := range bases {
		// Most units have no drop-in directory anywhere: one lookup a
		// candidate tells, before one a candidate and search dir.
		found := false
		for _, c := range cands {
			if g.entries[c+suffix] {
				found = true
				break
			}
		}
		if !found {
			continue
		}
		for _, d := range g.dirs {
			for _, c := range cands {
				if g.cache[d][c+suffix] {
					dirs = append(dirs, d+"/"+c+suffix)
				}
			}
		}
	}
	if t := unit.Type(u.Name); t != "" {
		for _, d := range g.dirs {
			if g.cache[d][t+suffix] {
				dirs = append(dirs, d+"/"+t+suffix)
			}
		}
	}
	files := map[string]string{}
	for _, dir := range dirs {
		ents, err := g.fsys.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			n := e.Name()
			if _, dup := files[n]; dup || unit.HiddenOrBackup(n) {
				continue
			}
			if !e.Type().IsRegular() && e.Type()&fs.ModeSymlink == 0 {
				continue
			}
			if fileSuffix != "" && !strings.HasSuffix(n, fileSuffix) {
				continue
			}
			files[n] = dir + "/" + n
		}
	}
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = files[k]
	}
	return out
}

// depLink is process_deps for one entry of a .wants or .requires
// directory: only a symlink counts, a link to /dev/null or an empty file is
// a masked dependency, and the dependency is on the link's own name (even
// when the link dangles).
func (g *Graph) depLink(p string, u *Unit, state func(string) fileState) (string, bool) {
	switch state("/" + p) {
	case fileMasked:
		return "", false
	}
	fi, err := g.fsys.Lstat(p)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return "", false
	}
	name := path.Base(p)
	if !unit.Valid(name) {
		u.Problems = append(u.Problems, fmt.Sprintf("/%s: not a valid unit name", p))
		return "", false
	}
	return resolveTemplate(name, u.Name), true
}
