package install

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// SearchPath is the system manager's unit search path of systemd 252 as
// Debian builds it (split-usr: /lib/systemd/system before
// /usr/lib/systemd/system), in precedence order, as systemctl --root uses
// it: unit.SearchPath as image-absolute paths. Duplicates after following
// links (a merged-/usr image where /lib -> usr/lib) are kept, as systemd
// keeps them.
var SearchPath = searchPathOf(252)

// searchPathOf is SearchPath for systemd version v (unit.SearchPathOf).
func searchPathOf(v int) []string {
	dirs := unit.SearchPathOf(v)
	out := make([]string, len(dirs))
	for i, d := range dirs {
		out[i] = "/" + d
	}
	return out
}

const (
	persistentConfig = "/etc/systemd/system"
	transientDir     = "/run/systemd/transient"
)

var generatorDirs = []string{"/run/systemd/generator", "/run/systemd/generator.early", "/run/systemd/generator.late"}

// linkEntry is one symlink in a search directory itself, which
// find_symlinks judges by its name and its target's name.
type linkEntry struct {
	name     string // the link's own name
	destBase string // basename of what it points to
}

// searchDir is one directory of the search path, read once.
type searchDir struct {
	path     string // as in SearchPath
	resolved string // after following links; "" when it cannot be opened
	// entries are the directory's visible entries and their types.
	entries map[string]fs.FileMode
	names   []string // sorted visible entry names
	byName  map[string][]linkEntry
	byDest  map[string][]linkEntry
	// wantsNames counts links in *.wants/*.requires subdirectories by name
	// and wantsByTemplate lists them by the template of their name: there
	// find_symlinks ignores where a link points (ignore_destination).
	wantsNames      map[string]int
	wantsByTemplate map[string][]string
	// unlistedAbsent caches absent's answer for a directory that could
	// not be listed (once unlistedKnown).
	unlistedKnown, unlistedAbsent bool
	// clean says path is normalized; runtime says it is below /run.
	clean, runtime bool
}

// holds ports path_startswith(p, sd.path) != NULL; pClean is isClean(p).
func (sd *searchDir) holds(p string, pClean bool) bool {
	if !pClean || !sd.clean {
		_, ok := pathStartsWith(p, sd.path)
		return ok
	}
	return p == sd.path || sd.path == "/" || (strings.HasPrefix(p, sd.path) && p[len(sd.path)] == '/')
}

// index is the single pass over an image's unit directories: every search
// directory is listed once, every .wants/.requires directory once, every
// link read once and every file read at most once, however many units ask.
type index struct {
	src    rootfs.Source
	search []*searchDir
	// dirs caches listings of other directories (drop-in dirs) by path.
	dirs map[string]*dirListing
	// dirsResolved finds the listings read by their resolved path.
	dirsResolved map[string]*dirListing
	// files caches file contents by resolved path.
	files map[string]fileData
	// sections caches the [Install] sections of the files by resolved
	// path.
	sections map[string]*section
	// lstats and links cache lstat(2) and readlink(2) by resolved path.
	lstats map[string]lstatResult
	links  map[string]linkResult
	// chased caches chase results by their arguments.
	chased map[chaseKey]linkResult
	// version is the systemd version modelled, searchPath its search
	// path.
	version    int
	searchPath []string
	// byPath finds a search directory by its SearchPath entry.
	byPath map[string]*searchDir
	spec   *specifiers
	// dropInKeys holds the dropInKey of every ".d" entry of the search
	// directories.
	dropInKeys map[string]bool
	// ctx is the install context lookupState reuses.
	ctx installContext
	// checkAlso is set while lookupState runs: loads only check the
	// names of Also= lines (parser.checkOnly).
	checkAlso bool
	// searched remembers, by name, what unit_file_search found for an
	// info with a name alone while lookupState runs.
	searched map[string]searchResult
}

// newBareIndex returns an index that has read nothing yet.
func newBareIndex(fsys *rootfs.FS) *index {
	return &index{src: fsys.Raw(), dirs: map[string]*dirListing{}, dirsResolved: map[string]*dirListing{}, files: map[string]fileData{},
		lstats: map[string]lstatResult{}, links: map[string]linkResult{}, byPath: map[string]*searchDir{}}
}

type dirListing struct {
	resolved string
	names    []string               // visible, sorted
	types    map[string]fs.FileMode // of the visible entries, as lstat sees them
	err      error
}

type fileData struct {
	data []byte
	err  error
}

// newIndex reads the search directories of systemd version v.
func newIndex(fsys *rootfs.FS, v int) *index {
	x := newBareIndex(fsys)
	x.version, x.searchPath = v, searchPathOf(v)
	for _, p := range x.searchPath {
		sd := x.readSearchDir(p)
		x.search = append(x.search, sd)
		x.byPath[p] = sd
	}
	x.dropInKeys = map[string]bool{}
	for _, sd := range x.search {
		for _, n := range sd.names {
			if strings.HasSuffix(n, ".d") {
				x.dropInKeys[dropInKey(n)] = true
			}
		}
	}
	x.spec = &specifiers{}
	if data, err := x.readFileFollow("/etc/machine-id"); err == nil {
		x.spec.machineID = parseMachineID(data)
	}
	for _, p := range []string{"/etc/os-release", "/usr/lib/os-release"} {
		if data, err := x.readFileFollow(p); err == nil {
			x.spec.osRelease = parseOSRelease(data)
			break
		}
	}
	return x
}

// readSearchDir lists a search directory the way opendir() + FOREACH_DIRENT
// see it, and collects the links find_symlinks inspects.
func (x *index) readSearchDir(p string) *searchDir {
	sd := &searchDir{path: p, entries: map[string]fs.FileMode{}, byName: map[string][]linkEntry{}, byDest: map[string][]linkEntry{},
		wantsNames: map[string]int{}, wantsByTemplate: map[string][]string{},
		clean: isClean(p), runtime: isRuntime(p)}
	l := x.listDir(p)
	if l.err != nil {
		return sd
	}
	sd.resolved = l.resolved
	sd.names = l.names
	sd.entries = l.types
	for _, prev := range x.search {
		if prev.resolved == sd.resolved {
			// The same directory under another name (/lib -> usr/lib):
			// what it holds was collected already, and is only read.
			sd.byName, sd.byDest = prev.byName, prev.byDest
			sd.wantsNames, sd.wantsByTemplate = prev.wantsNames, prev.wantsByTemplate
			return sd
		}
	}
	for _, n := range sd.names {
		t := sd.entries[n]
		switch {
		case t&fs.ModeSymlink != 0:
			x.addLink(sd, joinPath(l.resolved, n), n)
		case t.IsDir():
			i := strings.LastIndexByte(n, '.')
			if i < 0 || !x.depDir(n[i:]) {
				continue
			}
			sub := joinPath(l.resolved, n)
			ents, err := x.src.ReadDir(fsName(sub))
			if err != nil {
				continue
			}
			for _, e := range ents {
				if unit.HiddenOrBackup(e.Name()) || e.Type()&fs.ModeSymlink == 0 {
					continue
				}
				n := e.Name()
				sd.wantsNames[n]++
				if t, err := nameTemplateOf(n); err == nil {
					sd.wantsByTemplate[t] = append(sd.wantsByTemplate[t], n)
				}
			}
		}
	}
	return sd
}

// UpholdsDirs is the systemd version from which .upholds directories and
// UpheldBy= count for enablement (as .wants and WantedBy= do).
const UpholdsDirs = 254

// depDir reports whether a subdirectory with this suffix holds the
// dependency links find_symlinks looks at: .wants and .requires, and
// .upholds from UpholdsDirs on.
func (x *index) depDir(suffix string) bool {
	switch suffix {
	case ".wants", ".requires":
		return true
	case ".upholds":
		return x.version >= UpholdsDirs
	}
	return false
}

func (x *index) addLink(sd *searchDir, p, name string) {
	dest, err := x.readlinkRaw(p)
	if err != nil {
		return
	}
	le := linkEntry{name: name, destBase: baseName(dest)}
	sd.byName[le.name] = append(sd.byName[le.name], le)
	sd.byDest[le.destBase] = append(sd.byDest[le.destBase], le)
}

// listDir lists directory p (following links to it inside the image),
// visible entries only, sorted; cached.
func (x *index) listDir(p string) *dirListing {
	if l, ok := x.dirs[p]; ok {
		return l
	}
	l := &dirListing{}
	x.dirs[p] = l
	// Below a search directory the index already knows what exists.
	if sd, ok := x.byPath[dirName(p)]; ok {
		n := baseName(p)
		if sd.resolved == "" {
			l.err = errNotExist
			return l
		}
		t, ok := sd.entries[n]
		switch {
		case !ok && !unit.HiddenOrBackup(n):
			l.err = errNotExist
			return l
		case ok && !t.IsDir() && t&fs.ModeSymlink == 0:
			l.err = errNotDir
			return l
		}
	}
	r, err := x.chase(p, false, false)
	if err != nil {
		l.err = err
		return l
	}
	if prev, ok := x.dirsResolved[r]; ok {
		// The same directory under another name: share its listing.
		l.resolved, l.names, l.types = r, prev.names, prev.types
		return l
	}
	ents, err := x.src.ReadDir(fsName(r))
	if err != nil {
		l.err = classify(err)
		return l
	}
	x.dirsResolved[r] = l
	l.resolved = r
	l.types = make(map[string]fs.FileMode, len(ents))
	for _, e := range ents {
		if !unit.HiddenOrBackup(e.Name()) {
			l.names = append(l.names, e.Name())
			l.types[e.Name()] = e.Type()
		}
	}
	slices.Sort(l.names)
	return l
}

// readFile reads the regular file at the resolved path r; cached.
func (x *index) readFile(r string) ([]byte, error) {
	if f, ok := x.files[r]; ok {
		return f.data, f.err
	}
	var f fileData
	f.data, f.err = x.readRaw(r)
	x.files[r] = f
	return f.data, f.err
}

// readRaw reads the regular file at the resolved path r, uncached. It is
// safe for concurrent use when the Source is.
func (x *index) readRaw(r string) ([]byte, error) {
	if d, ok := x.src.(fs.ReadFileFS); ok && isBounded(x.src) {
		// A host directory reads a file whole in one buffer sized from
		// its fstat, bounded like the generic path below; a run's
		// remembering view (rootfs.FS.Raw) reads each file once for
		// enablement, boot and facts, bounded the same.
		data, err := d.ReadFile(fsName(r))
		var pe *fs.PathError
		switch {
		case errors.Is(err, rootfs.ErrTooLarge):
			return nil, fmt.Errorf("read %s: %w", r, errTooLarge)
		case errors.As(err, &pe) && pe.Op == "read":
			return nil, fmt.Errorf("read %s: %w", r, err)
		}
		return data, err
	}
	f, err := x.src.Open(fsName(r))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", r, err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("read %s: %w", r, errTooLarge)
	}
	return data, nil
}

// isBounded reports whether src's ReadFile refuses what is larger than
// maxFileSize with rootfs.ErrTooLarge (and says a failed read with a
// *fs.PathError of Op "read"): a host directory and a run's remembering
// view.
func isBounded(src rootfs.Source) bool {
	switch src.(type) {
	case *rootfs.Dir:
		return true
	}
	return rootfs.IsRaw(src)
}

// maxFileSize bounds what is read of one unit, drop-in or preset file. A
// hostile image cannot make amilint read gigabytes; such a file is "bad"
// (systemd would read it, 1 MiB per line at most). It is rootfs's bound,
// which a host directory's ReadFile applies itself, so every Source agrees.
const maxFileSize = rootfs.MaxReadFile

var errTooLarge = errors.New("file larger than 64 MiB")

// readFileFollow reads p following every link inside the image.
func (x *index) readFileFollow(p string) ([]byte, error) {
	r, err := x.chase(p, false, false)
	if err != nil {
		return nil, err
	}
	fi, err := x.lstatRaw(r)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errNotReg
	}
	return x.readFile(r)
}

// confFiles ports conf_files_list_strv(suffix, flags 0): the visible
// entries ending in suffix of every directory, the first directory winning
// for each file name, sorted by file name. It returns resolved paths (for
// loading) and paths under the given directories (for display).
func (x *index) confFiles(dirs []string, suffix string) (resolved, shown []string) {
	seen := map[string]bool{}
	type hit struct{ name, r, s string }
	var hits []hit
	for _, d := range dirs {
		l := x.listDir(d)
		if l.err != nil {
			continue
		}
		for _, n := range l.names {
			if !strings.HasSuffix(n, suffix) || seen[n] {
				continue
			}
			seen[n] = true
			hits = append(hits, hit{n, joinPath(l.resolved, n), joinPath(d, n)})
		}
	}
	slices.SortFunc(hits, func(a, b hit) int { return strings.Compare(a.name, b.name) })
	for _, h := range hits {
		resolved = append(resolved, h.r)
		shown = append(shown, h.s)
	}
	return resolved, shown
}
