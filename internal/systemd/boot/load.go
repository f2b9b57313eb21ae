// Package boot owns the boot-time model of an image's systemd: it loads
// units the way the system manager does when it starts (fragments through
// the search path, aliases, templates, drop-ins, masks, .wants, .requires
// and .upholds directories, implicit and default dependencies,
// systemd-sysv-generator's units and those of the generators whose output
// is a function of the image and its boot loader's kernel command line
// (fstabgen.go: systemd-fstab-generator; sshgen.go: systemd-ssh-generator;
// pkggen.go: postgresql-generator, openvpn-generator,
// postfix-instance-generator, rpc-pipefs-generator; sdgen.go:
// systemd-rc-local-generator, systemd-system-update-generator;
// cloudinitgen.go: cloud-init-generator, for an assumed cloud),
// with /run a tmpfs holding only that output) and computes
// the initial boot transaction: the units that get a start job when
// default.target is isolated (or rescue.target, when default.target cannot
// be loaded), each explained by the shortest chain of edges from
// default.target, the units a started socket, timer, path or automount
// activates later, the ordering cycles among its jobs and the jobs systemd
// deletes to break them, and, when systemd cannot queue the transaction at
// all, its reason and the chain of requirements to the unit that blocks it. It
// follows the systemd version it is given where versions differ. It is not
// list-unit-files logic (enablement lives elsewhere) and it reads the image
// only through a rootfs view, never the host.
//
// # Reference
//
// The reference for every rule here is systemd itself, 252 and 257: the
// oracle tests run `systemd --test --system` chrooted in the Debian 12 and
// Debian 13 roots built by fixtures/debian/build.sh, and in variants of
// them (curated and seeded random trees), and compare its start jobs,
// failure reason and fallback with [Graph.Boot].
//
// # Limits
//
// What the model leaves out, each measured or reasoned against systemd:
//
//   - Generators other than systemd-sysv-generator,
//     systemd-fstab-generator, systemd-ssh-generator, cloud-init-generator
//     and the generators of pkggen.go, sdgen.go, cmdgen.go and
//     gettygen.go. Their output depends on the running machine
//     (gpt-auto's partitions); on the Debian roots they add no start job.
//   - systemd-getty-generator runs with the consoles the model
//     assumes the kernel registers from the command line's console=
//     words (the first per serial driver, the machine having the device;
//     none from the firmware) and, of the virtualizer consoles, a Xen
//     guest's hvc0 (--assume virtualization=xen), none for any other or
//     an unknown machine (gettygen.go); $SYSTEMD_GETTY_AUTO and the
//     getty.ttys.* credentials are assumed unset.
//   - cloud-init-generator and its ds-identify (cloudinitgen.go) are run
//     from the image's own scripts, for a virtual machine (not a
//     container) with DMI: the image's side exactly (/etc/cloud's
//     datasource_list, ds-identify.cfg, cloud-init.disabled and
//     .enabled, the kernel command line, the seeds of NoCloud, Ec2,
//     Azure, OVF, OpenNebula, AliYun, Bigstep and config drives, MAAS and
//     NoCloud configuration), the machine's as Options.Machine says:
//     the datasource it offers (--assume datasource=), found by its
//     dscheck_ function whatever else it probes, and no other; without
//     it, a datasource of the image's datasource_list — the boot on the
//     cloud the image is built for — and the chain's edge says so
//     (Edge.Assumes). Left out: datasources a machine answers "maybe"
//     (a non-strict Ec2 on an unknown platform, with maybe=all),
//     file systems labelled cidata or config-2 (the machine's), image
//     files of the Vultr, Scaleway, AltCloud and SmartOS checks, and a
//     container's /proc/1/cmdline. When the scripts are not ones the
//     port knows, or ds-identify's compiled-in defaults cannot be read,
//     or a ds-identify-env file would be sourced, nothing is written.
//   - Of systemd-ssh-generator only the local AF_UNIX listener is run:
//     its AF_VSOCK listener (when the machine has a vsock device), a
//     container's unix-export socket and the listeners of
//     systemd.ssh_listen= and the ssh.listen credential are left out.
//     nfs-server-generator is not run either: it
//     gives nfs-server.service RequiresMountsFor= the paths of
//     /etc/exports, but only of the entries whose client host names
//     resolve when it runs (client_lookup's getaddrinfo, before the
//     network is up), so an image exporting a path with a .mount unit of
//     its own may start that mount, which the model misses.
//   - The boot is a virtual machine's or bare metal's, not a container's
//     (/sys writable): device units exist, a mount or swap unit file
//     requires the device it mounts, and systemd-fstab-generator keeps
//     device entries and swaps. Its kernel command line is the one
//     --assume states, else the one the image's boot loader passes
//     (condition.BootCmdLine), else empty; boot loader configurations
//     that disagree count as none. Of systemd-fstab-generator's other
//     inputs, the fstab.extra credential, the EFI SystemdOptions
//     variable and a measured kernel (x-systemd.pcrfs) are assumed
//     absent; unit names too long for systemd's hashed fallback, and
//     systemd.mount-extra= values with backslash escapes, are left out.
//   - Of the generators run: openvpn-generator sources
//     /etc/default/openvpn, of which only simple AUTOSTART= assignments
//     are read; rpc-pipefs-generator's lookup of the running machine's
//     mounts counts only the API file systems, and a pipefs-directory of
//     "$NAME" reads nfs.conf's [environment], never the generator's
//     environment; postgresql-generator's start.conf is read in the C
//     locale; systemd-rc-local-generator runs only when its executable
//     names one RC_LOCAL_PATH (sdgen.go), and its access(X_OK) is root's
//     (any execute bit, or a directory: the oracle, run as nobody, sees
//     only files executable by all). The unit systemd.unit= (or a
//     runlevel word) names is what PID 1 starts, as it does, in place of
//     the default.target that systemd-system-update-generator and
//     systemd-run-generator link, and systemd-debug-generator puts the
//     systemd.wants= links into its wants. Of systemd-debug-generator, the unit credentials of
//     256 and later (systemd.extra-unit.*, systemd.unit-dropin.*) are the
//     machine's and left out; a systemd.mask= or systemd.wants= path too
//     long for a unit name, which systemd names by a hash, is skipped;
//     DEBUGTTY is read from its executable (tty9 when it names none).
//     systemd-run-generator matches systemd.run= exactly from 253 on, "-"
//     and "_" alike before (the oracle shows 252 and 257; the version in
//     between is assumed). The kernel command line of every generator is
//     the one above: 257's EFI SystemdOptions variable is assumed absent.
//   - Outcomes systemd itself picks in hash-table order, which change from
//     run to run: two merely wanted units in Conflicts=, and which other
//     Requires= of a unit were added before one of them failed (and so
//     which failure systemd reports). The model picks one deterministic
//     outcome: the file's order. Which job systemd deletes to break an
//     ordering cycle with several candidates is one too: the model keeps
//     the jobs and names the units that may lose theirs
//     ([Boot.Uncertain]).
//   - Orderings that depend on the order systemd loads units in: a
//     target's default ordering after a unit it is PartOf= (added only when
//     that unit was loaded first; the model leaves it out), and, for two
//     targets pulling each other in, which one starts after the other (the
//     model takes the first in the order of the jobs). With Conflicts=
//     among the jobs systemd may miss an ordering cycle, walking a stop
//     job: the model then applies no deletion ([Cycle].Missable).
//   - Specifiers in a unit known by several names expand with the name the
//     model first loads; systemd uses the one its load queue dispatches
//     first.
//   - D-Bus activation (dbus-org.*.service names started on demand) and
//     mount, swap and device units systemd learns from the running kernel.
package boot

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/condition"
	"github.com/amilint/amilint/internal/systemd/unit"
	"github.com/amilint/amilint/internal/systemd/version"
)

// maxAliasHops is systemd's FOLLOW_MAX for alias chains in the unit name map.
const maxAliasHops = 64

// LoadState is a unit's load state, spelled as systemctl spells it.
type LoadState string

// Load states.
const (
	Loaded     LoadState = "loaded"
	NotFound   LoadState = "not-found"
	Masked     LoadState = "masked"
	BadSetting LoadState = "bad-setting"
	Error      LoadState = "error"
)

// Dep is one dependency a unit declares or is given implicitly.
type Dep struct {
	// Kind is the setting or mechanism: "Wants", "Requires", "Requisite",
	// "BindsTo", "Upholds", "PartOf", "Conflicts", ".wants", ".requires",
	// "Sockets", "Slice", "default" (DefaultDependencies=),
	// "Type=dbus", "LogNamespace", "DevicePolicy" (the modules a disk
	// image needs under a device policy), "Device" (the device a mount or
	// swap unit file mounts), "Quota" (up to 255 the quota services of a
	// mount with quota options), or a trigger kind: "socket", "timer",
	// "path", "automount".
	Kind string
	// Name is the unit named, as named (it may be an alias).
	Name string
	// Source is the image path (with a leading slash) of the file that
	// declares it: the unit file or drop-in, or the .wants/.requires link.
	// Implicit dependencies have the unit's fragment as Source.
	Source string
}

// Unit is one loaded unit: every name it is known by, where it was read
// from, its merged settings and its dependencies.
type Unit struct {
	// Name is the unit's id: the fragment's name (instantiated for
	// templates), or the requested name when there is no fragment.
	Name string
	// Names are every name of the unit, Name included, sorted.
	Names []string
	// Fragment is the image path of the unit file as found in the search
	// path (for a linked or masked unit, the link itself), "" if none. A
	// unit systemd-sysv-generator would make has its generated path under
	// /run/systemd/generator.late, one a package generator writes (see
	// pkggen.go) under /run/systemd/generator: both exist only at run time
	// (Graph.GeneratedBy names the generator).
	Fragment string
	// SourcePath is the file a generated unit is made from (the init
	// script), "" for unit files.
	SourcePath string
	// DropIns are the image paths of the .conf drop-ins applied, in order.
	DropIns []string
	// Options are the merged settings of fragment and drop-ins in the
	// order systemd applies them, with list resets applied: an empty
	// assignment removes the earlier assignments of that setting (except
	// for dependency settings, which systemd never resets).
	Options []*unit.Option
	// State is the load state.
	State LoadState
	// Masked reports a fragment that is /dev/null or an empty file.
	Masked bool
	// LoadError says why State is not Loaded or Masked.
	LoadError error
	// Deps are the unit's dependencies, file-declared and implicit, in a
	// stable order.
	Deps []Dep
	// Problems are non-fatal issues systemd would log and ignore
	// (an unknown specifier in a dependency, an invalid name).
	Problems []string
	// Sources are the fragment and the drop-ins read, in order, each with
	// its assignments as written (empty ones included, up to a syntax
	// error): what a reader that parses settings as systemd's own parsers
	// do needs, where Options has systemd's list resets applied.
	Sources []Source
	srcs    []string // Source of each Option
}

// Source is one file of a unit and the assignments read from it.
type Source struct {
	// Path is the image path of the unit file or drop-in.
	Path    string
	Options []*unit.Option
}

// Values returns the effective values of a list setting.
func (u *Unit) Values(section, name string) []string {
	return unit.Values(u.Options, section, name)
}

// Last returns the effective value of a single-valued setting.
func (u *Unit) Last(section, name string) (string, bool) {
	return unit.Last(u.Options, section, name)
}

// Graph is the loaded unit model of one image. Units are loaded on first
// use, as systemd loads them; a Graph is safe for concurrent use.
type Graph struct {
	fsys    *rootfs.FS
	version int      // the systemd version modelled
	search  []string // its search path
	dirs    []string // search path directories that exist, in precedence

	ids    map[string]idEntry         // systemd's unit_id_map
	byName map[string][]string        // fragment name -> names (unit_name_map)
	cache  map[string]map[string]bool // search dir -> its entries' names
	// entries are the names of every search dir's entries: most names
	// have no drop-in directory in any of them.
	entries map[string]bool
	states  map[string]fileState // nullOrEmpty results by image path

	generated map[string]genFile // generator output, by image path
	genDeps   map[string][]Dep   // generator .wants links, by unit name
	gen       *genOut            // the package generators' output, or nil

	// bootUnit is the unit the kernel command line asks PID 1 to start
	// in default.target's place (systemd.unit=, a runlevel word), "" for
	// none (pid1BootUnit).
	bootUnit string

	// zones are the image's time zones, for OnCalendar= (timeZones).
	zonesOnce sync.Once
	zones     unit.Zones

	mu    sync.Mutex
	units map[string]*Unit // every name loaded -> unit
	boot  *Boot

	// named holds every name of units, for Prepare to read without mu;
	// prepared holds what Prepare read ahead, by requested name.
	named    sync.Map // name -> struct{}
	prepared sync.Map // name -> *prepared
}

// prepared is a unit Prepare filled from the image ahead of its loading:
// complete says the implicit dependencies, which load other units in
// systemd's order, are still to be added.
type prepared struct {
	u        *Unit
	complete bool
}

// idEntry is one unit_id_map value: an image path (a file, or a link
// systemd opens and follows), or the name an alias link points to.
type idEntry struct {
	path  string // "/etc/systemd/system/x.service", or ""
	alias string // target unit name when path is ""
	link  string // image path of the alias link
}

// Load builds the unit name map of the image as systemd version sdVersion
// does (version.Default when 0) at boot, with nothing under /run (see
// RunDir), and loads default.target's closure lazily. It fails only when
// the search path cannot be read.
func Load(fsys *rootfs.FS, sdVersion int) (*Graph, error) {
	return LoadWith(fsys, sdVersion, Options{})
}

// Options are what the boot model takes from the machine that boots the
// image.
type Options struct {
	// CmdLine is the kernel command line the generators read, when
	// CmdLineSet; else the one the image's boot loader passes
	// (condition.BootCmdLine).
	CmdLine    string
	CmdLineSet bool
	// Machine is what the generators assume of the machine beyond the
	// image: its virtualization, the cloud it offers.
	Machine Machine
}

// Machine is what the boot model assumes of the machine beyond the image:
// its virtualization, for systemd-getty-generator, and for cloud-init's
// ds-identify the datasource it offers and its architecture.
type Machine struct {
	// Virtualization is the machine's, as detect_virtualization names it
	// (--assume virtualization=), "" when unknown:
	// systemd-getty-generator reads it for the virtualizer consoles.
	Virtualization string
	// Datasource is the ds-identify name of the datasource the machine
	// offers (Ec2, GCE, Azure, OpenStack, Oracle, NoCloud, ...), "none"
	// for none; "" assumes the machine offers one of the image's
	// datasource_list, the boot the image is built for.
	Datasource string
	// Architecture is the machine's, in systemd's names (x86-64, arm64):
	// ds-identify's default policy depends on it. "" reads it from the
	// image's binaries.
	Architecture string
}

// LoadWith is Load for a boot with opts.
func LoadWith(fsys *rootfs.FS, sdVersion int, opts Options) (*Graph, error) {
	// PID 1 loads units with an empty tmpfs on /run. Under a run's
	// remembering view the image is read through its memory (Raw), shared
	// with the enablement and the facts.
	if sdVersion == 0 {
		sdVersion = version.Default
	}
	// The generators see the empty tmpfs; the units, what they wrote.
	cmdline := opts.CmdLine
	if !opts.CmdLineSet {
		cmdline = condition.BootCmdLine(fsys)
	}
	gen := runGenerators(rootfs.New(atBoot{src: fsys.Raw(), run: newGenOut()}), sdVersion, cmdline, opts.Machine)
	img := rootfs.New(atBoot{src: fsys.Raw(), run: gen})
	g, err := loadGraph(img, sdVersion, unit.SearchPathOf(sdVersion))
	if err != nil {
		return nil, err
	}
	g.gen = gen
	g.bootUnit = pid1BootUnit(cmdline)
	return g, nil
}

// pid1BootUnit is the unit PID 1's parse_proc_cmdline_item takes from the
// kernel command line outside the initrd for do_queue_default_job: the
// last systemd.unit= naming a plain or instance unit (another name is
// ignored with a warning) or runlevel word (runlevel_to_target: "3",
// "single", "emergency", ...); "" when there is none.
func pid1BootUnit(cmdline string) string {
	u := ""
	for a := range cmdlineArgs(cmdline) {
		switch {
		case a.key == "systemd.unit":
			if a.hasValue && unit.Valid(a.value) && !unit.IsTemplate(a.value) {
				u = a.value
			}
		case !a.hasValue:
			if t := runlevelTarget(a.key); t != "" {
				u = t
			}
		}
	}
	return u
}

// LoadTree is Load with the image's /run as it is, the way offline tools
// read a tree (systemd-analyze --root, systemctl --root): for scoring or
// describing unit files, not for the boot transaction, which PID 1
// computes with an empty /run. The tree's generator and transient
// directories are not read: systemd-analyze --offline runs with
// LOOKUP_PATHS_TEMPORARY_GENERATED, which puts them in a new temporary
// directory of its own.
func LoadTree(fsys *rootfs.FS, sdVersion int) (*Graph, error) {
	if sdVersion == 0 {
		sdVersion = version.Default
	}
	search := slices.DeleteFunc(slices.Clone(unit.SearchPathOf(sdVersion)), func(d string) bool {
		return d == "run/systemd/transient" || strings.HasPrefix(d, "run/systemd/generator")
	})
	return loadGraph(fsys, sdVersion, search)
}

func loadGraph(fsys *rootfs.FS, sdVersion int, search []string) (*Graph, error) {
	g := &Graph{
		fsys:    fsys,
		version: sdVersion,
		search:  search,
		ids:     map[string]idEntry{},
		byName:  map[string][]string{},
		cache:   map[string]map[string]bool{},
		entries: map[string]bool{},
		states:  map[string]fileState{},
		units:   map[string]*Unit{},
	}
	for _, d := range g.search {
		// systemd skips a search directory it cannot open as one: a
		// file, a dangling link, a link loop, a mask. Errors reading a
		// directory (I/O on a corrupt image) mean the image cannot be
		// audited.
		fi, err := fsys.Stat(d)
		if err != nil || !fi.IsDir() {
			if err == nil || errors.Is(err, fs.ErrNotExist) || errors.Is(err, rootfs.ErrNotDir) ||
				errors.Is(err, rootfs.ErrMasked) || errors.Is(err, rootfs.ErrTooManyLinks) {
				continue
			}
			return nil, fmt.Errorf("read unit directory /%s: %w", d, err)
		}
		ents, err := fsys.ReadDir(d)
		if err != nil {
			return nil, fmt.Errorf("read unit directory /%s: %w", d, err)
		}
		g.dirs = append(g.dirs, d)
		names := make(map[string]bool, len(ents))
		g.cache[d] = names
		for _, e := range ents {
			names[e.Name()] = true
			g.entries[e.Name()] = true
			g.addID(d, e)
		}
	}
	g.sysv()
	// The reverse map, keyed by the fragment's name (instantiated for
	// instance aliases of templates), skipping masks and dangling links.
	for name := range g.ids {
		p, ok := g.fragmentOf(name)
		if !ok || g.nullOrEmpty(p) != fileOK {
			continue
		}
		dst := path.Base(p)
		if inst, isInst := unit.Instance(name); isInst && unit.IsTemplate(dst) {
			dst = unit.WithInstance(dst, inst)
		}
		g.byName[dst] = append(g.byName[dst], name)
	}
	for n := range g.byName {
		sort.Strings(g.byName[n])
	}
	return g, nil
}

// addID adds one search-directory entry to the name map, as systemd's
// unit_file_build_name_map does; the first (highest-precedence) entry of a
// name wins.
func (g *Graph) addID(dir string, e fs.DirEntry) {
	name := e.Name()
	if !unit.Valid(name) {
		return
	}
	if _, dup := g.ids[name]; dup {
		return
	}
	file := dir + "/" + name
	switch {
	case e.Type().IsRegular():
		g.ids[name] = idEntry{path: "/" + file}
		return
	case e.Type()&fs.ModeSymlink == 0:
		return
	}
	target, err := g.fsys.ReadLink(file)
	if err != nil || target == "" {
		return
	}
	abs := target
	if !strings.HasPrefix(target, "/") {
		abs = dir + "/" + target
	}
	// Resolve every component but the last, as chase_symlinks with
	// CHASE_NOFOLLOW|CHASE_NONEXISTENT does.
	simplified, err := g.fsys.ResolveParent(rootfs.Clean(abs))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return
	}
	tail, in := g.inSearchPath(simplified)
	if !in {
		// A linked unit file or a mask: systemd opens the link itself.
		g.ids[name] = idEntry{path: "/" + file}
		return
	}
	dst := path.Base(tail)
	if dst == name {
		return // a self-alias has no effect
	}
	if !validAlias(name, dst) {
		return
	}
	g.ids[name] = idEntry{alias: dst, link: "/" + file}
}

// inSearchPath returns the part of p below the first search path directory
// that contains it.
func (g *Graph) inSearchPath(p string) (string, bool) {
	for _, d := range g.search {
		if rest, ok := strings.CutPrefix(p, d+"/"); ok && rest != "" {
			return rest, true
		}
	}
	return "", false
}

// validAlias is unit_validate_alias_symlink_or_warn: same type, and
// template or instance names only for template targets (instances keep
// their instance).
func validAlias(src, dst string) bool {
	if !unit.Valid(dst) || unit.Type(src) != unit.Type(dst) {
		return false
	}
	si, sInst := unit.Instance(src)
	di, dInst := unit.Instance(dst)
	sTmpl, dTmpl := unit.IsTemplate(src), unit.IsTemplate(dst)
	switch {
	case sTmpl:
		return dTmpl
	case sInst:
		if dInst {
			return si == di
		}
		return dTmpl
	default:
		return !dTmpl && !dInst
	}
}

// fragmentOf follows aliases from name to a path, as unit_ids_map_get.
func (g *Graph) fragmentOf(name string) (string, bool) {
	id := name
	for range maxAliasHops {
		e, ok := g.ids[id]
		if !ok {
			return "", false
		}
		if e.path != "" {
			return e.path, true
		}
		id = e.alias
	}
	return "", false
}

// AliasLink returns the image path of the alias link that gives name to
// another unit, and the name it points to, if name is such an alias.
func (g *Graph) AliasLink(name string) (link, target string, ok bool) {
	e, found := g.ids[name]
	if !found || e.path != "" {
		if inst, isInst := unit.Instance(name); isInst {
			if e, found = g.ids[unit.Template(name)]; found && e.path == "" {
				return e.link, unit.WithInstance(e.alias, inst), true
			}
		}
		return "", "", false
	}
	return e.link, e.alias, true
}

// Unit returns the unit loaded under name, loading it first if needed. It
// returns nil only for a name that is not a valid unit name.
func (g *Graph) Unit(name string) *Unit {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.load(name)
}

// Names returns every name in the image's unit search path, sorted.
func (g *Graph) Names() []string {
	out := make([]string, 0, len(g.ids))
	for n := range g.ids {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func (g *Graph) load(name string) *Unit {
	if u, ok := g.units[name]; ok {
		return u
	}
	if !unit.Valid(name) {
		return nil
	}
	id, names, fragment := g.identify(name)
	if u, ok := g.units[id]; ok {
		g.register(u, names, name)
		return u
	}
	if p := g.takePrepared(name, id, names, fragment); p != nil {
		g.register(p.u, names, name)
		if p.complete {
			g.implicitDeps(p.u, unit.Type(p.u.Name), name)
		}
		return p.u
	}
	u := g.newUnit(id, names, fragment)
	g.register(u, names, name)
	g.fill(u, name)
	return u
}

// identify is the id, the sorted names and the fragment of the unit name
// loads as, as unit_file_find_fragment finds them.
func (g *Graph) identify(name string) (id string, names []string, fragment string) {
	fragment, names = g.findFragment(name)
	id = name
	if fragment != "" {
		id = path.Base(fragment)
		if unit.IsTemplate(id) {
			inst, _ := unit.Instance(name)
			id = unit.WithInstance(id, inst)
		}
		// findFragment's names are each once: only id may repeat one.
		if !slices.Contains(names, id) {
			names = append(names, id)
		}
	}
	sort.Strings(names)
	return id, names, fragment
}

func (g *Graph) newUnit(id string, names []string, fragment string) *Unit {
	return &Unit{Name: id, Names: names, Fragment: fragment, SourcePath: g.sourcePath(fragment)}
}

// register makes u the unit of its names and of the name requested.
func (g *Graph) register(u *Unit, names []string, requested string) {
	for _, n := range names {
		g.name(n, u)
	}
	g.name(requested, u)
}

func (g *Graph) name(n string, u *Unit) {
	if _, ok := g.units[n]; !ok {
		g.named.Store(n, struct{}{})
	}
	g.units[n] = u
}

// Prepare reads ahead, for each of names not loaded yet, what loading it
// will read of the image: its fragment, drop-ins and dependency links,
// parsed and merged. It runs beside the loading (on a core the loading
// leaves idle) and stops when stop reports true. Loading a name takes what
// was prepared for it instead of reading it, and adds what depends on the
// order of loading (the implicit dependencies, which load other units)
// itself: a unit is the same whether it was prepared or not. What a unit
// reads depends on its names alone, which the name map, fixed once the
// graph is built, decides.
func (g *Graph) Prepare(names []string, stop func() bool) {
	for _, name := range names {
		if stop() {
			return
		}
		if _, loaded := g.named.Load(name); loaded || !unit.Valid(name) {
			continue
		}
		id, ns, fragment := g.identify(name)
		if _, loaded := g.named.Load(id); loaded {
			continue
		}
		u := g.newUnit(id, ns, fragment)
		g.prepared.Store(name, &prepared{u: u, complete: g.fillFiles(u, name, g.fileState)})
	}
}

// takePrepared is what Prepare read for name, if it is the unit of that
// id, names and fragment.
func (g *Graph) takePrepared(name, id string, names []string, fragment string) *prepared {
	v, ok := g.prepared.LoadAndDelete(name)
	if !ok {
		return nil
	}
	p := v.(*prepared)
	if p.u.Name != id || p.u.Fragment != fragment || !slices.Equal(p.u.Names, names) {
		return nil
	}
	return p
}

// findFragment is unit_file_find_fragment: the fragment of name (directly,
// through aliases, or through its template) and the set of names of the
// unit, aliases instantiated for instances.
func (g *Graph) findFragment(name string) (string, []string) {
	var set nameSet
	add := set.add
	inst, isInst := unit.Instance(name)
	addNames := func(key, fragBase string) {
		if !unit.IsTemplate(name) {
			add(name)
		}
		for _, a := range g.byName[key] {
			if isInst && unit.IsTemplate(a) {
				in := unit.WithInstance(a, inst)
				if f, ok := g.fragmentOf(in); ok && fragBase != "" && path.Base(f) != fragBase {
					continue // an instance alias pointing elsewhere
				}
				add(in)
				continue
			}
			add(a)
		}
	}
	addNames(name, "")
	frag, ok := g.fragmentOf(name)
	if !ok && isInst {
		frag, ok = g.fragmentOf(unit.Template(name))
	}
	if !ok {
		return "", set.list
	}
	if base := path.Base(frag); base != name {
		addNames(base, base)
	}
	return frag, set.list
}

// nameSet collects names in order, each once: by a scan of the few names
// most units have, by a map once they are many (a unit of an image can have
// tens of thousands of aliases, and a scan for each would be quadratic).
type nameSet struct {
	list []string
	seen map[string]struct{}
}

// nameSetScanMax is how many names a nameSet scans before it maps them.
const nameSetScanMax = 16

// add adds n unless the set has it.
func (s *nameSet) add(n string) {
	if s.seen == nil {
		if slices.Contains(s.list, n) {
			return
		}
		s.list = append(s.list, n)
		if len(s.list) > nameSetScanMax {
			s.seen = make(map[string]struct{}, 2*len(s.list))
			for _, m := range s.list {
				s.seen[m] = struct{}{}
			}
		}
		return
	}
	if _, ok := s.seen[n]; ok {
		return
	}
	s.seen[n] = struct{}{}
	s.list = append(s.list, n)
}

// fileState classifies a fragment for masking.
type fileState int

const (
	fileOK      fileState = iota
	fileMasked            // /dev/null or an empty regular file
	fileMissing           // dangling, unreadable or not a regular file
)

// nullOrEmpty is systemd's null_or_empty_path on an image path,
// remembered (under mu).
func (g *Graph) nullOrEmpty(p string) fileState {
	if st, ok := g.states[p]; ok {
		return st
	}
	st := g.fileState(p)
	g.states[p] = st
	return st
}

// fileState is nullOrEmpty, not remembered: safe without mu.
func (g *Graph) fileState(p string) fileState {
	if _, ok := g.generated[p]; ok {
		return fileOK
	}
	return g.statFile(p)
}

func (g *Graph) statFile(p string) fileState {
	fi, err := g.fsys.Stat(rootfs.Clean(p))
	switch {
	case errors.Is(err, rootfs.ErrMasked):
		return fileMasked
	case err != nil:
		return fileMissing
	case fi.Mode().IsRegular() && fi.Size() == 0:
		return fileMasked
	case !fi.Mode().IsRegular():
		if fi.Mode()&fs.ModeCharDevice != 0 {
			return fileMasked
		}
		return fileMissing
	}
	return fileOK
}
