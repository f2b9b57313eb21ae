// Package install owns unit file enablement: the exact offline model of
// `systemctl --root=DIR list-unit-files` of systemd 252 (src/shared/install.c:
// unit_file_get_list, unit_file_lookup_state, find_symlinks*), presets and
// first-boot detection. It reads an image only through rootfs, builds one
// index of the unit directories per call, and never writes.
//
// Paths in its results are image-absolute ("/lib/systemd/system/ecs.service").
//
// # Differences from systemctl --root
//
// One, on purpose: systemctl opens the search directories and drop-in
// directories through the host's kernel, so an absolute link to a
// directory, or a relative one climbing above the root, makes it read the
// host's files. This package resolves every link inside the image. The
// search path is Debian's systemd 252 one (/lib/systemd/system before
// /usr/lib/systemd/system); systemd 252 does not count .upholds links or
// UpheldBy= for enablement, and neither does this package.
package install

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
	"github.com/amilint/amilint/internal/systemd/version"
)

// State is a unit file's enablement state, spelled as systemctl spells it.
type State string

// The states of systemd 252's unit_file_state_table.
const (
	Enabled        State = "enabled"
	EnabledRuntime State = "enabled-runtime"
	Linked         State = "linked"
	LinkedRuntime  State = "linked-runtime"
	Alias          State = "alias"
	Masked         State = "masked"
	MaskedRuntime  State = "masked-runtime"
	Static         State = "static"
	Disabled       State = "disabled"
	Indirect       State = "indirect"
	Generated      State = "generated"
	Transient      State = "transient"
	Bad            State = "bad"
)

// UnitFile is one entry of list-unit-files.
type UnitFile struct {
	// Name is the unit file name ("ecs.service").
	Name string
	// State is its enablement state.
	State State
	// Path is where the name was found first in the search path, as an
	// image path; it may be a symlink.
	Path string
	// Fragment is the unit file the name resolves to (after aliases and
	// links), or "" when the unit is masked or bad.
	Fragment string
	// DropIns are the drop-in files systemd applies when it loads the
	// unit: <name>.d, the template's, the prefix dirs (foo-.service.d) and
	// the type dir (service.d), in order of application.
	DropIns []string
	// Aliases are the other listed names that are aliases of this unit.
	Aliases []string
	// Err says why the state is bad; nil otherwise.
	Err error

	unit string // the name the unit loads under (info->name)
}

type fileType int

const (
	typeInvalid fileType = iota
	typeRegular
	typeSymlink
	typeMasked
)

// installInfo is install.c's InstallInfo.
type installInfo struct {
	name          string
	path          string
	typ           fileType
	symlinkTarget string
	// linked marks a symlink to outside the search path (INSTALL_MODE_LINKED):
	// it is followed whatever the target's name.
	linked          bool
	aliases         []string
	wantedBy        []string
	requiredBy      []string
	upheldBy        []string
	also            []string
	defaultInstance string
	// aliasSet holds aliases once hasAlias needs it.
	aliasSet map[string]struct{}
}

// aliasScanMax is how many aliases hasAlias scans before it builds a set.
const aliasScanMax = 16

// hasAlias reports whether name is one of i's aliases, which must not change
// any more (the info is loaded): a scan of the few most units have, a set
// past that, built on the first call. is_symlink_with_known_name runs for
// every link that points to the unit, and a unit can have thousands of
// links and thousands of Alias= names; scanning the names for each link
// was quadratic.
func (i *installInfo) hasAlias(name string) bool {
	if len(i.aliases) <= aliasScanMax {
		return slices.Contains(i.aliases, name)
	}
	if i.aliasSet == nil {
		i.aliasSet = make(map[string]struct{}, len(i.aliases))
		for _, a := range i.aliases {
			i.aliasSet[a] = struct{}{}
		}
	}
	_, ok := i.aliasSet[name]
	return ok
}

func (i *installInfo) hasRules() bool {
	return len(i.aliases) > 0 || len(i.wantedBy) > 0 || len(i.requiredBy) > 0 || len(i.upheldBy) > 0
}

// installContext is install.c's InstallContext: the infos of one lookup by name.
type installContext map[string]*installInfo

// List returns every unit file of the image with its state, sorted by name:
// the unit set and states `systemctl --root=DIR list-unit-files` of systemd
// version sdVersion prints (version.Default when 0).
func List(fsys *rootfs.FS, sdVersion int) ([]UnitFile, error) {
	if fsys == nil {
		return nil, errors.New("list unit files: no image")
	}
	if sdVersion == 0 {
		sdVersion = version.Default
	}
	x := newIndex(fsys, sdVersion)
	seen := map[string]bool{}
	type listed struct{ name, path string }
	var names []listed
	for _, sd := range x.search {
		if sd.resolved == "" {
			continue
		}
		for _, n := range sd.names {
			if seen[n] || !nameIsValid(n, nameAny) {
				continue
			}
			t := sd.entries[n]
			if t&fs.ModeSymlink == 0 && !t.IsRegular() {
				continue
			}
			seen[n] = true
			names = append(names, listed{n, joinPath(sd.path, n)})
		}
	}
	out := make([]UnitFile, 0, len(names))
	for _, l := range names {
		out = append(out, x.unitFile(l.name, l.path))
	}
	slices.SortFunc(out, func(a, b UnitFile) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	// Aliases: names whose state is alias point at their unit's fragment.
	byFragment := map[string]int{}
	for i, u := range out {
		if u.State != Alias && u.Fragment != "" {
			if _, ok := byFragment[u.Fragment]; !ok || baseName(u.Fragment) == u.Name {
				byFragment[u.Fragment] = i
			}
		}
	}
	for _, u := range out {
		if u.State == Alias {
			if i, ok := byFragment[u.Fragment]; ok {
				out[i].Aliases = append(out[i].Aliases, u.Name)
			}
		}
	}
	// Drop-ins, as the unit loader finds them for the unit and its aliases;
	// an alias shares its unit's.
	for i := range out {
		u := &out[i]
		if u.unit == "" || u.State == Alias {
			continue
		}
		u.DropIns = x.loaderDropIns(u.unit, u.Aliases)
	}
	for i := range out {
		u := &out[i]
		if u.State == Alias {
			if k, ok := byFragment[u.Fragment]; ok {
				u.DropIns = out[k].DropIns
			} else if u.unit != "" {
				u.DropIns = x.loaderDropIns(u.unit, []string{u.Name})
			}
		}
	}
	return out, nil
}

// unitFile computes one entry.
func (x *index) unitFile(name, path string) UnitFile {
	u := UnitFile{Name: name, Path: path}
	st, info, err := x.lookupState(name)
	if err != nil {
		u.State, u.Err = Bad, err
		return u
	}
	u.State = st
	if info.typ == typeRegular {
		u.Fragment = info.path
		u.unit = info.name
	}
	return u
}

// lookupState ports unit_file_lookup_state.
func (x *index) lookupState(name string) (State, *installInfo, error) {
	if !nameIsValid(name, nameAny) {
		return Bad, nil, fmt.Errorf("unit %s: %w", name, errInvalid)
	}
	// The infos of one lookup live until the next one: what the caller
	// keeps of the returned info are its strings.
	if x.ctx == nil {
		x.ctx = installContext{}
	}
	ctx := x.ctx
	clear(ctx)
	// The units Also= lines add to the context are never looked at here:
	// loading needs only to know whether adding one fails.
	x.checkAlso = true
	defer func() { x.checkAlso = false }()
	info, err := x.discover(ctx, name)
	if err != nil {
		return Bad, nil, fmt.Errorf("unit %s: %w", name, err)
	}
	switch info.typ {
	case typeMasked:
		if isRuntime(info.path) {
			return MaskedRuntime, info, nil
		}
		return Masked, info, nil
	case typeRegular:
	default:
		return Bad, nil, fmt.Errorf("unit %s: unexpected file type", name)
	}
	if name != baseName(info.path) && !nameIsValid(info.name, nameInstance) {
		return Alias, info, nil
	}
	parent := dirName(info.path)
	if slices.Contains(generatorDirs, parent) {
		return Generated, info, nil
	}
	if parent == transientDir {
		return Transient, info, nil
	}
	if st, ok := x.findSymlinksInScope(info, true); ok {
		return st, info, nil
	}
	if _, ok := x.findSymlinksInScope(info, false); ok {
		return Indirect, info, nil
	}
	switch {
	case info.hasRules():
		return Disabled, info, nil
	case len(info.also) > 0:
		return Indirect, info, nil
	}
	return Static, info, nil
}

// isRuntime ports path_is_runtime: everything below /run.
func isRuntime(p string) bool {
	_, ok := pathStartsWith(p, "/run")
	return ok
}

// add ports install_info_add for a name.
func (x *index) add(ctx installContext, name string) (*installInfo, error) {
	if !nameIsValid(name, nameAny) {
		return nil, fmt.Errorf("%q: %w", name, errInvalid)
	}
	if i, ok := ctx[name]; ok {
		return i, nil
	}
	i := &installInfo{name: name}
	ctx[name] = i
	return i, nil
}

// discover ports install_info_discover(SEARCH_LOAD|SEARCH_FOLLOW_CONFIG_SYMLINKS).
func (x *index) discover(ctx installContext, name string) (*installInfo, error) {
	i, err := x.add(ctx, name)
	if err != nil {
		return nil, err
	}
	return x.traverse(ctx, i)
}

// unitFileFollowSymlinkMax is UNIT_FILE_FOLLOW_SYMLINK_MAX.
const unitFileFollowSymlinkMax = 64

// traverse ports install_info_traverse.
func (x *index) traverse(ctx installContext, start *installInfo) (*installInfo, error) {
	if err := x.searchUnit(ctx, start); err != nil {
		return nil, err
	}
	i := start
	k := 0
	for i.typ == typeSymlink {
		k++
		if k > unitFileFollowSymlinkMax {
			return nil, errTooMany
		}
		err := x.follow(ctx, i, i.linked)
		if errors.Is(err, errXDev) {
			bn := baseName(i.symlinkTarget)
			if nameIsValid(i.name, nameInstance) && nameIsValid(bn, nameTemplate) {
				_, inst, err := nameInstanceOf(i.name)
				if err != nil {
					return nil, err
				}
				buf, err := nameReplaceInstance(bn, inst)
				if err != nil {
					return nil, err
				}
				if buf == i.name {
					if err := x.follow(ctx, i, true); err != nil {
						return nil, err
					}
					continue
				}
				bn = buf
			}
			i, err = x.add(ctx, bn)
			if err != nil {
				return nil, err
			}
			err = x.searchUnit(ctx, i)
			if errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("%s: %w", bn, errNoLink)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return i, nil
}

// follow ports install_info_follow.
func (x *index) follow(ctx installContext, i *installInfo, ignoreDifferentName bool) error {
	if i.typ != typeSymlink || i.symlinkTarget == "" {
		return errors.New("not a symlink")
	}
	if !ignoreDifferentName && baseName(i.symlinkTarget) != i.name {
		return errXDev
	}
	i.path = i.symlinkTarget
	i.symlinkTarget = ""
	i.typ = typeInvalid
	i.linked = false
	return x.loadOrReadlink(ctx, i, i.path, false)
}

// searchable reports the errors unit_file_search treats as "not here".
func searchable(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotDir) || errors.Is(err, fs.ErrPermission)
}

// searchUnit ports unit_file_search.
func (x *index) searchUnit(ctx installContext, i *installInfo) error {
	if i.typ != typeInvalid {
		return nil
	}
	if i.path != "" {
		return x.loadOrReadlink(ctx, i, i.path, false)
	}
	if !x.checkAlso || !i.fresh() {
		return x.searchUnitByName(ctx, i)
	}
	// While lookupState runs, finding a unit by its name changes nothing
	// but the info (Also= names are only checked): the outcome is the
	// name's, remembered. Every alias of a unit finds the unit itself by
	// its name; with 10,000 aliases and a drop-in adding to its lists,
	// each copied those lists.
	if r, ok := x.searched[i.name]; ok {
		*i = r.info
		i.clipLists()
		return r.err
	}
	err := x.searchUnitByName(ctx, i)
	if x.searched == nil {
		x.searched = map[string]searchResult{}
	}
	r := searchResult{info: *i, err: err}
	r.info.clipLists()
	x.searched[i.name] = r
	return err
}

// searchResult is what searchUnitByName left in a fresh info, and its
// error.
type searchResult struct {
	info installInfo
	err  error
}

// fresh reports whether i is as install_info_add makes it: a name alone.
func (i *installInfo) fresh() bool {
	return i.path == "" && i.typ == typeInvalid && i.symlinkTarget == "" && !i.linked && len(i.aliases) == 0 &&
		len(i.wantedBy) == 0 && len(i.requiredBy) == 0 && len(i.upheldBy) == 0 && len(i.also) == 0 &&
		i.defaultInstance == "" && i.aliasSet == nil
}

// clipLists clips i's lists, so that appending to them copies them: infos
// share them.
func (i *installInfo) clipLists() {
	i.aliases, i.wantedBy, i.requiredBy = slices.Clip(i.aliases), slices.Clip(i.wantedBy), slices.Clip(i.requiredBy)
	i.upheldBy, i.also = slices.Clip(i.upheldBy), slices.Clip(i.also)
	i.aliasSet = nil
}

// searchUnitByName ports unit_file_search for an info without a path.
func (x *index) searchUnitByName(ctx installContext, i *installInfo) error {
	template := ""
	if nameIsValid(i.name, nameInstance) {
		t, err := nameTemplateOf(i.name)
		if err != nil {
			return err
		}
		template = t
	}
	// load refuses a template or instance of a type that cannot be
	// templated before it looks at the path; past that check a search
	// directory the index knows lacks the name is "not here" without a
	// lookup.
	skipAbsent := !nameIsValid(i.name, nameTemplate|nameInstance) || typeMayTemplate(nameType(i.name))
	found := false
	for _, n := range []string{i.name, template} {
		if n == "" || found {
			continue
		}
		// absent cannot tell for a hidden name.
		skip := skipAbsent && !unit.HiddenOrBackup(n)
		for _, sd := range x.search {
			if skip && x.absent(sd, n) {
				continue
			}
			p := joinPath(sd.path, n)
			err := x.loadOrReadlink(ctx, i, p, false)
			if err == nil {
				i.path = p
				found = true
				break
			}
			if !searchable(err) {
				return err
			}
		}
	}
	if !found {
		return fmt.Errorf("cannot find unit %s: %w", i.name, fs.ErrNotExist)
	}
	if i.typ == typeMasked {
		return nil
	}
	var dirs []string
	for _, n := range []string{i.name, template} {
		if n != "" {
			dirs = x.appendDropInDirs(dirs, n+".d")
		}
	}
	files, _ := x.confFiles(dirs, ".conf")
	for _, f := range files {
		if err := x.loadOrReadlink(ctx, i, f, true); err != nil {
			return fmt.Errorf("load drop-in %s: %w", f, err)
		}
	}
	return nil
}

// absent reports whether lstatEntry of the unit name n, which is not
// unit.HiddenOrBackup, in the search directory sd is known to fail with an
// error unit_file_search skips (searchable), as the index can tell without
// building the path.
func (x *index) absent(sd *searchDir, n string) bool {
	if sd.resolved != "" {
		_, ok := sd.entries[n]
		return !ok
	}
	// lstatPath of a child of a directory that cannot be listed: the
	// directory's own chase and lstat decide, whatever the name.
	if !sd.unlistedKnown {
		sd.unlistedKnown = true
		sd.unlistedAbsent = x.unlistedAbsent(sd.path)
	}
	return sd.unlistedAbsent
}

// unlistedAbsent reports whether lstatPath of any entry of the directory
// dir fails with a searchable error because of dir itself.
func (x *index) unlistedAbsent(dir string) bool {
	parent, err := x.chase(dir, false, false)
	if err != nil {
		return searchable(err)
	}
	pfi, err := x.lstatRaw(parent)
	if err != nil {
		return searchable(err)
	}
	return !pfi.IsDir()
}

// loadOrReadlink ports unit_file_load_or_readlink.
func (x *index) loadOrReadlink(ctx installContext, i *installInfo, p string, dropin bool) error {
	err := x.load(ctx, i, p, dropin)
	if !errors.Is(err, errIsLink) || dropin {
		return err
	}
	target, outside, err := x.resolveSymlink(p)
	if err != nil {
		return err
	}
	i.symlinkTarget = target
	i.linked = outside
	if target == "/dev/null" {
		i.typ = typeMasked
	} else {
		i.typ = typeSymlink
	}
	return nil
}

// load ports unit_file_load with SEARCH_LOAD.
func (x *index) load(ctx installContext, i *installInfo, p string, dropin bool) error {
	var (
		data []byte
		r    string
	)
	if !dropin {
		t := nameType(i.name)
		if nameIsValid(i.name, nameTemplate|nameInstance) && !typeMayTemplate(t) {
			return fmt.Errorf("unit type %s cannot be templated: %w", t, errInvalid)
		}
		var (
			mode fs.FileMode
			err  error
		)
		r, mode, err = x.lstatEntry(p)
		if err != nil {
			return err
		}
		switch {
		case mode&fs.ModeSymlink != 0:
			return errIsLink
		case mode.IsDir():
			return errIsDir
		case mode&fs.ModeCharDevice != 0:
			fi, err := x.lstatRaw(r)
			if err != nil {
				return err
			}
			if !isNullDevice(fi) {
				return errNotReg
			}
			i.typ = typeMasked
			return nil
		case !mode.IsRegular():
			return errNotReg
		}
		data, err = x.readFile(r)
		if err != nil {
			return err
		}
		if len(data) == 0 {
			i.typ = typeMasked
			return nil
		}
	} else {
		var err error
		r, err = x.chase(p, false, false)
		if err != nil {
			return err
		}
		fi, err := x.lstatRaw(r)
		if err != nil {
			return err
		}
		if isNullDevice(fi) {
			return nil
		}
		if fi.IsDir() {
			return errIsDir
		}
		if !fi.Mode().IsRegular() {
			return errNotReg
		}
		data, err = x.readFile(r)
		if err != nil {
			return err
		}
		if len(data) == 0 {
			return nil
		}
	}
	ps := parser{info: i, spec: x.spec, upheldBy: x.version >= UpholdsDirs, checkOnly: x.checkAlso, also: func(n string) error {
		_, err := x.add(ctx, n)
		return err
	}}
	if err := ps.apply(x.section(r, data)); err != nil {
		return fmt.Errorf("parse %s: %w", p, err)
	}
	if !dropin {
		i.typ = typeRegular
	}
	return nil
}

// section returns the [Install] section of the file at the resolved path
// r, whose content is data: read once, whatever name loads it.
func (x *index) section(r string, data []byte) *section {
	if sec, ok := x.sections[r]; ok {
		return sec
	}
	sec := readSection(data)
	if x.sections == nil {
		x.sections = map[string]*section{}
	}
	x.sections[r] = sec
	return sec
}

// lstatEntry returns the resolved name and type of p as lstat(2) sees it
// (parents followed, the last component not), from the index when p is an
// entry of a search directory.
func (x *index) lstatEntry(p string) (string, fs.FileMode, error) {
	if sd, ok := x.byPath[dirName(p)]; ok && sd.resolved != "" {
		n := baseName(p)
		if t, ok := sd.entries[n]; ok {
			return joinPath(sd.resolved, n), t, nil
		}
		if !unit.HiddenOrBackup(n) {
			return "", 0, fs.ErrNotExist
		}
	}
	r, fi, err := x.lstatPath(p)
	if err != nil {
		return "", 0, err
	}
	return r, fi.Mode().Type(), nil
}

// resolveSymlink ports unit_file_resolve_symlink(resolve_destination_target):
// the normalized target of the link p, validated as an alias when it stays
// inside the search path, and whether it leaves the search path (a linked
// unit file).
func (x *index) resolveSymlink(p string) (string, bool, error) {
	r, _, err := x.lstatEntry(p)
	if err != nil {
		return "", false, err
	}
	target, err := x.readlinkRaw(r)
	if err != nil {
		return "", false, err
	}
	dir, file := dirName(p), baseName(p)
	t := target
	if len(t) == 0 || t[0] != '/' {
		t = dir + "/" + t
	}
	simplified, err := x.chase(t, true, true)
	if err != nil {
		return "", false, fmt.Errorf("resolve symlink %s -> %s: %w", p, target, err)
	}
	for _, sp := range x.searchPath {
		if _, ok := pathStartsWith(simplified, sp); ok {
			if err := validateAliasSymlink(file, baseName(simplified)); err != nil {
				return "", false, fmt.Errorf("alias %s -> %s: %w", p, target, err)
			}
			return simplified, false, nil
		}
	}
	return simplified, true, nil
}

// findSymlinksInScope ports find_symlinks_in_scope for the system scope.
func (x *index) findSymlinksInScope(info *installInfo, matchName bool) (State, bool) {
	var sameNameRuntime, sameNameConfig, enabledRuntime, enabledAtAll, ignoreSameName bool
	pathClean := isClean(info.path)
	for _, sd := range x.search {
		found, sameName := x.findSymlinks(sd, info, matchName, ignoreSameName)
		if found {
			if sd.path == persistentConfig {
				return Enabled, true
			}
			if sd.runtime {
				enabledRuntime = true
			} else {
				enabledAtAll = true
			}
		} else if sameName {
			if sd.path == persistentConfig {
				sameNameConfig = true
			} else if sd.runtime {
				sameNameRuntime = true
			}
		}
		if !ignoreSameName && sd.holds(info.path, pathClean) {
			ignoreSameName = true
		}
	}
	switch {
	case enabledRuntime:
		return EnabledRuntime, true
	case enabledAtAll && nameIsValid(info.name, nameInstance):
		return Static, true
	case sameNameConfig:
		return Linked, true
	case sameNameRuntime:
		return LinkedRuntime, true
	}
	return "", false
}

// findSymlinks ports find_symlinks + find_symlinks_in_directory over the
// index. In *.wants/*.requires directories only a link's name counts (the
// unit's name, or an instance of it when it is a template); in the search
// directory itself a link counts by its name or by its target's name.
func (x *index) findSymlinks(sd *searchDir, info *installInfo, matchAliases, ignoreSameName bool) (found, sameName bool) {
	if sd.resolved == "" {
		return false, false
	}
	if sd.wantsNames[info.name] > 0 {
		return true, false
	}
	for _, n := range sd.wantsByTemplate[info.name] {
		if n != info.name && (!matchAliases || knownName(info, n)) {
			return true, false
		}
	}
	check := func(e linkEntry) bool {
		foundPath := !ignoreSameName && e.name == info.name
		foundDest := e.destBase == info.name
		switch {
		case foundPath && foundDest:
			sameName = true
		case foundPath || foundDest:
			if !matchAliases || knownName(info, e.name) {
				return true
			}
		}
		return false
	}
	if !ignoreSameName {
		for _, e := range sd.byName[info.name] {
			if check(e) {
				return true, sameName
			}
		}
	}
	for _, e := range sd.byDest[info.name] {
		if check(e) {
			return true, sameName
		}
	}
	return false, sameName
}

// knownName ports is_symlink_with_known_name.
func knownName(i *installInfo, name string) bool {
	if name == i.name || i.hasAlias(name) {
		return true
	}
	if i.defaultInstance != "" && nameIsValid(i.name, nameTemplate) {
		if s, err := nameReplaceInstance(i.name, i.defaultInstance); err == nil && s == name {
			return true
		}
	}
	return false
}

// loaderDropIns lists the drop-ins systemd's unit loader applies to a unit
// (dropin.c unit_file_find_dropin_paths): for its name, then each alias,
// every search dir's <name>.d with, in the same dir, the template's and the
// dash-prefix ones (foo-bar-.service.d, foo-.service.d); last the type dir
// (service.d) of every search dir. Files are applied in name order, the
// first directory in that list winning for a name.
func (x *index) loaderDropIns(name string, aliases []string) []string {
	var dirs, cands []string
	for _, n := range append([]string{name}, aliases...) {
		if n != "" && n[0] != '.' && !x.dropInKeys[dropInKey(n)] {
			// No search dir holds a drop-in dir for n, its template or
			// its prefixes, and none of them is hidden.
			continue
		}
		// The names to look for are the same in every search dir.
		cands = unit.DropInDirs(cands[:0], n, ".d")
		for _, sd := range x.search {
			for _, d := range cands {
				dirs = x.appendDirIn(dirs, sd, d)
			}
		}
	}
	t := nameType(name)
	for _, sd := range x.search {
		dirs = x.appendDirIn(dirs, sd, t+".d")
	}
	_, shown := x.confFiles(dirs, ".conf")
	return shown
}

// dropInKey is what every name unit.DropInDirs(n) returns shares with n:
// the text before the first '-', '@' or '.'. The template and the prefix
// names keep at least that much of n and then go on with one of those
// three, so a drop-in dir whose name has another key is never looked for.
func dropInKey(n string) string {
	for i := 0; i < len(n); i++ {
		if c := n[i]; c == '-' || c == '@' || c == '.' {
			return n[:i]
		}
	}
	return n
}

// appendDirIn appends sd's subdirectory d when the index says it exists
// (or cannot tell, for hidden names).
func (x *index) appendDirIn(dirs []string, sd *searchDir, d string) []string {
	if sd.resolved == "" {
		return dirs
	}
	if _, ok := sd.entries[d]; ok || unit.HiddenOrBackup(d) {
		dirs = append(dirs, joinPath(sd.path, d))
	}
	return dirs
}

// appendDropInDirs appends <search dir>/d for every search directory in
// order, skipping those the index knows hold no such entry.
func (x *index) appendDropInDirs(dirs []string, d string) []string {
	for _, sd := range x.search {
		dirs = x.appendDirIn(dirs, sd, d)
	}
	return dirs
}
