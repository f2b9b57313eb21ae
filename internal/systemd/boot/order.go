package boot

import (
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// order is the ordering a loaded unit has with other units, by name, as
// systemd records it while loading the unit: the units it starts after
// and the units it starts before.
type order struct {
	after, before []string
}

// orderingKinds are the dependency kinds of [Unit.Deps] that systemd adds
// together with an After= on the unit named (unit_add_two_dependencies
// with UNIT_AFTER): the slice (unit_add_slice_dependencies), sysinit.target
// of the default dependencies (*_add_default_dependencies), dbus.socket of
// Type=dbus (service_add_extras), the mounts a path needs
// (unit_add_mount_dependencies), the journal of a log namespace and the
// modules of a disk image (unit_add_exec_dependencies,
// unit_patch_contexts), Sockets= (config_parse_service_sockets) and the
// device a mount or swap is on (unit_add_node_dependency).
var orderingKinds = []string{"Slice", "default", "Type=dbus", "RequiresMountsFor", "WantsMountsFor", "LogNamespace", "DevicePolicy", "Sockets", "Device"}

// ordering is the ordering of the loaded unit u of type t: [Unit] After=
// and Before= (specifiers expanded and templates resolved as for the other
// dependency settings, invalid names ignored), the orderings that come
// with its implicit dependencies, its type's default dependencies and the
// orderings of its execution settings. Orderings only on units that never
// start at boot (shutdown.target, umount.target) are left out. The
// default orderings of targets, which depend on the units they pull in,
// are targetOrder's.
func (g *Graph) ordering(u *Unit) order {
	var o order
	for _, opt := range u.Options {
		if opt.Section != "Unit" || opt.Name != "After" && opt.Name != "Before" {
			continue
		}
		for w := range strings.FieldsSeq(opt.Value) {
			n, err := printfName(u.Name, w)
			if err != nil {
				continue
			}
			if n = resolveTemplate(n, u.Name); !unit.Valid(n) {
				continue
			}
			if opt.Name == "After" {
				o.after = append(o.after, n)
			} else {
				o.before = append(o.before, n)
			}
		}
	}
	for _, d := range u.Deps {
		switch {
		case slices.Contains(orderingKinds, d.Kind):
			o.after = append(o.after, d.Name)
		case d.Kind == "Quota":
			o.before = append(o.before, d.Name)
		case isTrigger(d.Kind):
			// socket_add_extras, timer_, path_ and
			// automount_add_trigger_dependencies: the trigger starts
			// before the unit it triggers.
			o.before = append(o.before, d.Name)
		}
	}
	t := unit.Type(u.Name)
	if hasExecContext(t) && (t != "socket" || g.socketHasExec(u, u.Name)) {
		o.after = append(o.after, g.execOrdering(u, sectionOf(t))...)
	}
	if t == "swap" && g.swapFileWhat(u) {
		// swap_add_device_dependencies: a swap file may need a
		// writable file system.
		o.after = append(o.after, "systemd-remount-fs.service")
	}
	if !defaultDeps(u) {
		return o
	}
	switch t {
	case "service":
		o.after = append(o.after, "basic.target")
	case "socket":
		o.before = append(o.before, "sockets.target")
	case "timer":
		o.before = append(o.before, "timers.target")
		// timer_add_default_dependencies: a calendar timer also
		// orders after the clock is set.
		if _, calendars := g.timerValues(u, u.Name); calendars > 0 {
			o.after = append(o.after, "time-sync.target", "time-set.target")
		}
	case "path":
		o.before = append(o.before, "paths.target")
	case "automount":
		o.before = append(o.before, "local-fs.target")
		o.after = append(o.after, "local-fs-pre.target")
	case "swap":
		o.before = append(o.before, "swap.target")
	case "mount":
		g.mountOrdering(u, &o)
	}
	return o
}

// defaultDeps is DefaultDependencies= (yes unless set otherwise).
func defaultDeps(u *Unit) bool {
	v, _ := u.Last("Unit", "DefaultDependencies")
	return parseBool(v, true)
}

// execOrdering is the ordering unit_add_exec_dependencies gives the
// execution settings of section sec: after systemd-remount-fs.service for
// state, cache and logs directories, after systemd-tmpfiles-setup.service
// (and, up to 256, tmp.mount) for a private /tmp, after
// systemd-udevd.service for a root image, and after the journal's socket
// when the unit logs to the journal or the kernel log (the manager's
// default) and has no log namespace (whose sockets are LogNamespace
// dependencies).
func (g *Graph) execOrdering(u *Unit, sec string) []string {
	var after []string
	for _, d := range execDirList(u, sec, u.Name, g.version) {
		if d.setting == "StateDirectory" || d.setting == "CacheDirectory" || d.setting == "LogsDirectory" {
			after = append(after, "systemd-remount-fs.service")
			break
		}
	}
	if ok, _ := g.privateTmp(u, sec); ok {
		if g.version < wantsMountsFor {
			after = append(after, "tmp.mount")
		}
		after = append(after, "systemd-tmpfiles-setup.service")
	}
	if image, _, _ := pathSetting(u, sec, "RootImage", u.Name, g.version); image != "" {
		after = append(after, "systemd-udevd.service")
	}
	if ns, _ := logNamespace(u, sec, u.Name, g.version); ns == "" && (logsToJournal(u, sec, "StandardOutput", true) || logsToJournal(u, sec, "StandardError", false)) {
		after = append(after, "systemd-journald.socket")
	}
	return after
}

// logsToJournal reports whether the output setting name of section sec
// (its last value) is the journal or the kernel log; def is whether the
// manager's default is (DefaultStandardOutput=journal,
// DefaultStandardError=inherit).
func logsToJournal(u *Unit, sec, name string, def bool) bool {
	v, ok := u.Last(sec, name)
	if !ok || v == "" {
		return def
	}
	switch v {
	case "journal", "journal+console", "kmsg", "kmsg+console", "syslog", "syslog+console":
		return true
	}
	return false
}

// mountOrdering is mount_add_default_ordering_dependencies and
// mount_add_default_network_dependencies for the mount unit u: before
// local-fs.target (remote-fs.target for a network mount) unless nofail,
// after local-fs-pre.target (remote-fs-pre.target), a network mount after
// network.target and network-online.target, a tmpfs after swap.target.
// Extrinsic mounts are left alone (mount_is_extrinsic: fstabIsExtrinsic,
// the mounts of /, /usr and /etc, those below the API file systems and
// /run/initramfs, and x-initrd.mount ones).
func (g *Graph) mountOrdering(u *Unit, o *order) {
	opts, _ := lastPrintf(u, "Mount", "Options", u.Name, g.version)
	if fstabIsExtrinsic(namePath(u.Name), opts) {
		return
	}
	fstype, _ := lastPrintf(u, "Mount", "Type", u.Name, g.version)
	network := fstabTestOption(opts, "_netdev") || slices.Contains(networkFS, strings.TrimPrefix(fstype, "fuse."))
	before, after := "local-fs.target", "local-fs-pre.target"
	if network {
		before, after = "remote-fs.target", "remote-fs-pre.target"
	}
	if !fstabTestOption(opts, "nofail") {
		o.before = append(o.before, before)
	}
	o.after = append(o.after, after)
	if network {
		o.after = append(o.after, "network.target", "network-online.target")
	}
	if fstype == "tmpfs" {
		o.after = append(o.after, "swap.target")
	}
}

// targetPulls are the dependency kinds whose unit a target orders itself
// after by default (UNIT_ATOM_DEFAULT_TARGET_DEPENDENCIES of the reverse
// dependency: Wants=, Requires=, Requisite=, BindsTo=, Upholds= and their
// directories).
var targetPulls = []string{"Wants", "Requires", "Requisite", "BindsTo", "Upholds", ".wants", ".requires", ".upholds", "sysv"}

// orderGraph is the ordering among the start jobs of a transaction: for
// each job, the jobs that start after it.
type orderGraph map[*Unit][]*Unit

// buildOrder is the ordering among the units of jobs: each unit's own
// (ordering), and a target's default one: a target with default
// dependencies starts after each unit with default dependencies it pulls
// in, unless that unit is ordered after it already
// (unit_add_default_target_dependency, run for every loaded unit once the
// load queue is empty, manager_dispatch_target_deps_queue).
func (g *Graph) buildOrder(jobs []*Unit) orderGraph {
	in := make(map[*Unit]bool, len(jobs))
	for _, u := range jobs {
		in[u] = true
	}
	after := make(map[*Unit]map[*Unit]bool, len(jobs))
	edge := func(first, then *Unit) {
		if first == nil || then == nil || first == then || !in[first] || !in[then] {
			return
		}
		if after[then] == nil {
			after[then] = map[*Unit]bool{}
		}
		after[then][first] = true
	}
	for _, u := range jobs {
		o := g.ordering(u)
		for _, n := range o.after {
			edge(g.load(n), u)
		}
		for _, n := range o.before {
			edge(u, g.load(n))
		}
	}
	for _, t := range jobs {
		if unit.Type(t.Name) != "target" || !defaultDeps(t) {
			continue
		}
		for _, d := range t.Deps {
			if !slices.Contains(targetPulls, d.Kind) {
				continue
			}
			if x := g.load(d.Name); x != nil && in[x] && defaultDeps(x) && !after[x][t] {
				edge(x, t)
			}
		}
	}
	og := orderGraph{}
	for _, u := range jobs {
		for v := range after[u] {
			og[v] = append(og[v], u)
		}
	}
	for _, l := range og {
		slices.SortFunc(l, func(a, b *Unit) int { return strings.Compare(a.Name, b.Name) })
	}
	return og
}
