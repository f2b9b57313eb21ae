package boot

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/image/disk/volid"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// cgroupTypes are the unit types with a cgroup context, which systemd
// places in a slice they Require.
var cgroupTypes = map[string]bool{"service": true, "socket": true, "mount": true, "swap": true, "scope": true, "slice": true}

// implicitDeps adds the dependencies a loaded unit gets from its settings
// and from systemd itself: [Unit] dependency settings, Sockets=, slices,
// DefaultDependencies=, Type=dbus, LogNamespace=, the modules of a disk
// image under a device policy, the mounts of the paths it needs
// (mountNeeds), and the trigger of
// sockets, timers, paths and automounts.
func (g *Graph) implicitDeps(u *Unit, t, requested string) {
	if u.State != Loaded {
		return
	}
	self := u.Fragment
	for i, o := range u.Options {
		switch {
		case o.Section == "Unit" && containsStr(depSettings, o.Name):
			for _, n := range g.depNames(u, requested, o.Value) {
				u.Deps = append(u.Deps, Dep{Kind: o.Name, Name: n, Source: u.srcs[i]})
			}
		case o.Section == "Service" && o.Name == "Sockets" && t == "service":
			for _, n := range g.depNames(u, requested, o.Value) {
				if unit.Type(n) == "socket" {
					u.Deps = append(u.Deps, Dep{Kind: "Sockets", Name: n, Source: u.srcs[i]})
				}
			}
		}
	}
	// LogNamespace= Requires the namespace's journald sockets (and, from
	// 257, its sync service); a socket takes its execution settings into
	// account only when it runs commands.
	if hasExecContext(t) && (t != "socket" || g.socketHasExec(u, requested)) {
		if ns, src := logNamespace(u, sectionOf(t), requested, g.version); ns != "" {
			names := []string{"systemd-journald@" + ns + ".socket", "systemd-journald-varlink@" + ns + ".socket"}
			if g.version >= 257 {
				names = append(names, "systemd-journald-sync@"+ns+".service")
			}
			for _, n := range names {
				u.Deps = append(u.Deps, Dep{Kind: "LogNamespace", Name: n, Source: src})
			}
		}
	}
	// A disk image under a device policy Wants the modules of its block
	// devices (unit_patch_contexts; a socket whether it runs commands or
	// not).
	if hasExecContext(t) {
		if src := g.imageModprobeSource(u, sectionOf(t), requested); src != "" {
			for _, n := range imageModprobes {
				u.Deps = append(u.Deps, Dep{Kind: "DevicePolicy", Name: n, Source: src})
			}
		}
	}
	for _, m := range g.mountNeeds(u, t, requested) {
		u.Deps = append(u.Deps, g.mountDeps(u, m)...)
	}
	if n := g.backingDevice(u, t, requested); n != "" {
		u.Deps = append(u.Deps, Dep{Kind: "Device", Name: n, Source: self})
	}
	if t == "mount" && g.version < generatorQuota && g.mountNeedsQuota(u, requested) {
		u.Deps = append(u.Deps, Dep{Kind: "Quota", Name: "systemd-quotacheck.service", Source: self},
			Dep{Kind: "Quota", Name: "quotaon.service", Source: self})
	}

	// Slices.
	if cgroupTypes[t] {
		if t == "slice" {
			if p := parentSlice(u.Name); p != "" {
				u.Deps = append(u.Deps, Dep{Kind: "Slice", Name: p, Source: self})
			}
		} else if s := g.sliceOf(u, t, requested); s != "" {
			u.Deps = append(u.Deps, Dep{Kind: "Slice", Name: s, Source: self})
		}
	}

	// DefaultDependencies=yes: the types whose default dependencies pull
	// something in Require sysinit.target.
	if v, _ := u.Last("Unit", "DefaultDependencies"); parseBool(v, true) {
		switch t {
		case "service", "socket", "timer", "path":
			u.Deps = append(u.Deps, Dep{Kind: "default", Name: "sysinit.target", Source: self})
		}
	}

	switch t {
	case "service":
		if g.serviceType(u, requested) == "dbus" && hasBusName(u, requested, g.version) {
			u.Deps = append(u.Deps, Dep{Kind: "Type=dbus", Name: "dbus.socket", Source: self})
		}
	case "socket":
		if lastBool(u, "Socket", "Accept", false) {
			u.Deps = append(u.Deps, Dep{Kind: "socket", Name: unit.Prefix(u.Name) + "@.service", Source: self})
			break
		}
		if n := g.lastName(u, requested, "Socket", "Service"); n != "" {
			u.Deps = append(u.Deps, Dep{Kind: "socket", Name: n, Source: self})
		} else {
			u.Deps = append(u.Deps, Dep{Kind: "socket", Name: changeSuffix(u.Name, "service"), Source: self})
		}
	case "timer", "path":
		if n := g.lastName(u, requested, sectionOf(t), "Unit"); n != "" {
			u.Deps = append(u.Deps, Dep{Kind: t, Name: resolveTemplate(n, requested), Source: self})
		} else {
			u.Deps = append(u.Deps, Dep{Kind: t, Name: changeSuffix(u.Name, "service"), Source: self})
		}
	case "automount":
		u.Deps = append(u.Deps, Dep{Kind: "automount", Name: changeSuffix(u.Name, "mount"), Source: self})
	}
}

// socketHasExec is socket_has_exec: whether the socket u runs any
// command.
func (g *Graph) socketHasExec(u *Unit, requested string) bool {
	for _, n := range execSettings["socket"] {
		if commandCount(u, "Socket", n, requested, g.version) > 0 {
			return true
		}
	}
	return false
}

func containsStr(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// changeSuffix replaces a unit name's type suffix.
func changeSuffix(name, t string) string {
	return strings.TrimSuffix(name, "."+unit.Type(name)) + "." + t
}

// lastName returns the last valid unit name of a single-name setting.
func (g *Graph) lastName(u *Unit, id, section, name string) string {
	v, ok := u.Last(section, name)
	if !ok {
		return ""
	}
	n, err := printfName(id, v)
	if err != nil || !unit.Valid(n) {
		u.Problems = append(u.Problems, fmt.Sprintf("%s=%s: not a valid unit name", name, clip(v)))
		return ""
	}
	return n
}

// depNames splits a dependency setting's value into unit names, expanding
// specifiers; invalid names and unknown specifiers are problems systemd
// logs and ignores.
func (g *Graph) depNames(u *Unit, id, v string) []string {
	var out []string
	for _, w := range strings.Fields(v) {
		n, err := printfName(id, w)
		if err != nil {
			u.Problems = append(u.Problems, err.Error())
			continue
		}
		if n = resolveTemplate(n, id); !unit.Valid(n) {
			u.Problems = append(u.Problems, fmt.Sprintf("%q: not a valid unit name", clip(n)))
			continue
		}
		out = append(out, n)
	}
	return out
}

// resolveTemplate is systemd's resolve_template: a dependency on a template
// ("foo@.service") means the instance of the depending unit id, or, when
// id has no instance, the instance named by id's prefix: Wants=foo@.service
// in bar.service means foo@bar.service.
func resolveTemplate(name, id string) string {
	if !unit.IsTemplate(name) {
		return name
	}
	inst, ok := unit.Instance(id)
	if !ok {
		inst = unit.Prefix(id)
	}
	return unit.WithInstance(name, inst)
}

// printfName is systemd's unit_name_printf for a unit named id: %n %N %p
// %i %j, the credential specifiers of the system manager and %%. The other
// specifiers (%H, %m, %b, ...) depend on the running machine; they are
// reported as errors rather than guessed. Past unit.NamePrintfMax bytes the
// expansion fails (unit.ErrExpansionTooLong), as systemd's does.
func printfName(id, s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if b.Len() > unit.NamePrintfMax {
			return "", fmt.Errorf("%q: %w", clip(s), unit.ErrExpansionTooLong)
		}
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 >= len(s) {
			return "", fmt.Errorf("specifier at end of %q", clip(s))
		}
		i++
		switch c := s[i]; c {
		case '%':
			b.WriteByte('%')
		case 'n', 'N', 'p', 'i', 'j', 'u', 'g', 'U', 'G':
			v, _, _ := unit.NameSpecifier(0, id, c) // these unescape nothing
			b.WriteString(v)
		default:
			return "", fmt.Errorf("specifier %%%c in %q depends on the running machine", c, clip(s))
		}
	}
	if b.Len() > unit.NamePrintfMax {
		return "", fmt.Errorf("%q: %w", clip(s), unit.ErrExpansionTooLong)
	}
	return b.String(), nil
}

// parseBool is systemd's parse_boolean with a default for unset or
// unparseable values.
func parseBool(v string, def bool) bool {
	if b, ok := unit.ParseBoolean(v); ok {
		return b
	}
	return def
}

// parentSlice is the slice a slice unit lives in: "a-b.slice" is in
// "a.slice", "a.slice" in "-.slice", "-.slice" in none.
func parentSlice(name string) string {
	if name == "-.slice" {
		return ""
	}
	p := strings.TrimSuffix(name, ".slice")
	i := strings.LastIndexByte(p, '-')
	if i < 0 {
		return "-.slice"
	}
	return p[:i] + ".slice"
}

// sliceOf is unit_set_default_slice after Slice=: instances live in a
// per-template "system-PREFIX.slice", everything else in system.slice.
func (g *Graph) sliceOf(u *Unit, t, requested string) string {
	if n := g.lastName(u, requested, sectionOf(t), "Slice"); n != "" && unit.Type(n) == "slice" {
		return n
	}
	if perpetual(u.Name) {
		return "-.slice"
	}
	if _, ok := unit.Instance(u.Name); ok {
		return "system-" + escapeName(unit.Prefix(u.Name)) + ".slice"
	}
	return "system.slice"
}

// sectionOf is the type-specific section of a unit type.
func sectionOf(t string) string {
	if t == "" {
		return ""
	}
	return strings.ToUpper(t[:1]) + t[1:]
}

// escapeName is systemd's unit_name_escape: "/" becomes "-", and anything
// but [a-zA-Z0-9:_.] (and a leading ".") becomes \xHH.
func escapeName(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '/':
			b.WriteByte('-')
		case c == '.' && i == 0, !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == ':' || c == '_' || c == '.'):
			fmt.Fprintf(&b, "\\x%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// pathName is unit_name_from_path: "/var/lib" gives "var-lib", "/" gives "-".
func pathName(p, t string) string {
	parts := strings.FieldsFunc(p, func(r rune) bool { return r == '/' })
	var clean []string
	for _, c := range parts {
		if c != "." {
			clean = append(clean, c)
		}
	}
	if len(clean) == 0 {
		return "-." + t
	}
	return escapeName(strings.Join(clean, "/")) + "." + t
}

// errRefusedLate marks a mount unit refused after its extras made the
// units that need its mount point depend on it: by mount_verify, or for
// its unit file (see mountExtrasRan).
var errRefusedLate = errors.New("refused after its dependencies were added")

// mountDeps is unit_add_mount_dependencies for one path the unit u
// needs: the mount unit of every prefix of the path that has a unit file,
// other than u itself, is required or wanted as m.kind says. One that did
// not load is skipped (unit_add_mount_dependencies skips units that did
// not load) unless it was refused late (errRefusedLate): systemd loads the
// mount unit after the unit that needs it, and the mount's extras, which
// add the dependencies of the units below its mount point, run before
// mount_verify and even when its unit file failed. A masked mount never
// adds them, nor one whose extras fail (a bad execution setting or
// What=), nor one whose Where= puts the mount point elsewhere. A path
// that is not normalized is a load error (see verify) and needs nothing.
func (g *Graph) mountDeps(u *Unit, m mountNeed) []Dep {
	if !strings.HasPrefix(m.path, "/") || !unit.PathNormalized(m.path) {
		return nil
	}
	var out []Dep
	parts := strings.FieldsFunc(m.path, func(r rune) bool { return r == '/' })
	for i := 0; i <= len(parts); i++ {
		name := pathName("/"+strings.Join(parts[:i], "/"), "mount")
		if !unit.Valid(name) || name == u.Name {
			continue
		}
		if mu := g.load(name); mu != nil && mu != u && mu.Fragment != "" && (mu.State == Loaded || errors.Is(mu.LoadError, errRefusedLate)) {
			out = append(out, Dep{Kind: m.kind, Name: name, Source: m.src})
		}
	}
	return out
}

// timerSettings are the settings config_parse_timer parses into the
// timer's one list of elapse values.
var timerSettings = []string{"OnActiveSec", "OnBootSec", "OnStartupSec", "OnUnitActiveSec", "OnUnitInactiveSec", "OnCalendar"}

// timerValues is how many elapse values config_parse_timer keeps of the
// timer u loaded as id, and how many of those are OnCalendar= ones (which
// timer_add_default_dependencies orders after the clock): an empty
// assignment of any of the settings empties the list; a value whose specifiers do not resolve
// (unit_full_printf), or that calendar_spec_from_string (OnCalendar=,
// with the image's time zones) or parse_sec (the others) refuses, is
// ignored. The same in systemd 252 and 257.
func (g *Graph) timerValues(u *Unit, id string) (kept, calendars int) {
	for _, src := range u.Sources {
		for _, o := range src.Options {
			if o.Section != "Timer" || !slices.Contains(timerSettings, o.Name) {
				continue
			}
			if o.Value == "" {
				kept, calendars = 0, 0
				continue
			}
			k, err := expand(g.version, id, o.Value, unit.FullPrintfMax)
			if err != nil {
				continue
			}
			if o.Name == "OnCalendar" {
				if unit.ParseCalendar(k, g.timeZones()) == nil {
					kept++
					calendars++
				}
			} else if _, err := unit.ParseSec(k); err == nil {
				kept++
			}
		}
	}
	return kept, calendars
}

// timeZones is what calendar_spec_from_string finds of the image's time
// zones: PID 1's local zone from /etc/localtime and the zone files of
// /usr/share/zoneinfo, read once.
func (g *Graph) timeZones() unit.Zones {
	g.zonesOnce.Do(func() { g.zones = unit.ImageZones(g.fsys) })
	return g.zones
}

// pathValue is the value the path setting name of section sec has once
// its assignments are parsed as config_parse_unit_path_printf does when
// failures are not fatal: one whose specifiers do not resolve, or that
// path_simplify_and_warn refuses (not absolute, not normalized), is
// ignored; an empty one unsets it. The value is expanded and simplified.
func pathValue(u *Unit, sec, name, id string, version int) (string, bool) {
	v, ok := "", false
	for _, src := range u.Sources {
		for _, o := range src.Options {
			if o.Section != sec || o.Name != name {
				continue
			}
			if o.Value == "" {
				v, ok = "", false
				continue
			}
			if p, why := absPath(version, id, o.Value); why == "" {
				v, ok = p, true
			}
		}
	}
	return v, ok
}

// swapWhat is the swap device of u for systemd version: What= or, unset,
// the path its name spells (swap_add_extras), simplified. Up to 253 What= is a path
// setting whose bad values are ignored (pathValue); later versions take
// any value whose specifiers resolve (config_parse_mount_node), the
// fstab tags LABEL=, UUID=, PARTUUID= and PARTLABEL= meaning their
// /dev/disk/by-* links.
func swapWhat(u *Unit, id string, version int) string {
	if version < swapMountNode {
		if p, ok := pathValue(u, "Swap", "What", id, version); ok {
			return p
		}
		return namePath(u.Name)
	}
	v, ok := mountNode(u, "Swap", id, version)
	if !ok {
		return namePath(u.Name)
	}
	return unit.PathSimplify(version, v)
}

// mountNode is What= of section sec as config_parse_mount_node keeps it:
// after specifiers, the fstab tags LABEL=, UUID=, PARTUUID= and
// PARTLABEL= meaning their /dev/disk/by-* links; a value whose specifiers
// do not resolve, or as long as PATH_MAX, is ignored; an empty one unsets
// it.
func mountNode(u *Unit, sec, id string, version int) (string, bool) {
	v, ok := "", false
	for _, src := range u.Sources {
		for _, o := range src.Options {
			if o.Section != sec || o.Name != "What" {
				continue
			}
			if o.Value == "" {
				v, ok = "", false
				continue
			}
			k, err := expand(version, id, o.Value, unit.FullPrintfMax)
			if err != nil {
				continue
			}
			k = udevNode(k)
			if len(k) >= unit.PathPrintfMax+1 {
				continue
			}
			v, ok = k, true
		}
	}
	return v, ok
}

// udevNode is fstab_node_to_udev_node: the fstab tags LABEL=, UUID=,
// PARTUUID= and PARTLABEL= name their /dev/disk/by-* link, the tag's
// value without one pair of enclosing quotes (unquote) and encoded as
// udev encodes a device node name (encode_devnode_name, volid.Encode); anything else is
// itself.
func udevNode(p string) string {
	for _, tag := range []string{"LABEL", "UUID", "PARTUUID", "PARTLABEL"} {
		if v, ok := strings.CutPrefix(p, tag+"="); ok {
			if len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
				v = v[1 : len(v)-1]
			}
			return "/dev/disk/by-" + strings.ToLower(tag) + "/" + volid.Encode(v)
		}
	}
	return p
}

// namePath is unit_name_to_path: the path a unit name spells, or "" when
// it spells none.
func namePath(name string) string {
	p, err := unit.PathUnescape(strings.TrimSuffix(name, "."+unit.Type(name)))
	if err != nil {
		return ""
	}
	return p
}

// swapMountNode is the first systemd version that parses Swap.What= with
// config_parse_mount_node.
const swapMountNode = 254

// verify is the type-specific *_verify step of systemd's loader: settings
// without which a unit is refused (bad-setting), and the implicit
// dependencies on mounts a path cannot have (error). Specifiers expand
// with the name the unit was requested by.
func (g *Graph) verify(u *Unit, t, requested string) error {
	bad := func(msg string) error { return fmt.Errorf("%s: %w: %s", u.Name, ErrBadSetting, msg) }
	commands := func(name string) int { return commandCount(u, sectionOf(t), name, requested, g.version) }
	switch t {
	case "service":
		start := commands("ExecStart")
		stop := commands("ExecStop")
		_, success := u.Last("Unit", "SuccessAction")
		if sa, _ := u.Last("Unit", "SuccessAction"); sa == "none" {
			success = false
		}
		typ := g.serviceType(u, requested)
		remain := lastBool(u, "Service", "RemainAfterExit", false)
		restart := lastWord(u, "Service", "Restart", restartModes, "no")
		bus := hasBusName(u, requested, g.version)
		switch {
		case start == 0 && stop == 0 && !success:
			return bad("Service has no ExecStart=, ExecStop=, or SuccessAction=. Refusing.")
		case typ != "oneshot" && start == 0:
			return bad("Service has no ExecStart= setting, which is only allowed for Type=oneshot services. Refusing.")
		case !remain && start == 0 && !success:
			return bad("Service has no ExecStart= and no SuccessAction= settings and does not have RemainAfterExit=yes set. Refusing.")
		case typ != "oneshot" && start > 1:
			return bad("Service has more than one ExecStart= setting, which is only allowed for Type=oneshot services. Refusing.")
		case typ == "oneshot" && (restart == "always" || restart == "on-success"):
			return bad("Service has Restart= set to either always or on-success, which isn't allowed for Type=oneshot services. Refusing.")
		case typ == "oneshot" && g.version < oneshotForceStatus && hasExitStatus(u, "RestartForceExitStatus"):
			return bad("Service has RestartForceExitStatus= set, which isn't allowed for Type=oneshot services. Refusing.")
		case typ == "oneshot" && lastWord(u, "Service", "ExitType", []string{"main", "cgroup"}, "main") == "cgroup":
			// (ExitType=cgroup itself is accepted: on the unified
			// cgroup hierarchy Debian boots with, systemd does not even
			// warn about it.)
			return bad("Service has ExitType=cgroup set, which isn't allowed for Type=oneshot services. Refusing.")
		case typ == "dbus" && !bus:
			return bad("Service is of type D-Bus but no D-Bus service name has been specified. Refusing.")
		case typ == "forking" && privatePIDs(u, g.version):
			return bad("Service of Type=forking does not support PrivatePIDs=yes. Refusing.")
		}
	case "socket":
		// socket_add_extras, before socket_verify, fails the load when
		// a listen path is not normalized once simplified
		// (unit_require_mounts_for's -EPERM; AF_UNIX paths are kept as
		// written).
		for _, p := range socketPaths(u, requested, g.version) {
			if !unit.PathNormalized(unit.PathSimplify(g.version, p.path)) {
				return fmt.Errorf("%s: %w: listen path is not normalized: %s", u.Name, ErrRefusedSetting, clip(p.path))
			}
		}
		// The listen addresses are the ones the parser keeps, which can
		// leave none: it ignores an address socket_address_parse or
		// socket_address_parse_netlink refuses (a bad IP address or
		// port, vsock or netlink address, an AF_UNIX path too long), a
		// sequential packet socket that is not AF_UNIX, a path that is
		// not absolute and normalized and, from 257, a FIFO, message
		// queue or USB function path under /dev, /proc or /sys. An
		// ignored address is neither a non-accepting socket nor a node.
		ports := socketPorts(u, requested, g.version)
		if len(ports) == 0 {
			return bad("Unit has no Listen setting (ListenStream=, ListenDatagram=, ListenFIFO=, ...). Refusing.")
		}
		accept := lastBool(u, "Socket", "Accept", false)
		// Only stream and sequential packet sockets accept connections;
		// a socket's file system node is its FIFO or AF_UNIX path.
		nonAccept, nodes := false, 0
		for _, p := range ports {
			switch p.setting {
			case "ListenStream", "ListenSequentialPacket":
			default:
				nonAccept = true
			}
			switch p.setting {
			case "ListenStream", "ListenDatagram", "ListenSequentialPacket", "ListenFIFO":
				if p.path != "" {
					nodes++
				}
			}
		}
		switch {
		case accept && nonAccept:
			return bad("Unit configured for accepting sockets, but sockets are non-accepting. Refusing.")
		case (accept || g.version >= maxConnAlways) && maxConnections(u) == 0:
			return bad("MaxConnection= setting too small. Refusing.")
		}
		if accept {
			if _, ok := u.Last("Socket", "Service"); ok {
				return bad("Explicit service configuration for accepting socket units not supported. Refusing.")
			}
		}
		if symlinkCount(u, requested, g.version) > 0 && nodes != 1 {
			return bad("Unit has symlinks set but none or more than one node in the file system. Refusing.")
		}
	case "timer":
		// timer_verify: no elapse value the parser kept, and
		// OnClockChange= and OnTimezoneChange= (config_parse_bool keeps
		// the last boolean) both off.
		if kept, _ := g.timerValues(u, requested); kept == 0 && !lastBool(u, "Timer", "OnClockChange", false) &&
			!lastBool(u, "Timer", "OnTimezoneChange", false) {
			return bad("Timer unit lacks value setting. Refusing.")
		}
	case "path":
		// Only the paths config_parse_path_spec keeps count.
		if len(watchedPaths(u, requested, g.version)) == 0 {
			return bad("Path unit lacks path setting. Refusing.")
		}
	case "mount", "automount":
		// mount_add_extras checks the execution settings first.
		if err := g.verifyContexts(u, t, requested); err != nil {
			return err
		}
		// It then fails the load when the What= whose mounts the mount
		// needs is not normalized once simplified.
		if what, ok := mountWhatDep(u, requested, g.version); t == "mount" && ok && !unit.PathNormalized(unit.PathSimplify(g.version, what)) {
			return fmt.Errorf("%s: %w: What= is not a normalized path: %s", u.Name, ErrRefusedSetting, clip(what))
		}
		// Where= defaults to the path the name spells; a different one is
		// refused, and a mount unit file must say what to mount.
		if where, ok := pathValue(u, sectionOf(t), "Where", requested, g.version); ok && pathName(where, t) != u.Name {
			return bad("Where= setting doesn't match unit name. Refusing.")
		}
		// What mount_verify refuses from here on, the mount is refused
		// after it has made the units that need its path depend on it.
		late := func(msg string) error { return fmt.Errorf("%w (%w)", bad(msg), errRefusedLate) }
		where := namePath(u.Name)
		switch {
		case t == "mount" && apiMountPoint(where):
			return late("Cannot create mount unit for API file system " + where + ". Refusing.")
		case t == "mount" && g.version >= credentialMounts && pathBelow(where, "/run/credentials"):
			return late("Cannot create mount unit for credential mount '" + where + "'. Refusing.")
		case t == "automount" && where == "/":
			return bad("Cannot have an automount unit for the root directory. Refusing.")
		case t == "automount" && reservedAutomountOption(u, requested, g.version):
			return bad("ExtraOptions= setting may not contain a reserved option.")
		}
		if _, ok := mountWhat(u, requested, g.version); t == "mount" && !ok && !perpetual(u.Name) {
			return late("What= setting is missing. Refusing.")
		}
	case "swap":
		// swap_add_extras requires the mounts for the simplified device
		// path, which must be absolute and normalized; swap_verify then
		// wants the name the path spells among the unit's names.
		what := swapWhat(u, requested, g.version)
		switch {
		case !strings.HasPrefix(what, "/"):
			return fmt.Errorf("%s: %w: What= is not an absolute path: %s", u.Name, ErrRefusedSetting, what)
		case !unit.PathNormalized(what):
			return fmt.Errorf("%s: %w: What= is not a normalized path: %s", u.Name, ErrRefusedSetting, what)
		case !slices.Contains(ownNames(u), pathName(what, "swap")):
			return bad("Value of What= and unit name do not match, not loading.")
		}
	}
	return g.verifyContexts(u, t, requested)
}

// backingDevice is the device unit a mount or swap unit file requires
// (mount_add_device_dependencies, swap_add_device_dependencies through
// unit_add_node_dependency), "" if none: the What= of the file, below
// /dev/ or /sys/; for a mount not a bind mount, not /dev/root or /dev/nfs
// and not the mount of /. Device units exist only where /sys is
// writable: the model boots a virtual machine, not a container.
func (g *Graph) backingDevice(u *Unit, t, requested string) string {
	if u.Fragment == "" {
		return ""
	}
	var what string
	switch t {
	case "mount":
		w, ok := mountWhat(u, requested, g.version)
		if !ok || w == "/dev/root" || w == "/dev/nfs" || namePath(u.Name) == "/" {
			return ""
		}
		opts, _ := lastPrintf(u, "Mount", "Options", requested, g.version)
		fstype, _ := lastPrintf(u, "Mount", "Type", requested, g.version)
		if fstabTestOption(opts, "bind", "rbind") || fstype == "bind" || fstype == "rbind" {
			return ""
		}
		what = w
	case "swap":
		var ok bool
		if what, ok = g.swapFragmentWhat(u, requested); !ok {
			return ""
		}
	default:
		return ""
	}
	if !isDevicePath(what) {
		return ""
	}
	what = unit.PathSimplify(g.version, what)
	if !unit.PathNormalized(what) {
		return ""
	}
	return pathName(what, "device")
}

// swapFragmentWhat is the What= a swap unit file sets (the parameters
// swap_add_device_dependencies looks at), not the path its name spells.
func (g *Graph) swapFragmentWhat(u *Unit, requested string) (string, bool) {
	if u.Fragment == "" {
		return "", false
	}
	if g.version < swapMountNode {
		return pathValue(u, "Swap", "What", requested, g.version)
	}
	return mountNode(u, "Swap", requested, g.version)
}

// swapFileWhat reports a swap unit file whose What= is no device path
// (swap_add_device_dependencies orders it after systemd-remount-fs).
func (g *Graph) swapFileWhat(u *Unit) bool {
	w, ok := g.swapFragmentWhat(u, u.Name)
	return ok && w != "" && !isDevicePath(w)
}

// generatorQuota is the first systemd version modelled whose mount units
// leave quotas to systemd-fstab-generator (256 dropped
// mount_add_quota_dependencies).
const generatorQuota = 256

// mountNeedsQuota is mount_needs_quota for a mount unit file: a quota
// option, a file system type that needs quotacheck and quotaon (or none
// set), no bind mount. The mount then Wants= and starts before
// systemd-quotacheck.service and quotaon.service
// (mount_add_quota_dependencies).
func (g *Graph) mountNeedsQuota(u *Unit, requested string) bool {
	if u.Fragment == "" {
		return false
	}
	opts, _ := lastPrintf(u, "Mount", "Options", requested, g.version)
	fstype, set := lastPrintf(u, "Mount", "Type", requested, g.version)
	if set && !slices.Contains([]string{"ext2", "ext3", "ext4", "reiserfs", "jfs", "f2fs"}, fstype) {
		return false
	}
	if fstabTestOption(opts, "bind", "rbind") || fstype == "bind" || fstype == "rbind" {
		return false
	}
	return fstabTestOption(opts, "usrquota", "grpquota", "quota", "usrjquota", "grpjquota")
}
