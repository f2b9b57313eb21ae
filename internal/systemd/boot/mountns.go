package boot

import (
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// workingDirAPIVFS is the first systemd version modelled to refuse a
// WorkingDirectory= below /proc, /sys or /dev in a unit that runs in a
// mount namespace of its own (257's unit_verify_contexts; 252 has no such
// check, the versions between are modelled as 252).
const workingDirAPIVFS = 257

// workDir is a unit's working directory setting: the absolute path (or
// home, "~"), whether a "-" prefix lets it be missing, and the file that
// set it.
type workDir struct {
	dir             string
	home, missingOK bool
	src             string
}

// workDirSetting reads WorkingDirectory= as
// config_parse_working_directory does. An empty assignment unsets it; a
// "-" prefix makes a value whose specifiers do not resolve or that is not
// an absolute, normalized path an ignored one, which changes nothing
// (without it the unit file fails to load, fatalSetting).
func workDirSetting(u *Unit, sec, requested string, version int) workDir {
	var w workDir
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != sec || o.Name != "WorkingDirectory" {
				continue
			}
			v, missingOK := strings.CutPrefix(o.Value, "-")
			switch {
			case o.Value == "":
				w = workDir{}
			case v == "~":
				w = workDir{home: true, missingOK: missingOK, src: s.Path}
			default:
				if p, why := absPath(version, requested, v); why == "" {
					w = workDir{dir: p, missingOK: missingOK, src: s.Path}
				}
			}
		}
	}
	return w
}

// needsMountNamespace is exec_needs_mount_namespace without execution
// parameters or runtime, on the execution context of u's section sec as
// its parsers keep it and unit_patch_contexts completes it (DynamicUser=
// implies ProtectSystem=strict). The cgroup hierarchy is taken to be the
// unified one, as on every Debian system systemd 257 boots, so that
// ProtectControlGroups=private keeps its cgroup namespace; PID namespaces
// are taken to exist.
func (g *Graph) needsMountNamespace(u *Unit, sec, requested string) bool {
	v := g.version
	flag := func(name string) bool { return lastBool(u, sec, name, false) }
	path := func(name string) (string, bool) {
		p, _, set := pathSetting(u, sec, name, requested, v)
		return p, set
	}
	_, image := path("RootImage")
	rootDir, root := path("RootDirectory")
	rootfs := image || root && rootDir != "/"
	privateNetwork := flag("PrivateNetwork")
	if _, ok := path("NetworkNamespacePath"); ok {
		privateNetwork = true
	}
	_, ipcPath := path("IPCNamespacePath")
	dirs, readOnly := execDirectories(u, sec, requested, v)
	apivfs := lastTristate(u, sec, "MountAPIVFS")
	if apivfs < 0 {
		apivfs = b2i(rootfs)
	}
	// DynamicUser= makes ProtectSystem=strict (and PrivateTmp=
	// disconnected unless set), which also covers its check of the state,
	// cache and logs directories.
	switch {
	case image, flag("DynamicUser"),
		g.pathListKept(u, sec, requested, "ReadWritePaths", "ReadWriteDirectories"),
		g.pathListKept(u, sec, requested, "ReadOnlyPaths", "ReadOnlyDirectories"),
		g.pathListKept(u, sec, requested, "InaccessiblePaths", "InaccessibleDirectories"),
		g.pathListKept(u, sec, requested, "ExecPaths"),
		g.pathListKept(u, sec, requested, "NoExecPaths"),
		g.pathListKept(u, sec, requested, "ExtensionDirectories"),
		g.bindPathsKept(u, sec, requested),
		g.temporaryFileSystemsKept(u, sec, requested),
		g.mountImagesSet(u, sec, requested),
		g.extensionImagesKept(u, sec, requested):
		return true
	}
	if p := lastWordReset(u, sec, "MountFlags", []string{"shared", "slave", "private"}, ""); p != "" && p != "shared" {
		return true
	}
	if lastBoolEnum(u, sec, "PrivateTmp", "connected", "disconnected") == "disconnected" {
		return true
	}
	privateMounts := lastTristate(u, sec, "PrivateMounts")
	switch {
	case flag("PrivateDevices"),
		privateMounts > 0,
		privateMounts < 0 && privateNetwork,
		lastBoolEnum(u, sec, "ProtectSystem", "yes", "full", "strict") != "no",
		lastBoolEnum(u, sec, "ProtectHome", "yes", "read-only", "tmpfs") != "no",
		flag("ProtectKernelTunables"), flag("ProtectKernelModules"), flag("ProtectKernelLogs"),
		lastBoolEnum(u, sec, "ProtectControlGroups", "yes", "private", "strict") != "no",
		lastWord(u, sec, "ProtectProc", []string{"default", "noaccess", "invisible", "ptraceable"}, "default") != "default",
		lastWord(u, sec, "ProcSubset", []string{"all", "pid"}, "all") != "all",
		flag("PrivateIPC"), ipcPath,
		privatePIDs(u, v):
		return true
	}
	if root && (apivfs > 0 || dirs > 0) {
		return true
	}
	// exec_context_get_effective_bind_log_sockets: LogNamespace=, then
	// BindLogSockets=, then the effective MountAPIVFS=, then a root file
	// system with PrivateDevices=.
	if ns, _ := logNamespace(u, sec, requested, v); ns != "" {
		return true
	}
	switch bind := lastTristate(u, sec, "BindLogSockets"); {
	case bind > 0:
		return true
	case bind == 0:
	case apivfs > 0, rootfs && flag("PrivateDevices"):
		return true
	}
	return readOnly
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pathSetting is a path setting read by config_parse_unit_path_printf:
// the value its specifiers resolve to, simplified, the file that set it,
// and whether it is set. A value that resolves to "" unsets it; one that
// does not resolve or is not an absolute, normalized path is ignored (or,
// for the fatal ones, fails the unit file, see fatalSetting).
func pathSetting(u *Unit, sec, name, requested string, version int) (p, src string, set bool) {
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != sec || o.Name != name {
				continue
			}
			k, err := expand(version, requested, o.Value, unit.PathPrintfMax)
			switch {
			case err != nil:
			case k == "":
				p, src, set = "", "", false
			default:
				if q, why := unit.SimplifyPath(version, k, true); why == "" {
					p, src, set = q, s.Path, true
				}
			}
		}
	}
	return p, src, set
}

// lastTristate is config_parse_tristate: -1 unset (the default, and what
// an empty assignment restores), else the last boolean; an assignment
// parse_boolean refuses is ignored.
func lastTristate(u *Unit, sec, name string) int {
	t := -1
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != sec || o.Name != name {
				continue
			}
			if o.Value == "" {
				t = -1
			} else if b, ok := unit.ParseBoolean(o.Value); ok {
				t = b2i(b)
			}
		}
	}
	return t
}

// lastBoolEnum is an enumeration read by a DEFINE_STRING_TABLE_LOOKUP_WITH_BOOLEAN
// parser: a boolean is "no" or yes, any other assignment one of words (as
// written) or ignored, the empty one included; the default is "no".
func lastBoolEnum(u *Unit, sec, name, yes string, words ...string) string {
	v := "no"
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != sec || o.Name != name {
				continue
			}
			if b, ok := unit.ParseBoolean(o.Value); ok {
				v = "no"
				if b {
					v = yes
				}
			} else if o.Value == yes || slices.Contains(words, o.Value) {
				v = o.Value
			}
		}
	}
	return v
}

// keptCount is how many entries a list setting named one of names ends
// with, when each non-empty assignment adds what one(value) counts and an
// empty one empties the list.
func keptCount(u *Unit, sec string, one func(v string) int, names ...string) int {
	n := 0
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != sec || !slices.Contains(names, o.Name) {
				continue
			}
			if o.Value == "" {
				n = 0
				continue
			}
			n += one(o.Value)
		}
	}
	return n
}

// pathListKept reports whether a path list setting (names are its
// spellings, which share the list) keeps a path, as
// config_parse_namespace_path_strv reads each assignment: unquoted words,
// each optionally prefixed "-" then "+", whose specifiers resolve to an
// absolute, normalized path; a syntax error ends the assignment.
func (g *Graph) pathListKept(u *Unit, sec, requested string, names ...string) bool {
	return keptCount(u, sec, func(v string) int {
		n := 0
		for w := range unit.Words(v, true, false) {
			w = strings.TrimPrefix(strings.TrimPrefix(w, "-"), "+")
			if _, why := absPath(g.version, requested, w); why == "" {
				n++
			}
		}
		return n
	}, names...) > 0
}

// bindPathsKept reports whether BindPaths= and BindReadOnlyPaths= (one
// list) keep a bind mount, as config_parse_bind_paths reads each
// assignment: "SOURCE[:DESTINATION[:OPTIONS]]" entries split at colons and
// whitespace, each part unquoted; the source resolves its specifiers, may
// then start with "-", and must be an absolute, normalized path, as must
// the destination; the options, a whitespace-separated word, are empty,
// "rbind" or "norbind". An entry that fails is skipped; a syntax error
// ends the assignment.
func (g *Graph) bindPathsKept(u *Unit, sec, requested string) bool {
	const seps = ":" + whitespace
	const flags = unit.WordUnquote | unit.WordDontCoalesce
	return keptCount(u, sec, func(v string) int {
		n := 0
		p, more := v, true
		for more {
			src, rest, sep, ok, err := unit.ExtractWordSep(p, seps, flags)
			if err != nil || !ok {
				return n
			}
			p, more = rest, sep != 0
			k, err := expand(g.version, requested, src, unit.PathPrintfMax)
			if err != nil {
				continue
			}
			if _, why := unit.SimplifyPath(g.version, strings.TrimPrefix(k, "-"), true); why != "" {
				continue
			}
			if more && sep == ':' {
				dst, rest, sep, ok, err := unit.ExtractWordSep(p, seps, flags)
				if err != nil {
					return n
				}
				if !ok {
					continue
				}
				p, more = rest, sep != 0
				if _, why := absPath(g.version, requested, dst); why != "" {
					continue
				}
				if more && sep == ':' {
					opts, rest, _, err := unit.ExtractWord(p, true, false)
					if err != nil {
						return n
					}
					p, more = rest, rest != ""
					if opts != "" && opts != "rbind" && opts != "norbind" {
						continue
					}
				}
			}
			n++
		}
		return n
	}, "BindPaths", "BindReadOnlyPaths") > 0
}

// temporaryFileSystemsKept reports whether TemporaryFileSystem= keeps a
// file system, as config_parse_temporary_filesystems reads each
// assignment: unquoted words "PATH[:OPTIONS]", the path up to the first
// colon (a backslash takes the next character) resolving its specifiers
// to an absolute, normalized path; a syntax error in the words ends the
// assignment, one in a path skips the word.
func (g *Graph) temporaryFileSystemsKept(u *Unit, sec, requested string) bool {
	return keptCount(u, sec, func(v string) int {
		n := 0
		for w := range unit.Words(v, true, false) {
			path, _, _, ok, err := unit.ExtractWordSep(w, ":", unit.WordDontCoalesce)
			if err != nil || !ok {
				continue
			}
			if _, why := absPath(g.version, requested, path); why == "" {
				n++
			}
		}
		return n
	}, "TemporaryFileSystem") > 0
}

// mountImagesSet reports whether MountImages= ends with an image
// (mountImagesKept of each assignment).
func (g *Graph) mountImagesSet(u *Unit, sec, requested string) bool {
	return keptCount(u, sec, func(v string) int {
		return b2i(mountImagesKept(v, requested, g.version))
	}, "MountImages") > 0
}

// extensionImagesKept reports whether ExtensionImages= keeps an image, as
// config_parse_extension_images reads each assignment: words (unquoted,
// their backslashes kept) of "[-]SOURCE[:PARTITION:OPTIONS...]" split at
// colons with C escapes and "\:" decoded; the source resolves its
// specifiers to an absolute, normalized path not below /proc, /sys or
// /dev, or the word is skipped; then a syntax error anywhere in it ends
// the assignment. A word of colons alone is skipped.
func (g *Graph) extensionImagesKept(u *Unit, sec, requested string) bool {
	return keptCount(u, sec, func(v string) int {
		n := 0
		for w := range unit.Words(v, true, true) {
			src, err := colonFields(w, 1, false)
			if err != nil {
				return n
			}
			if len(src) == 0 {
				continue
			}
			if k, why := absPath(g.version, requested, strings.TrimPrefix(src[0], "-")); why != "" || belowAPIVFS(k) {
				continue
			}
			// The partitions and their options come only after a source
			// that is kept.
			if _, err := colonWords(w); err != nil {
				return n
			}
			n++
		}
		return n
	}, "ExtensionImages") > 0
}

// execDirNames are the settings of the execution directories.
var execDirNames = []string{"RuntimeDirectory", "StateDirectory", "CacheDirectory", "LogsDirectory", "ConfigurationDirectory"}

// execDirectories is how many execution directories the unit keeps, and
// whether one of them is read-only (execDirList). The same source twice
// in one setting counts once, read-only if either is.
func execDirectories(u *Unit, sec, requested string, version int) (n int, readOnly bool) {
	seen := map[execDir]bool{}
	for _, d := range execDirList(u, sec, requested, version) {
		k := execDir{setting: d.setting, path: d.path}
		seen[k] = seen[k] || d.readOnly
	}
	for _, ro := range seen {
		readOnly = readOnly || ro
	}
	return len(seen), readOnly
}

// execDir is one execution directory a unit keeps: its setting, its
// source relative to the setting's prefix, whether it is read-only and
// the file that named it.
type execDir struct {
	setting, path, src string
	readOnly           bool
}

// execDirList is every execution directory of section sec, in order, as
// config_parse_exec_directories reads each assignment: unquoted words
// (their backslashes kept) of "SOURCE[:DESTINATION]", from 257
// "SOURCE[:DESTINATION[:FLAGS]]", split at the colons "\:" does not
// escape, with C escapes decoded (up to 256 runs of colons are one
// separator; from 257 each colon is one). The source resolves its
// specifiers to a relative, normalized path not in "private", the
// destination (not for ConfigurationDirectory=) likewise, and the flags
// are empty or "ro". An entry that fails is skipped; a syntax error ends
// the assignment; an empty assignment empties the setting's list.
func execDirList(u *Unit, sec, requested string, version int) []execDir {
	fields, dontCoalesce := 2, false
	if version >= privateTmpDisconnected {
		fields, dontCoalesce = 3, true
	}
	var out []execDir
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != sec || !slices.Contains(execDirNames, o.Name) {
				continue
			}
			if o.Value == "" {
				out = slices.DeleteFunc(out, func(d execDir) bool { return d.setting == o.Name })
				continue
			}
			for w := range unit.Words(o.Value, true, true) {
				f, err := colonFields(w, fields, dontCoalesce)
				if err != nil || len(f) == 0 {
					break
				}
				f = append(f, "", "")
				k, ok := relPath(f[0], requested, version)
				if !ok || k == "private" || strings.HasPrefix(k, "private/") {
					continue
				}
				if dst := f[1]; dst != "" {
					if _, ok := relPath(dst, requested, version); !ok || o.Name == "ConfigurationDirectory" {
						continue
					}
				}
				if flags := f[2]; flags != "" && flags != "ro" {
					continue
				}
				out = append(out, execDir{setting: o.Name, path: k, src: s.Path, readOnly: f[2] == "ro"})
			}
		}
	}
	return out
}
