package boot

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// systemd-fstab-generator, ported for a boot of the image on a virtual
// machine or bare metal, not in the initrd (src/fstab-generator,
// run_generator): it reads the image's own /etc/fstab (parse_fstab(false))
// and pulls systemd-remount-fs.service into local-fs.target
// (generator_enable_remount_fs_service), unless the kernel command line
// says fstab=no; systemd.swap=no drops the swap entries,
// systemd.volatile=state adds a tmpfs on /var, and from 257
// systemd.mount-extra= and systemd.swap-extra= add entries. Its other
// inputs are the machine's and are assumed: /sys is writable (no
// container: device entries and swaps are kept), /proc/swaps exists, no
// fstab.extra credential and no EFI SystemdOptions variable are passed,
// and x-systemd.pcrfs finds no measured kernel (efi_measured_uki).

// fstabGeneratorName is the generator's executable.
const fstabGeneratorName = "systemd-fstab-generator"

// fstabV257 is the first systemd version modelled with 257's generator
// (parse_fstab_one, x-systemd.wants=, systemd.mount-extra=, quota
// units, DefaultDependencies=no with x-systemd.wanted-by=, ...); older
// ones run 252's.
const fstabV257 = 254

// maxFstab bounds what is read of /etc/fstab; the rest is not read.
const maxFstab = 1 << 20

// maxMntLine is getmntent's line buffer (glibc's BUFFER_SIZE): a longer
// line is cut there and its rest skipped.
const maxMntLine = 4096

// mntEntry is one getmntent record.
type mntEntry struct {
	what, where, fstype, opts string
	passno                    int
}

// getmntent reads an fstab as glibc's getmntent does: a line (cut at a
// NUL or at maxMntLine-1 bytes) without its trailing blanks, skipped when
// empty or a comment after its leading blanks, split at runs of blanks
// into source, mount point, type and options (each \040, \011, \012,
// \134 and \\ decoded; a missing one empty) and the freq and passno
// numbers (sscanf " %d %d ", missing ones 0).
func getmntent(data []byte) []mntEntry {
	var out []mntEntry
	for len(data) > 0 {
		var line []byte
		if i := indexByteN(data, '\n', maxMntLine-1); i >= 0 {
			line, data = data[:i], data[i+1:]
			line = trimBlanksRight(line)
		} else {
			n := min(len(data), maxMntLine-1)
			line = data[:n]
			// The rest of the line is read and forgotten.
			if j := indexByteN(data[n:], '\n', len(data)); j >= 0 {
				data = data[n+j+1:]
			} else {
				data = nil
			}
		}
		if i := strings.IndexByte(string(line), 0); i >= 0 {
			line = line[:i]
		}
		head := strings.TrimLeft(string(line), " \t")
		if head == "" || head[0] == '#' {
			continue
		}
		var f [4]string
		rest, more := head, true
		for k := range f {
			if !more {
				break
			}
			var w string
			if i := strings.IndexAny(rest, " \t"); i >= 0 {
				w, rest = rest[:i], strings.TrimLeft(rest[i+1:], " \t")
			} else {
				w, rest, more = rest, "", false
			}
			f[k] = decodeMntName(w)
		}
		e := mntEntry{what: f[0], where: f[1], fstype: f[2], opts: f[3]}
		if more {
			if nums := scanInts(rest, 2); len(nums) == 2 {
				e.passno = nums[1]
			}
		}
		out = append(out, e)
	}
	return out
}

func indexByteN(b []byte, c byte, n int) int {
	if n > len(b) {
		n = len(b)
	}
	for i := range n {
		if b[i] == c {
			return i
		}
	}
	return -1
}

func trimBlanksRight(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// decodeMntName is glibc's decode_name.
func decodeMntName(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			switch {
			case strings.HasPrefix(s[i+1:], "040"):
				b.WriteByte(' ')
				i += 3
				continue
			case strings.HasPrefix(s[i+1:], "011"):
				b.WriteByte('\t')
				i += 3
				continue
			case strings.HasPrefix(s[i+1:], "012"):
				b.WriteByte('\n')
				i += 3
				continue
			case strings.HasPrefix(s[i+1:], "134"):
				b.WriteByte('\\')
				i += 3
				continue
			case strings.HasPrefix(s[i+1:], `\`):
				b.WriteByte('\\')
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// scanInts is sscanf's run of " %d": up to n numbers, stopping at the
// first that does not scan; an out-of-range one is clamped.
func scanInts(s string, n int) []int {
	var out []int
	for len(out) < n {
		s = strings.TrimLeft(s, " \t\n\v\f\r")
		j := 0
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		k := j
		for k < len(s) && s[k] >= '0' && s[k] <= '9' {
			k++
		}
		if k == j {
			break
		}
		v, err := strconv.ParseInt(s[:k], 10, 32)
		if err != nil {
			v = 1 << 31
			if s[0] == '-' {
				v = -v
			} else {
				v--
			}
		}
		out = append(out, int(v))
		s = s[k:]
	}
	return out
}

// mountFlags are add_mount's MountPointFlags.
type mountFlags uint8

const (
	mNoAuto mountFlags = 1 << iota
	mNoFail
	mAutomount
	mMakeFS
	mGrowFS
	mRWOnly
	mQuota
)

// fstabCmdline is what the generator takes from the kernel command line
// (parse_proc_cmdline_item) outside the initrd.
type fstabCmdline struct {
	fstab, swap   bool
	volatileState bool
	extra         []mntEntry // 257: systemd.mount-extra=, systemd.swap-extra=
}

// cmdlineArg is one word of the kernel command line, split at its first
// "=".
type cmdlineArg struct {
	key, value string
	hasValue   bool
}

// cmdlineArgs yields the words of the kernel command line a generator
// outside the initrd parses, as proc_cmdline_parse hands them over
// (unit.CmdlineWords; words starting "rd." are the initrd's
// and skipped).
func cmdlineArgs(cmdline string) iter.Seq[cmdlineArg] {
	return func(yield func(cmdlineArg) bool) {
		for w := range unit.CmdlineWords(cmdline) {
			if strings.HasPrefix(w, "rd.") {
				continue // proc_cmdline_extract_first: for the initrd only
			}
			key, value, hasValue := strings.Cut(w, "=")
			if !yield(cmdlineArg{key, value, hasValue}) {
				return
			}
		}
	}
}

// setBool is a generator's boolean switch: a bare key turns it on, a
// value parse_boolean takes sets it, any other value leaves it.
func (a cmdlineArg) setBool(dst *bool) {
	if !a.hasValue {
		*dst = true
		return
	}
	if b, ok := unit.ParseBoolean(a.value); ok {
		*dst = b
	}
}

// parseFstabCmdline is parse_proc_cmdline_item over the kernel command
// line outside the initrd.
func parseFstabCmdline(cmdline string, version int) fstabCmdline {
	c := fstabCmdline{fstab: true, swap: true}
	for a := range cmdlineArgs(cmdline) {
		switch a.key {
		case "fstab":
			a.setBool(&c.fstab)
		case "systemd.swap":
			a.setBool(&c.swap)
		case "systemd.volatile":
			// volatile_mode_from_string: a boolean is yes or no.
			switch {
			case !a.hasValue:
				c.volatileState = false
			case a.value == "state":
				c.volatileState = true
			default:
				if _, ok := unit.ParseBoolean(a.value); ok || a.value == "overlay" {
					c.volatileState = false
				}
			}
		case "systemd.mount-extra", "systemd.swap-extra":
			if version < fstabV257 || !a.hasValue {
				continue
			}
			if e, ok := mountExtra(a.value, a.key == "systemd.swap-extra"); ok {
				c.extra = append(c.extra, e)
			}
		}
	}
	return c
}

// mountExtra is mount_array_add (WHAT:WHERE[:FSTYPE[:OPTIONS]]) and
// mount_array_add_swap (WHAT[:OPTIONS]): fields split at each ":". The
// C escapes extract_many_words decodes (EXTRACT_CUNESCAPE) are not
// modelled: a value with a backslash is left out.
func mountExtra(v string, swap bool) (mntEntry, bool) {
	if strings.Contains(v, `\`) {
		return mntEntry{}, false
	}
	f := strings.Split(v, ":")
	var e mntEntry
	if swap {
		if len(f) > 2 || f[0] == "" {
			return e, false
		}
		e = mntEntry{what: f[0], fstype: "swap"}
		if len(f) == 2 {
			e.opts = f[1]
		}
		return e, true
	}
	if len(f) < 2 || len(f) > 4 || f[0] == "" {
		return e, false
	}
	e = mntEntry{what: f[0], where: f[1], fstype: "auto"}
	if len(f) > 2 && f[2] != "" {
		e.fstype = f[2]
	}
	if len(f) > 3 {
		e.opts = f[3]
	}
	if e.fstype == "swap" {
		e.where = ""
	}
	return e, true
}

// fstabRun is one run of the ported systemd-fstab-generator.
type fstabRun struct {
	genRun
	cmd fstabCmdline
}

// genFstab is run_generator outside the initrd.
func genFstab(r genRun) {
	f := fstabRun{genRun: r, cmd: parseFstabCmdline(r.cmdline, r.version)}
	if f.cmd.volatileState {
		// add_volatile_var, into the late directory.
		f.addMount("/proc/cmdline", genDirLate, "tmpfs", "/var", "tmpfs",
			"mode=0755,size=25%,nr_inodes=1m", 0, 0, "local-fs.target")
	}
	if f.cmd.fstab {
		for _, e := range getmntent(readFstab(r.fsys)) {
			f.parseOne("/etc/fstab", e, true)
		}
		// generator_enable_remount_fs_service
		f.addSymlink(genDirNormal, "local-fs.target", "wants", dataUnitDir(f.version)+"/systemd-remount-fs.service")
	}
	for _, e := range f.cmd.extra {
		// add_mounts_from_cmdline: passno -1, swaps kept whatever
		// systemd.swap= says.
		e.passno = -1
		f.parseOne("/proc/cmdline", e, false)
	}
}

// readFstab reads /etc/fstab (setmntent follows links; a missing or
// unreadable file has no entries), at most maxFstab bytes of it.
func readFstab(fsys *rootfs.FS) []byte {
	if fi, err := fsys.Stat("etc/fstab"); err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	file, err := fsys.Open("etc/fstab")
	if err != nil {
		return nil
	}
	defer file.Close()
	b, _ := io.ReadAll(io.LimitReader(file, maxFstab))
	return b
}

// parseOne is the body of parse_fstab's loop (252) or parse_fstab_one
// (257) for one entry outside the initrd.
func (f fstabRun) parseOne(source string, e mntEntry, useSwapEnabled bool) {
	isSwap := e.fstype == "swap"
	if f.version >= fstabV257 && isSwap && useSwapEnabled && !f.cmd.swap {
		return
	}
	what := udevNode(e.what)
	flags := f.optionFlags(e.opts, isSwap)
	if isSwap {
		if f.version < fstabV257 && !f.cmd.swap {
			return
		}
		f.addSwap(source, what, e.opts, flags)
		return
	}
	passno := e.passno
	if f.version >= fstabV257 && passno < 0 {
		passno = 0
		if isDevicePath(what) {
			passno = 1
		}
	}
	where := e.where
	if !strings.Contains(where, "/") {
		if f.version >= fstabV257 {
			return
		}
	} else {
		where = f.canonicalWhere(where)
	}
	target := "local-fs.target"
	if fstabTestOption(e.opts, "_netdev") || fstypeIsNetwork(e.fstype) {
		target = "remote-fs.target"
	}
	f.addMount(source, genDirNormal, what, where, e.fstype, e.opts, passno, flags, target)
}

// optionFlags is fstab_options_to_flags (257), or the tests of
// parse_fstab (252).
func (f fstabRun) optionFlags(opts string, isSwap bool) mountFlags {
	var m mountFlags
	if fstabTestOption(opts, "x-systemd.makefs") {
		m |= mMakeFS
	}
	if fstabTestOption(opts, "x-systemd.growfs") {
		m |= mGrowFS
	}
	if f.version >= fstabV257 && fstabTestOption(opts, "usrquota", "grpquota", "quota", "usrjquota", "grpjquota", "prjquota") {
		m |= mQuota
	}
	if fstabYesNo(opts, "noauto", "auto") {
		m |= mNoAuto
	}
	if fstabYesNo(opts, "nofail", "fail") {
		m |= mNoFail
	}
	if !isSwap {
		if fstabTestOption(opts, "x-systemd.rw-only") {
			m |= mRWOnly
		}
		if fstabTestOption(opts, "comment=systemd.automount", "x-systemd.automount") {
			m |= mAutomount
		}
	}
	return m
}

// canonicalWhere is the mount point as the generator uses it: simplified
// (252) and its links followed inside the image (chase with
// CHASE_PREFIX_ROOT|CHASE_NONEXISTENT: a missing tail is kept as
// written); as written, simplified, when that fails.
func (f fstabRun) canonicalWhere(where string) string {
	simple := unit.PathSimplify(f.version, where)
	if f.version < fstabV257 {
		where = simple
	}
	name, err := f.fsys.Resolve(rootfs.Clean(where))
	switch {
	case err == nil, errors.Is(err, fs.ErrNotExist) && name != "":
		if name == "." {
			return "/"
		}
		return "/" + name
	}
	return simple
}

// fstypeIsNetwork is fstype_is_network: a network file system, with or
// without a "fuse." prefix.
func fstypeIsNetwork(t string) bool {
	t = strings.TrimPrefix(t, "fuse.")
	for _, n := range networkFS {
		if t == n {
			return true
		}
	}
	return false
}

// isDevicePath is is_device_path: below /dev/ or /sys/.
func isDevicePath(p string) bool {
	for _, d := range []string{"/dev/", "/sys/"} {
		if rest, ok := strings.CutPrefix(p, d); ok && strings.Trim(rest, "/") != "" {
			return true
		}
	}
	return false
}

// pathUnitName is unit_name_from_path: the escaped, simplified,
// normalized path and suffix; false when the path is not normalized or
// the name too long (systemd then names the unit by a hash of the path,
// not modelled).
func (f fstabRun) pathUnitName(p, suffix string) (string, bool) {
	esc, ok := f.pathEscape(p)
	if !ok || len(esc)+len(suffix) >= unit.MaxNameLen+1 {
		return "", false
	}
	return esc + suffix, true
}

// pathEscape is unit_name_path_escape.
func (f fstabRun) pathEscape(p string) (string, bool) {
	p = unit.PathSimplify(f.version, p)
	if p == "" || p == "/" {
		return "-", true
	}
	if !unit.PathNormalized(p) {
		return "", false
	}
	return escapeName(strings.Trim(p, "/")), true
}

// instanceUnitName is unit_name_from_path_instance.
func (f fstabRun) instanceUnitName(prefix, p, suffix string) (string, bool) {
	esc, ok := f.pathEscape(p)
	n := prefix + "@" + esc + suffix
	if !ok || len(n) > unit.MaxNameLen {
		return "", false
	}
	return n, true
}

// mangle is unit_name_mangle_with_suffix(name, 0, ".mount")
// (mangleUnitName): a valid unit name is itself, an absolute path names
// its device or mount unit, and anything else is escaped, with the suffix
// when it has no unit type. A name systemd would hash is none.
func (f fstabRun) mangle(name string) (string, bool) {
	n, res := mangleUnitName(f.version, name, ".mount")
	return n, res == mangleOK
}

// specifierEscape is specifier_escape: "%" doubled.
func specifierEscape(s string) string { return strings.ReplaceAll(s, "%", "%%") }

// unitFile is a unit file being written; flush writes what it holds, as
// the C code's FILE does when a step fails and it returns.
type unitFile struct {
	f    fstabRun
	name string
	b    strings.Builder
}

// openUnit is generator_open_unit_file: false when the file exists
// (fopen "wx").
func (f fstabRun) openUnit(dir, name string) (*unitFile, bool) {
	p := dir + "/" + name
	if _, ok := f.out.nodes[p]; ok {
		return nil, false
	}
	u := &unitFile{f: f, name: p}
	u.b.WriteString("# Automatically generated by " + fstabGeneratorName + "\n\n")
	f.out.writeFile(p, nil, f.exe)
	return u, true
}

func (u *unitFile) printf(format string, a ...any) { fmt.Fprintf(&u.b, format, a...) }
func (u *unitFile) flush()                         { u.f.out.writeFile(u.name, []byte(u.b.String()), u.f.exe) }

// addSymlink is generator_add_symlink, shared by the ported generators: a
// link dir/dst.type/BASE to src (a relative "../src" for a bare name). A
// dst with a "/" would make a directory no unit is read from: it is left
// out.
func (f genRun) addSymlink(dir, dst, typ, src string) {
	if strings.Contains(dst, "/") || dst == "" || dst == "." || dst == ".." {
		return
	}
	from := src
	if !strings.HasPrefix(src, "/") {
		from = "../" + src
	}
	base := src[strings.LastIndexByte(src, '/')+1:]
	f.out.symlink(from, dir+"/"+dst+"."+typ, base, f.exe)
}

// writeDropIn is write_drop_in: dir/UNIT.d/50-NAME.conf, replaced.
func (f genRun) writeDropIn(dir, u, name, text string) {
	f.out.writeFile(dir+"/"+u+".d/50-"+name+".conf", []byte(text), f.exe)
}

// addSwap is add_swap.
func (f fstabRun) addSwap(source, what, opts string, flags mountFlags) {
	name, ok := f.pathUnitName(what, ".swap")
	if !ok {
		return
	}
	u, ok := f.openUnit(genDirNormal, name)
	if !ok {
		return
	}
	u.printf("[Unit]\nDocumentation=man:fstab(5) man:systemd-fstab-generator(8)\nSourcePath=%s\n", source)
	f.blockdevDependency(u, what)
	u.printf("\n[Swap]\nWhat=%s\n", specifierEscape(what))
	writeOptions(u, opts)
	u.flush()
	f.writeTimeouts(genDirNormal, what, opts)
	if flags&mMakeFS != 0 && !f.hookUpMkswap(what, name) {
		return
	}
	if flags&mNoAuto == 0 {
		f.addSymlink(genDirNormal, "swap.target", wantsOrRequires(flags), name)
	}
}

func wantsOrRequires(flags mountFlags) string {
	if flags&mNoFail != 0 {
		return "wants"
	}
	return "requires"
}

// writeOptions is write_options: none for an empty value or "defaults".
func writeOptions(u *unitFile, opts string) {
	if opts != "" && opts != "defaults" {
		u.printf("Options=%s\n", specifierEscape(opts))
	}
}

// blockdevDependency is generator_write_blockdev_dependency.
func (f fstabRun) blockdevDependency(u *unitFile, what string) {
	if strings.HasPrefix(what, "/dev/") && strings.Trim(what[len("/dev/"):], "/") != "" {
		if esc, ok := f.pathEscape(what); ok {
			u.printf("After=blockdev@%s.target\n", esc)
		}
	}
}

// addMount is add_mount outside the initrd.
func (f fstabRun) addMount(source, dest, what, where, fstype, opts string, passno int, flags mountFlags, target string) {
	if fstype == "autofs" || !strings.Contains(where, "/") || apiMountPoint(where) {
		return
	}
	wantedBy, _ := fstabValues(opts, "x-systemd.wanted-by")
	requiredBy, _ := fstabValues(opts, "x-systemd.required-by")
	root := where == "/" || (f.version >= fstabV257 && where == "/usr")
	if root {
		if f.version >= fstabV257 && flags&(mNoAuto|mNoFail|mAutomount) != 0 {
			opts = fstabFilter(opts, "noauto", "nofail", "x-systemd.automount")
		}
		flags &^= mNoAuto | mNoFail | mAutomount
		wantedBy, requiredBy = nil, nil
	}
	name, ok := f.pathUnitName(where, ".mount")
	if !ok {
		return
	}
	u, ok := f.openUnit(dest, name)
	if !ok {
		return
	}
	defer u.flush()
	u.printf("[Unit]\nDocumentation=man:fstab(5) man:systemd-fstab-generator(8)\nSourcePath=%s\n", source)
	if (fstype == "nfs" || fstype == "nfs4") && flags&mAutomount == 0 && fstabYesNo(opts, "bg", "fg") {
		opts = "x-systemd.mount-timeout=infinity,retry=10000,nofail," + opts + ",fg"
		flags |= mNoFail
	}
	if f.version >= fstabV257 && (len(wantedBy) > 0 || len(requiredBy) > 0) {
		target = ""
		u.printf("DefaultDependencies=no\nConflicts=umount.target\nBefore=umount.target\n")
	}
	if !f.extraDependencies(u, opts) {
		return
	}
	if target != "" && flags&mNoFail == 0 {
		u.printf("Before=%s\n", target)
	}
	if passno != 0 && !f.fsckDeps(u, dest, what, where, fstype) {
		return
	}
	f.blockdevDependency(u, what)
	u.printf("\n[Mount]\nWhat=%s\nWhere=%s\n", specifierEscape(what), specifierEscape(where))
	if fstype != "" && fstype != "auto" {
		u.printf("Type=%s\n", specifierEscape(fstype))
	}
	filtered := f.writeTimeouts(dest, what, opts)
	f.deviceDeps(dest, what, where, opts)
	if v, ok := fstabValue(opts, "x-systemd.mount-timeout"); ok {
		if _, err := unit.ParseSec(v); err == nil {
			u.printf("TimeoutSec=%s\n", v)
		}
	}
	writeOptions(u, filtered)
	if flags&mRWOnly != 0 {
		u.printf("ReadWriteOnly=yes\n")
	}
	u.flush()
	if flags&mMakeFS != 0 && !f.hookUpMkfs(dest, what, where, fstype) {
		return
	}
	if flags&mGrowFS != 0 && !f.hookUpGrowfs(dest, where, target) {
		return
	}
	if f.version >= fstabV257 && flags&mQuota != 0 {
		f.hookUpQuota(dest, where, fstype, target)
	}
	var automount string
	if flags&mAutomount != 0 {
		if automount, ok = f.pathUnitName(where, ".automount"); !ok {
			return
		}
		a, ok := f.openUnit(dest, automount)
		if !ok {
			return
		}
		a.printf("[Unit]\nSourcePath=%s\nDocumentation=man:fstab(5) man:systemd-fstab-generator(8)\n\n[Automount]\nWhere=%s\n", source, specifierEscape(where))
		if v, ok := fstabValue(opts, "x-systemd.idle-timeout"); ok {
			if _, err := unit.ParseSec(v); err == nil {
				a.printf("TimeoutIdleSec=%s\n", v)
			}
		}
		a.flush()
	}
	if f.version < fstabV257 {
		switch {
		case automount != "":
			f.addSymlink(dest, target, wantsOrRequires(flags), automount)
		case flags&mNoAuto == 0 && len(wantedBy) == 0 && len(requiredBy) == 0:
			f.addSymlink(dest, target, wantsOrRequires(flags), name)
		default:
			f.depLinks(dest, wantedBy, requiredBy, name)
		}
		return
	}
	linked := name
	if automount != "" {
		linked = automount
	}
	if target != "" {
		if flags&mNoAuto == 0 || automount != "" {
			f.addSymlink(dest, target, wantsOrRequires(flags), linked)
		}
		return
	}
	f.depLinks(dest, wantedBy, requiredBy, linked)
}

func (f fstabRun) depLinks(dest string, wantedBy, requiredBy []string, name string) {
	for _, w := range wantedBy {
		f.addSymlink(dest, w, "wants", name)
	}
	for _, r := range requiredBy {
		f.addSymlink(dest, r, "requires", name)
	}
}

// extraDependencies is write_extra_dependencies; false when a unit
// name cannot be mangled (the C code then gives up on the entry).
func (f fstabRun) extraDependencies(u *unitFile, opts string) bool {
	deps := []struct {
		opt      string
		settings []string
	}{
		{"x-systemd.after", []string{"After"}},
		{"x-systemd.requires", []string{"After", "Requires"}},
		{"x-systemd.wants", []string{"Wants", "After"}},
		{"x-systemd.before", []string{"Before"}},
	}
	if f.version >= fstabV257 {
		deps[1].settings = []string{"Requires", "After"}
	} else {
		deps = append(deps[:2], deps[3])
	}
	for _, d := range deps {
		vals, found := fstabValues(opts, d.opt)
		if !found {
			continue
		}
		var names []string
		for _, v := range vals {
			n, ok := f.mangle(v)
			if !ok {
				return false
			}
			names = append(names, n)
		}
		if len(names) > 0 {
			for _, s := range d.settings {
				u.printf("%s=%s\n", s, strings.Join(names, " "))
			}
		}
	}
	mountsFor := []struct{ opt, setting string }{{"x-systemd.requires-mounts-for", "RequiresMountsFor"}}
	if f.version >= fstabV257 {
		mountsFor = append(mountsFor, struct{ opt, setting string }{"x-systemd.wants-mounts-for", "WantsMountsFor"})
	}
	for _, m := range mountsFor {
		vals, found := fstabValues(opts, m.opt)
		if !found {
			continue
		}
		esc := make([]string, len(vals))
		for i, v := range vals {
			esc[i] = specifierEscape(v)
		}
		u.printf("%s=%s\n", m.setting, strings.Join(esc, " "))
	}
	return true
}

// fsckDeps is generator_write_fsck_deps outside the initrd; false when
// it fails (252: the root's link exists already).
func (f fstabRun) fsckDeps(u *unitFile, dir, what, where, fstype string) bool {
	if !isDevicePath(what) {
		return true
	}
	if !f.executableIsGood("fsck") {
		return true
	}
	if fstype != "" && fstype != "auto" && !f.executableIsGood("fsck."+fstype) {
		return true
	}
	if where == "/" {
		const dst = "local-fs.target.wants"
		ok := f.out.symlink(dataUnitDir(f.version)+"/systemd-fsck-root.service", dir+"/"+dst, "systemd-fsck-root.service", f.exe)
		return ok || f.version >= fstabV257
	}
	dep := "Requires"
	if where == "/usr" {
		dep = "Wants"
	}
	fsck, ok := f.instanceUnitName("systemd-fsck", what, ".service")
	if !ok {
		return false
	}
	u.printf("%s=%s\nAfter=%s\n", dep, fsck, fsck)
	return true
}

// executableIsGood is executable_is_good: the name is found on the
// generators' PATH (find_executable: the first executable that is no
// directory) and is not a link to true or /dev/null.
func (f fstabRun) executableIsGood(name string) bool {
	if strings.Contains(name, "/") {
		return false // a type with a "/" names no file on PATH
	}
	for _, d := range generatorPATH {
		p := d + "/" + name
		fi, err := f.fsys.Stat(p)
		if err != nil || fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		target, err := f.fsys.ReadLink(p)
		if err != nil {
			return true
		}
		// PATH_IN_SET(d, "true" "/bin/true", "/usr/bin/true", "/dev/null"):
		// the first two strings are one in C.
		return target != "true/bin/true" && target != "/usr/bin/true" && target != "/dev/null"
	}
	return false
}

// writeTimeouts is generator_write_timeouts: a device's job timeout
// from x-systemd.device-timeout=; it returns the options without it.
func (f fstabRun) writeTimeouts(dir, what, opts string) string {
	filtered := fstabFilter(opts, "comment=systemd.device-timeout", "x-systemd.device-timeout")
	v, ok := fstabValue(opts, "comment=systemd.device-timeout", "x-systemd.device-timeout")
	if !ok {
		return filtered
	}
	if _, err := unit.ParseSec(v); err != nil {
		return filtered
	}
	node := udevNode(what)
	if !isDevicePath(node) {
		return filtered
	}
	if dev, ok := f.pathUnitName(node, ".device"); ok {
		f.writeDropIn(dir, dev, "device-timeout", fmt.Sprintf("# Automatically generated by %s\n# from supplied options \"%s\"\n\n[Unit]\nJobRunningTimeoutSec=%s", fstabGeneratorName, opts, v))
	}
	return filtered
}

// deviceDeps is generator_write_device_deps: a _netdev mount of a device
// orders the device after the network.
func (f fstabRun) deviceDeps(dir, what, where, opts string) {
	if fstabIsExtrinsic(where, opts) || !fstabTestOption(opts, "_netdev") {
		return
	}
	node := udevNode(what)
	if !isDevicePath(node) {
		return
	}
	if dev, ok := f.pathUnitName(node, ".device"); ok {
		f.writeDropIn(dir, dev, "netdev-dependencies", "# Automatically generated by "+fstabGeneratorName+
			"\n\n[Unit]\nAfter=network-online.target network.target\nWants=network-online.target\n")
	}
}

// fstabIsExtrinsic is fstab_is_extrinsic outside the initrd.
func fstabIsExtrinsic(where, opts string) bool {
	switch where {
	case "/", "/usr", "/etc":
		return true
	}
	for _, d := range []string{"/run/initramfs", "/proc", "/sys", "/dev"} {
		if pathBelow(where, d) {
			return true
		}
	}
	return fstabTestOption(opts, "x-initrd.mount")
}

// hookUpMkswap is generator_hook_up_mkswap.
func (f fstabRun) hookUpMkswap(what, swapUnit string) bool {
	node := udevNode(what)
	if !isDevicePath(node) {
		return false
	}
	name, ok := f.instanceUnitName("systemd-mkswap", node, ".service")
	if !ok {
		return false
	}
	u, ok := f.openUnit(genDirNormal, name)
	if !ok {
		return false
	}
	u.printf("[Unit]\nDescription=Make Swap on %%f\nDocumentation=man:systemd-mkswap@.service(8)\nDefaultDependencies=no\n"+
		"BindsTo=%%i.device\nConflicts=shutdown.target\nAfter=%%i.device\nBefore=shutdown.target %s\n\n"+
		"[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/lib/systemd/systemd-makefs swap %s\nTimeoutSec=0\n",
		swapUnit, specifierEscape(node))
	u.flush()
	f.addSymlink(genDirNormal, swapUnit, "requires", name)
	return true
}

// hookUpMkfs is generator_hook_up_mkfs outside the initrd.
func (f fstabRun) hookUpMkfs(dir, what, where, fstype string) bool {
	node := udevNode(what)
	if !isDevicePath(node) || fstype == "" || fstype == "auto" {
		return false
	}
	name, ok := f.instanceUnitName("systemd-makefs", node, ".service")
	if !ok {
		return false
	}
	whereUnit, ok := f.pathUnitName(where, ".mount")
	if !ok {
		return false
	}
	u, ok := f.openUnit(dir, name)
	if !ok {
		return false
	}
	u.printf("[Unit]\nDescription=Make File System on %%f\nDocumentation=man:systemd-makefs@.service(8)\nDefaultDependencies=no\n"+
		"BindsTo=%%i.device\nConflicts=shutdown.target\nAfter=%%i.device\nBefore=shutdown.target systemd-fsck@%%i.service %s\n\n"+
		"[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/lib/systemd/systemd-makefs %s %s\nTimeoutSec=0\n",
		whereUnit, specifierEscape(fstype), specifierEscape(node))
	u.flush()
	f.addSymlink(dir, whereUnit, "requires", name)
	return true
}

// hookUpGrowfs is generator_hook_up_growfs: 252 writes an instance unit
// of its own; 257 orders the target after systemd-growfs-root.service or
// an instance of systemd-growfs@.service and links the mount to it.
func (f fstabRun) hookUpGrowfs(dir, where, target string) bool {
	whereUnit, ok := f.pathUnitName(where, ".mount")
	if !ok {
		return false
	}
	if f.version >= fstabV257 {
		if where == "/" {
			if target != "" && !f.addOrdering(dir, target, "systemd-growfs-root.service") {
				return false
			}
			f.addSymlink(dir, whereUnit, "wants", dataUnitDir(f.version)+"/systemd-growfs-root.service")
			return true
		}
		inst, ok := f.pathEscape(where)
		if !ok {
			return false
		}
		if target != "" && !f.addOrdering(dir, target, "systemd-growfs@"+inst+".service") {
			return false
		}
		f.out.symlink(dataUnitDir(f.version)+"/systemd-growfs@.service", dir+"/"+whereUnit+".wants", "systemd-growfs@"+inst+".service", f.exe)
		return true
	}
	name, ok := f.instanceUnitName("systemd-growfs", where, ".service")
	if !ok {
		return false
	}
	u, ok := f.openUnit(dir, name)
	if !ok {
		return false
	}
	sep := ""
	if target != "" {
		sep = " "
	}
	u.printf("[Unit]\nDescription=Grow File System on %%f\nDocumentation=man:systemd-growfs@.service(8)\nDefaultDependencies=no\n"+
		"BindsTo=%%i.mount\nConflicts=shutdown.target\nAfter=systemd-repart.service %%i.mount\nBefore=shutdown.target%s%s\n", sep, target)
	if where == "/" {
		u.printf("After=systemd-remount-fs.service\n")
	}
	u.printf("\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/lib/systemd/systemd-growfs %s\nTimeoutSec=0\n", specifierEscape(where))
	u.flush()
	f.addSymlink(dir, whereUnit, "wants", name)
	return true
}

// hookUpQuota is generator_hook_up_quotacheck and
// generator_hook_up_quotaon (257) for a file system that needs them
// (fstype_needs_quota).
func (f fstabRun) hookUpQuota(dir, where, fstype, target string) {
	switch fstype {
	case "ext2", "ext3", "ext4", "reiserfs", "jfs", "f2fs":
	default:
		return
	}
	if where == "/" {
		f.addSymlink(dir, "local-fs.target", "wants", dataUnitDir(f.version)+"/systemd-quotacheck-root.service")
		f.addSymlink(dir, "local-fs.target", "wants", dataUnitDir(f.version)+"/quotaon-root.service")
		return
	}
	inst, ok := f.pathEscape(where)
	whereUnit, ok2 := f.pathUnitName(where, ".mount")
	if !ok || !ok2 {
		return
	}
	for _, t := range []string{"systemd-quotacheck@", "quotaon@"} {
		if target != "" && !f.addOrdering(dir, target, t+inst+".service") {
			return
		}
		f.out.symlink(dataUnitDir(f.version)+"/"+t+".service", dir+"/"+whereUnit+".wants", t+inst+".service", f.exe)
	}
}

// addOrdering is generator_add_ordering: a drop-in ordering src After=
// dst; false when it exists.
func (f fstabRun) addOrdering(dir, src, dst string) bool {
	p := dir + "/" + src + ".d/50-order-" + dst + ".conf"
	if strings.Contains(src, "/") || len(path.Base(p)) > 255 {
		return false
	}
	if _, ok := f.out.nodes[p]; ok {
		return false
	}
	f.out.writeFile(p, []byte("# Automatically generated by "+fstabGeneratorName+"\n\n[Unit]\nAfter="+dst+"\n"), f.exe)
	return true
}

// fstabWords splits mount options at the commas a backslash does not
// escape, "\," and "\\" unescaped (strv_split_full with
// EXTRACT_UNESCAPE_SEPARATORS|EXTRACT_UNESCAPE_RELAX).
func fstabWords(opts string) []string {
	var out []string
	var b strings.Builder
	for i := 0; i < len(opts); i++ {
		c := opts[i]
		switch {
		case c == '\\' && i+1 < len(opts) && (opts[i+1] == ',' || opts[i+1] == '\\'):
			b.WriteByte(opts[i+1])
			i++
		case c == ',':
			out = append(out, b.String())
			b.Reset()
		default:
			b.WriteByte(c)
		}
	}
	out = append(out, b.String())
	// Separators are coalesced: no option is empty.
	return slices.DeleteFunc(out, func(w string) bool { return w == "" })
}

// fstabValues is fstab_filter_options with ret_values: the values of
// every "name=VALUE" option, in order; found when there is one.
func fstabValues(opts string, names ...string) ([]string, bool) {
	var vals []string
	found := false
	for _, w := range fstabWords(opts) {
		for _, n := range names {
			if v, ok := strings.CutPrefix(w, n+"="); ok {
				vals = append(vals, v)
				found = true
				break
			}
		}
	}
	return vals, found
}

// fstabValue is fstab_filter_options with ret_value: the value of the
// last option named (a bare name has none).
func fstabValue(opts string, names ...string) (string, bool) {
	v, set := "", false
	for _, w := range fstabWords(opts) {
		for _, n := range names {
			if x, ok := strings.CutPrefix(w, n); ok && (x == "" || x[0] == '=') {
				v, set = strings.TrimPrefix(x, "="), x != ""
				break
			}
		}
	}
	return v, set
}

// fstabFilter is fstab_filter_options' ret_filtered: the options but
// those named (alone or with a value), joined with the separators and
// backslashes escaped again.
func fstabFilter(opts string, names ...string) string {
	var kept []string
	for _, w := range fstabWords(opts) {
		drop := false
		for _, n := range names {
			if x, ok := strings.CutPrefix(w, n); ok && (x == "" || x[0] == '=') {
				drop = true
				break
			}
		}
		if !drop {
			w = strings.ReplaceAll(w, `\`, `\\`)
			kept = append(kept, strings.ReplaceAll(w, ",", `\,`))
		}
	}
	return strings.Join(kept, ",")
}

// fstabYesNo is fstab_test_yes_no_option: the last of the two options
// named is the first.
func fstabYesNo(opts, yes, no string) bool {
	last := ""
	for word := range fstabOptionWords(opts) {
		if n := fstabOptionName(word, yes, no); n != "" {
			last = n
		}
	}
	return last == yes
}
