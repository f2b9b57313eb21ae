package boot

import (
	"bytes"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// Two of systemd's own generators decide from the image's files alone:
// systemd-rc-local-generator and systemd-system-update-generator. The
// model runs them as it runs the package generators (pkgGenerators), each
// only when generatorPath finds its executable.

// dataUnitDir is SYSTEM_DATA_UNIT_DIR, where systemd's generators point
// the links they write: /lib/systemd/system in the split-/usr builds
// before unit.SplitUsrRemoved (Debian 12), /usr/lib/systemd/system from
// then on. A build that puts it in /usr before (Fedora's) names the same
// file on an image whose /lib links to /usr/lib, which the loader resolves
// alike.
func dataUnitDir(version int) string {
	if version < unit.SplitUsrRemoved {
		return "/lib/systemd/system"
	}
	return "/usr/lib/systemd/system"
}

// genRCLocal ports systemd-rc-local-generator (run, check_executable,
// add_symlink): when RC_LOCAL_PATH passes access(X_OK) it links
// rc-local.service into multi-user.target.wants of the normal directory.
// Its unit's ConditionFileIsExecutable= does not matter to the boot
// transaction: the link gives rc-local.service its start job either way.
// 257 adds only in_initrd()'s early return, which an image's boot never
// takes.
//
// RC_LOCAL_PATH is a build-time constant of the distribution (meson's
// rc-local option: /etc/rc.local in Debian's build, /etc/rc.d/rc.local in
// Fedora's and those derived from it). The model reads it from the
// generator's executable itself (rcLocalPathIn), the one source that
// cannot disagree with what runs; an os-release guess would be wrong for
// any distribution it does not list. When the executable names no such
// path (not systemd's generator), the model writes nothing.
func genRCLocal(r genRun) {
	data, err := r.fsys.ReadFile(rootfs.Clean(r.exe))
	if err != nil {
		return
	}
	p := rcLocalPathIn(data)
	if p == "" || !accessExec(r.fsys, p) {
		return
	}
	r.addSymlink(genDirNormal, "multi-user.target", "wants", dataUnitDir(r.version)+"/rc-local.service")
}

// maxPath is PATH_MAX: no longer string is a path the generator checks.
const maxPath = 4096

// rcLocalPathIn returns RC_LOCAL_PATH as compiled into a
// systemd-rc-local-generator executable, "" when it cannot tell: the
// NUL-terminated strings of the file that are absolute paths whose last
// component is "rc.local" (printable ASCII, no blanks), when they all
// name the same one. The generator's other strings (its messages, the
// unit name rc-local.service) end otherwise.
func rcLocalPathIn(data []byte) string {
	const base = "/rc.local"
	found := ""
	for rest := data; ; {
		i := bytes.Index(rest, []byte(base+"\x00"))
		if i < 0 {
			return found
		}
		// The string starts after the NUL before it (or at the file's
		// start).
		start := bytes.LastIndexByte(rest[:i], 0) + 1
		s := rest[start : i+len(base)]
		rest = rest[i+len(base)+1:]
		if len(s) > maxPath || s[0] != '/' || !printablePath(s) {
			continue
		}
		if found != "" && found != string(s) {
			return "" // two candidates: the model cannot tell which
		}
		found = string(s)
	}
}

// printablePath reports a string of printable ASCII without blanks.
func printablePath(s []byte) bool {
	for _, c := range s {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}

// accessExec is check_executable's access(path, X_OK) as root, with the
// path's links followed inside the image: a missing file, a dangling link
// or a loop fails; a directory passes (root's CAP_DAC_READ_SEARCH
// overrides its modes); anything else passes when one of its execute
// bits is set. /dev/null, a mask, has none.
func accessExec(fsys *rootfs.FS, p string) bool {
	fi, err := fsys.Stat(rootfs.Clean(p))
	if err != nil {
		return false
	}
	return fi.IsDir() || fi.Mode().Perm()&0o111 != 0
}

// systemUpdateEtc is the first version whose
// systemd-system-update-generator also honours /etc/system-update.
const systemUpdateEtc = 254

// genSystemUpdate ports systemd-system-update-generator
// (generate_symlink): when /system-update exists (or, from
// systemUpdateEtc on, /etc/system-update), as faccessat(F_OK,
// AT_SYMLINK_NOFOLLOW) sees it — an lstat: a dangling link counts, the
// parents' links are followed — it links default.target to
// system-update.target in the early directory, which ranks above
// /etc/systemd/system: the boot isolates system-update.target, the
// offline update mode of systemd.offline-updates(7). Any other failure to
// check (a parent that is no directory) is logged and skipped (257) or
// ends the generator (252): both write nothing for that path. The kernel
// command line's systemd.unit= would override the link; the generator
// only warns of it.
func genSystemUpdate(r genRun) {
	flags := []string{"system-update"}
	if r.version >= systemUpdateEtc {
		flags = append(flags, "etc/system-update")
	}
	for _, f := range flags {
		if _, err := r.fsys.Lstat(f); err != nil {
			continue
		}
		r.out.symlink(dataUnitDir(r.version)+"/system-update.target", genDirEarly, DefaultTarget, r.exe)
		return
	}
}
