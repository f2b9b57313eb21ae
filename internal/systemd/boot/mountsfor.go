package boot

import (
	"strings"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// mountNeed is one path whose mounts a unit needs: systemd's
// unit_require_mounts_for (unit_add_mounts_for from 256), with the kind
// of the dependency it gives on the mount units of the path's prefixes,
// "RequiresMountsFor" or, from 256, "WantsMountsFor".
type mountNeed struct {
	path, kind, src string
}

// wantsMountsFor is the first systemd version with WantsMountsFor=, which
// also turned the dependencies of WorkingDirectory=-, RootDirectory=,
// RootImage= and PrivateTmp= into Wants.
const wantsMountsFor = 256

// privateTmpDisconnected is the first systemd version where PrivateTmp=
// takes "connected" and "disconnected", and where DynamicUser= implies a
// disconnected /tmp rather than PrivateTmp=yes.
const privateTmpDisconnected = 257

// execDirPrefixes are the system manager's prefixes of the exec
// directories (manager->prefix).
var execDirPrefixes = []struct{ name, prefix string }{
	{"RuntimeDirectory", "/run"},
	{"StateDirectory", "/var/lib"},
	{"CacheDirectory", "/var/cache"},
	{"LogsDirectory", "/var/log"},
	{"ConfigurationDirectory", "/etc"},
}

// mountNeeds are the paths whose mounts the loaded unit u of type t
// needs, as systemd registers them while loading it: [Unit]
// RequiresMountsFor= and WantsMountsFor=, the execution settings
// (unit_add_exec_dependencies: the working and root directories, the root
// image, the exec directories, /var/tmp and /tmp of PrivateTmp=; a socket
// only when it runs commands), the file system paths a socket listens on,
// the paths a path unit watches, the stamp directory of a persistent
// timer, the parent of a mount's or automount's mount point, a mount's
// source and a swap's device. The paths of the type's own add_extras step
// are not checked here: the socket's and the mount's can fail the load
// (see verify).
func (g *Graph) mountNeeds(u *Unit, t, requested string) []mountNeed {
	var out []mountNeed
	add := func(p, kind, src string) { out = append(out, mountNeed{p, kind, src}) }
	for i, o := range u.Options {
		if o.Section != "Unit" || o.Name != "RequiresMountsFor" && (o.Name != "WantsMountsFor" || g.version < wantsMountsFor) {
			continue
		}
		// config_parse_unit_mounts_for: words after specifiers, each
		// an absolute normalized path or ignored; a syntax error ends
		// the list.
		for w := range unit.Words(o.Value, true, false) {
			if p, why := absPath(g.version, requested, w); why == "" {
				add(p, o.Name, u.srcs[i])
			}
		}
	}
	switch t {
	case "socket":
		for _, p := range socketPaths(u, requested, g.version) {
			add(unit.PathSimplify(g.version, p.path), "RequiresMountsFor", p.src)
		}
	case "path":
		for _, p := range watchedPaths(u, requested, g.version) {
			add(p.path, "RequiresMountsFor", p.src)
		}
	case "timer":
		if v, src := lastBoolFrom(u, "Timer", "Persistent", false); v {
			add("/var/lib/systemd/timers", "RequiresMountsFor", src)
		}
	case "mount", "automount":
		where, ok := pathValue(u, sectionOf(t), "Where", requested, g.version)
		if !ok {
			where = unit.PathSimplify(g.version, namePath(u.Name))
		}
		if where != "/" && strings.HasPrefix(where, "/") {
			add(parentDir(where), "RequiresMountsFor", u.Fragment)
		}
		if t == "mount" {
			if what, ok := mountWhatDep(u, requested, g.version); ok {
				add(unit.PathSimplify(g.version, what), "RequiresMountsFor", u.Fragment)
			}
		}
	case "swap":
		if what := swapWhat(u, requested, g.version); strings.HasPrefix(what, "/") {
			add(what, "RequiresMountsFor", u.Fragment)
		}
	}
	if hasExecContext(t) && (t != "socket" || g.socketHasExec(u, requested)) {
		out = append(out, g.execMountNeeds(u, sectionOf(t), requested)...)
	}
	return out
}

// execMountNeeds is the part of unit_add_exec_dependencies that needs
// mounts, for the execution settings of section sec.
func (g *Graph) execMountNeeds(u *Unit, sec, requested string) []mountNeed {
	var out []mountNeed
	weak := "RequiresMountsFor"
	if g.version >= wantsMountsFor {
		weak = "WantsMountsFor"
	}
	// config_parse_working_directory: "~" is the home directory, which
	// needs nothing; a "-" value only Wants its mounts (before 256 it
	// needs none).
	wd := workDirSetting(u, sec, requested, g.version)
	root, rootSrc, _ := pathSetting(u, sec, "RootDirectory", requested, g.version)
	image, imageSrc, _ := pathSetting(u, sec, "RootImage", requested, g.version)
	if wd.dir != "" {
		switch {
		case !wd.missingOK:
			out = append(out, mountNeed{wd.dir, "RequiresMountsFor", wd.src})
		case g.version >= wantsMountsFor:
			out = append(out, mountNeed{wd.dir, "WantsMountsFor", wd.src})
		}
	}
	if root != "" {
		out = append(out, mountNeed{root, weak, rootSrc})
	}
	if image != "" {
		out = append(out, mountNeed{image, weak, imageSrc})
	}
	dirs := execDirList(u, sec, requested, g.version)
	for _, d := range execDirPrefixes {
		for _, e := range dirs {
			if e.setting == d.name {
				out = append(out, mountNeed{d.prefix + "/" + e.path, "RequiresMountsFor", e.src})
			}
		}
	}
	// unit_patch_contexts: up to 256 DynamicUser=yes implies
	// PrivateTmp=yes. Before 256 PrivateTmp= Wants tmp.mount and
	// Requires the mounts of /var/tmp (the mounts of /tmp are tmp.mount
	// and -.mount, always there); from 256 it Wants the mounts of both.
	if privTmp, tmpSrc := g.privateTmp(u, sec); privTmp {
		out = append(out, mountNeed{"/tmp", weak, tmpSrc}, mountNeed{"/var/tmp", weak, tmpSrc})
	}
	return out
}

// privateTmp is whether the execution settings of section sec give u a
// private /tmp (PrivateTmp=yes or, from 257, connected; up to 256
// DynamicUser=yes implies it, unit_patch_contexts), and the file that says
// so.
func (g *Graph) privateTmp(u *Unit, sec string) (bool, string) {
	dynamic, privTmp, tmpSrc := false, false, ""
	for i, o := range u.Options {
		if o.Section != sec {
			continue
		}
		switch o.Name {
		case "DynamicUser":
			if v, ok := unit.ParseBoolean(o.Value); ok {
				dynamic = v
			}
		case "PrivateTmp":
			// From 257 config_parse_private_tmp also takes
			// "connected" (yes) and "disconnected"; an invalid value
			// is ignored.
			switch v, ok := unit.ParseBoolean(o.Value); {
			case ok:
				privTmp, tmpSrc = v, u.srcs[i]
			case g.version >= privateTmpDisconnected && (o.Value == "connected" || o.Value == "disconnected"):
				privTmp, tmpSrc = o.Value == "connected", u.srcs[i]
			}
		}
	}
	if dynamic && g.version < privateTmpDisconnected && !privTmp {
		privTmp, tmpSrc = true, u.Fragment
	}
	return privTmp, tmpSrc
}

// relPath is a path after specifiers and path_simplify_and_warn with
// PATH_CHECK_RELATIVE, or false.
func relPath(s, id string, version int) (string, bool) {
	k, err := expand(version, id, s, unit.PathPrintfMax)
	if err != nil || strings.HasPrefix(k, "/") {
		return "", false
	}
	p, why := unit.SimplifyPath(version, k, false)
	return p, why == ""
}

// sourcedPath is a path and the file that set it.
type sourcedPath struct{ path, src string }

// socketPaths are the file system paths of u's listen addresses, as
// config_parse_socket_listen keeps them and socket_add_mount_dependencies
// reads them (socket_address_get_path): AF_UNIX socket paths after
// specifiers (abstract "@" ones are not files), with /var/run patched to
// /run but otherwise as written, of 2 to 107 bytes; FIFO, special and USB
// function paths, which are simplified and ignored unless absolute and
// normalized (from 257, a FIFO or a USB function in /dev, /proc or /sys
// too). Message queues and IP, vsock and netlink addresses have no path.
// An empty value empties the list.
func socketPaths(u *Unit, id string, version int) []sourcedPath {
	var out []sourcedPath
	for _, p := range socketPorts(u, id, version) {
		if p.path != "" {
			out = append(out, p.sourcedPath)
		}
	}
	return out
}

// socketPort is one listen address of a socket unit: the setting that
// gave it and, for the ones socketPaths lists, its path.
type socketPort struct {
	setting string
	sourcedPath
}

// socketPorts are u's listen addresses in order, the ones
// config_parse_socket_listen keeps: an address after specifiers that
// socket_address_parse_and_warn reads (see unit.ParseSocketAddress; a
// sequential packet socket must be AF_UNIX), a netlink address
// socket_address_parse_netlink reads, a file path or message queue name
// that is absolute and normalized. A message queue, an abstract AF_UNIX
// name and an IP, vsock or netlink address have no path here.
func socketPorts(u *Unit, id string, version int) []socketPort {
	var out []socketPort
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != "Socket" {
				continue
			}
			switch o.Name {
			case "ListenStream", "ListenDatagram", "ListenSequentialPacket":
				if o.Value == "" {
					out = nil
					continue
				}
				k, err := expand(version, id, o.Value, unit.PathPrintfMax)
				if err != nil {
					continue
				}
				if strings.HasPrefix(k, "/") {
					k = patchVarRun(k)
				}
				fam, ok := unit.ParseSocketAddress(version, k)
				if !ok || o.Name == "ListenSequentialPacket" && fam != unit.FamilyUnix && fam != unit.FamilyAbstract {
					continue // "Address family not supported"
				}
				if fam != unit.FamilyUnix {
					k = ""
				}
				out = append(out, socketPort{o.Name, sourcedPath{k, s.Path}})
			case "ListenFIFO", "ListenSpecial", "ListenUSBFunction", "ListenMessageQueue":
				if o.Value == "" {
					out = nil
					continue
				}
				k, err := expand(version, id, o.Value, unit.PathPrintfMax)
				if err != nil {
					continue
				}
				p, why := unit.SimplifyPath(version, k, true)
				if why != "" || version >= privateTmpDisconnected && o.Name != "ListenSpecial" && belowAPIVFS(p) {
					continue
				}
				switch o.Name {
				case "ListenFIFO":
					p = patchVarRun(p)
				case "ListenMessageQueue":
					p = "" // a queue's name, not a file system path
				}
				out = append(out, socketPort{o.Name, sourcedPath{p, s.Path}})
			case "ListenNetlink":
				if o.Value == "" {
					out = nil
					continue
				}
				k, err := expand(version, id, o.Value, unit.PathPrintfMax)
				if err != nil || !unit.ParseNetlinkAddress(version, k) {
					continue
				}
				out = append(out, socketPort{o.Name, sourcedPath{"", s.Path}})
			}
		}
	}
	return out
}

// patchVarRun is patch_var_run: /var/run/... is /run/....
func patchVarRun(p string) string {
	if rest, ok := strings.CutPrefix(p, "/var/run/"); ok {
		return "/run/" + rest
	}
	return p
}

// watchedPaths are the paths of u's PathExists=, PathChanged=, ...
// settings as config_parse_path_spec keeps them: after specifiers,
// absolute and normalized, simplified. An empty value empties the list.
func watchedPaths(u *Unit, id string, version int) []sourcedPath {
	var out []sourcedPath
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != "Path" {
				continue
			}
			switch o.Name {
			case "PathExists", "PathExistsGlob", "PathChanged", "PathModified", "DirectoryNotEmpty":
			default:
				continue
			}
			if o.Value == "" {
				out = nil
				continue
			}
			if p, why := absPath(version, id, o.Value); why == "" {
				out = append(out, sourcedPath{p, s.Path})
			}
		}
	}
	return out
}

// parentDir is path_extract_directory of an absolute simplified path
// other than "/".
func parentDir(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// networkFS are the file systems fstype_is_network knows (the @network
// set and a few more), without a "fuse." prefix.
var networkFS = []string{
	"afs", "ceph", "cifs", "gfs", "gfs2", "ncp", "ncpfs", "nfs", "nfs4", "ocfs2", "orangefs", "pvfs2",
	"smb3", "smbfs", "davfs", "glusterfs", "lustre", "sshfs",
}

// mountWhatDep is the source of a mount unit file whose mounts the mount
// needs (mount_add_mount_dependencies): What= when it is an absolute path
// and the mount is a bind or loop mount or not a network mount (_netdev,
// or a network file system type).
func mountWhatDep(u *Unit, id string, version int) (string, bool) {
	if u.Fragment == "" {
		return "", false
	}
	what, ok := mountWhat(u, id, version)
	if !ok || !strings.HasPrefix(what, "/") {
		return "", false
	}
	opts, _ := lastPrintf(u, "Mount", "Options", id, version)
	fstype, _ := lastPrintf(u, "Mount", "Type", id, version)
	bind := fstabTestOption(opts, "bind", "rbind") || fstype == "bind" || fstype == "rbind"
	loop := fstabTestOption(opts, "loop")
	network := fstabTestOption(opts, "_netdev")
	for _, n := range networkFS {
		if strings.TrimPrefix(fstype, "fuse.") == n {
			network = true
		}
	}
	return what, bind || loop || !network
}

// mountWhat is a mount unit's What= as its parser keeps it: after
// specifiers (config_parse_unit_string_printf); from 254 with the fstab
// tags LABEL=, UUID=, ... turned into their /dev/disk/by-* links
// (config_parse_mount_node). A value whose specifiers fail is ignored, an
// empty one unsets it.
func mountWhat(u *Unit, id string, version int) (string, bool) {
	if version >= swapMountNode {
		return mountNode(u, "Mount", id, version)
	}
	return lastPrintf(u, "Mount", "What", id, version)
}
