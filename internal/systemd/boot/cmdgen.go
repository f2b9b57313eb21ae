package boot

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// Two of systemd's own generators write what the kernel command line asks
// for, and nothing else, outside the initrd:
//
//   - systemd-debug-generator: systemd.mask= masks a unit (a link to
//     /dev/null in the early directory), systemd.wants= adds it to the
//     default target's wants, and systemd.debug_shell adds
//     debug-shell.service, a root shell without a password on a tty (tty9
//     unless told otherwise). From 256 it also writes the units and
//     drop-ins of the systemd.extra-unit.* and systemd.unit-dropin.*
//     credentials, which belong to the machine and are left out.
//   - systemd-run-generator: systemd.run= commands make
//     kernel-command-line.service, and default.target, in the normal
//     directory, becomes kernel-command-line.target, which requires it.
//
// Each runs only when the image has its executable (generatorPath).

const (
	debugGeneratorName = "systemd-debug-generator"
	runGeneratorName   = "systemd-run-generator"
)

// debugDefaultTTYVersion is the first version whose debug generator reads
// systemd.default_debug_tty= and keeps systemd.debug_shell='s switch and
// tty apart (and reads unit credentials).
const debugDefaultTTYVersion = 256

// runKeyExactVersion is the first version whose run generator matches
// systemd.run= exactly (streq) rather than with "-" and "_" alike
// (proc_cmdline_key_streq). 252 does the latter, 257 the former; the
// change came with the generator's move to generator_open_unit_file,
// assumed in 253.
const runKeyExactVersion = 253

// debugTTYFallback is DEBUGTTY as meson builds it unless told otherwise,
// for an executable that names none the model can tell (debugTTYIn).
const debugTTYFallback = "/dev/tty9"

// debugCmdline is what systemd-debug-generator takes from the kernel
// command line (parse_proc_cmdline_item).
type debugCmdline struct {
	// defaultUnit is systemd.unit= or a runlevel word's target; "" with
	// hasDefault false when none is given.
	defaultUnit string
	hasDefault  bool
	mask, wants []string
	// shell is systemd.debug_shell's switch; tty the terminal it names
	// (without /dev/) when hasTTY; defaultTTY systemd.default_debug_tty=
	// (256 and later) when hasDefaultTTY.
	shell                 bool
	tty, defaultTTY       string
	hasTTY, hasDefaultTTY bool
}

// maxCmdlineArgs bounds the values a generator collects from a command
// line: the kernel's is at most a few KiB, an --assume one could be
// longer.
const maxCmdlineArgs = 4096

// parseDebugCmdline is parse_proc_cmdline_item of systemd-debug-generator
// of version, outside the initrd, with DEBUGTTY debugTTY. A systemd.mask=
// or systemd.wants= value unit_name_mangle refuses (an empty one, or a
// name that stays invalid) fails the callback, which ends
// proc_cmdline_parse there: later words are not read.
func parseDebugCmdline(cmdline string, version int, debugTTY string) debugCmdline {
	var c debugCmdline
	ttyName := skipDevPrefix(debugTTY)
	for a := range cmdlineArgs(cmdline) {
		key := strings.ReplaceAll(a.key, "-", "_")
		switch {
		case a.key == "systemd.mask", a.key == "systemd.wants":
			if !a.hasValue {
				continue // proc_cmdline_value_missing
			}
			n, res := mangleUnitName(version, a.value, ".service")
			if res == mangleInvalid {
				return c
			}
			if res == mangleHashed || len(c.mask)+len(c.wants) >= maxCmdlineArgs {
				continue
			}
			if a.key == "systemd.mask" {
				c.mask = append(c.mask, n)
			} else {
				c.wants = append(c.wants, n)
			}
		case key == "systemd.debug_shell":
			on, isBool := true, true
			if a.hasValue {
				on, isBool = unit.ParseBoolean(a.value)
			}
			if version < debugDefaultTTYVersion {
				// arg_debug_shell is the tty, NULL for off.
				switch {
				case !isBool:
					c.shell, c.tty, c.hasTTY = true, skipDevPrefix(a.value), true
				case on:
					c.shell, c.tty, c.hasTTY = true, ttyName, true
				default:
					c.shell, c.tty, c.hasTTY = false, "", false
				}
				continue
			}
			c.shell = !isBool || on
			if !isBool {
				c.tty, c.hasTTY = skipDevPrefix(a.value), true
			}
		case key == "systemd.default_debug_tty" && version >= debugDefaultTTYVersion:
			if a.hasValue {
				c.defaultTTY, c.hasDefaultTTY = skipDevPrefix(a.value), true
			}
		case a.key == "systemd.unit":
			if a.hasValue {
				c.defaultUnit, c.hasDefault = a.value, true
			}
		case !a.hasValue:
			if t := runlevelTarget(a.key); t != "" {
				c.defaultUnit, c.hasDefault = t, true
			}
		}
	}
	return c
}

// runlevelTarget is runlevel_to_target outside the initrd.
func runlevelTarget(word string) string {
	switch word {
	case "emergency", "-b":
		return "emergency.target"
	case "rescue", "single", "-s", "s", "S", "1":
		return "rescue.target"
	case "2", "3", "4":
		return "multi-user.target"
	case "5":
		return "graphical.target"
	}
	return ""
}

// genDebug ports systemd-debug-generator (run), its unit credentials left
// out: everything goes into the early directory.
func genDebug(r genRun) {
	debugTTY := debugTTYFallback
	if data, err := r.fsys.ReadFile(rootfs.Clean(r.exe)); err == nil {
		if t := debugTTYIn(data); t != "" {
			debugTTY = t
		}
	}
	c := parseDebugCmdline(r.cmdline, r.version, debugTTY)
	wants := c.wants
	if c.shell {
		wants = append(wants[:len(wants):len(wants)], "debug-shell.service")
		r.debugShellDropIn(c, skipDevPrefix(debugTTY))
	}
	// generate_mask_symlinks: a second mask of a name fails (EEXIST).
	for _, u := range c.mask {
		r.out.symlink("/dev/null", genDirEarly, u, r.exe)
	}
	// generate_wants_symlinks, into the wants of the unit
	// do_queue_default_job starts.
	target := "default.target"
	if c.hasDefault {
		target = c.defaultUnit
	}
	for _, u := range wants {
		dir, ok := r.out.mkdirParents(genDirEarly, target+".wants", u)
		if !ok {
			continue
		}
		r.out.symlink(dataUnitDir(r.version)+"/"+u, dir, u, r.exe)
	}
}

// debugShellDropIn is install_debug_shell_dropin: a drop-in moving
// debug-shell.service to another tty than DEBUGTTY's (ttyName). 252 writes
// the text without its header and final newline (write_string_file adds
// the newline).
func (r genRun) debugShellDropIn(c debugCmdline, ttyName string) {
	var tty string
	switch {
	case r.version < debugDefaultTTYVersion:
		if c.tty == ttyName {
			return
		}
		tty = c.tty
	case c.hasTTY:
		tty = c.tty
	case c.hasDefaultTTY:
		tty = c.defaultTTY
	default:
		return
	}
	if r.version >= debugDefaultTTYVersion && pathEqual(tty, ttyName) {
		return
	}
	text := fmt.Sprintf("[Unit]\nDescription=Early root shell on /dev/%s FOR DEBUGGING ONLY\nConditionPathExists=\n[Service]\nTTYPath=/dev/%s\n", tty, tty)
	if r.version >= debugDefaultTTYVersion {
		text = fmt.Sprintf("# Automatically generated by %s\n\n[Unit]\nDescription=Early root shell on /dev/%s FOR DEBUGGING ONLY\nConditionPathExists=\n\n[Service]\nTTYPath=/dev/%s\n",
			debugGeneratorName, tty, tty)
	}
	r.writeDropIn(genDirEarly, "debug-shell.service", "tty", text)
}

// debugTTYIn returns DEBUGTTY as compiled into a systemd-debug-generator
// executable, "" when it cannot tell: the one NUL-terminated string of the
// file that is a path below /dev/ (printable ASCII, no blanks, no "%")
// other than /dev/null, which the generator's masks link to.
func debugTTYIn(data []byte) string {
	const dev = "/dev/"
	found := ""
	for rest := data; ; {
		i := bytes.Index(rest, []byte("\x00"+dev))
		if i < 0 {
			return found
		}
		rest = rest[i+1:]
		end := bytes.IndexByte(rest, 0)
		if end < 0 {
			return found
		}
		s := rest[:end]
		if len(s) == len(dev) || string(s) == "/dev/null" || len(s) > maxPath || !printablePath(s) || bytes.IndexByte(s, '%') >= 0 {
			continue
		}
		if found != "" && found != string(s) {
			return ""
		}
		found = string(s)
	}
}

// genRunCmd ports systemd-run-generator (parse, generate) into the normal
// directory.
func genRunCmd(r genRun) {
	var cmds []string
	var success, failure string
	var hasSuccess, hasFailure bool
	for a := range cmdlineArgs(r.cmdline) {
		key := strings.ReplaceAll(a.key, "-", "_")
		if !a.hasValue {
			continue // proc_cmdline_value_missing, for all three keys
		}
		switch {
		case a.key == "systemd.run", key == "systemd.run" && r.version < runKeyExactVersion:
			if len(cmds) < maxCmdlineArgs {
				cmds = append(cmds, a.value)
			}
		case key == "systemd.run_success_action":
			success, hasSuccess = a.value, true
		case key == "systemd.run_failure_action":
			failure, hasFailure = a.value, true
		}
	}
	if len(cmds) == 0 && !hasSuccess {
		return
	}
	var b strings.Builder
	b.WriteString("# Automatically generated by " + runGeneratorName + "\n\n[Unit]\nDescription=Command from Kernel Command Line\n" +
		"Documentation=man:systemd-run-generator(8)\nSourcePath=/proc/cmdline\n")
	for _, act := range []struct {
		key, value string
		set        bool
	}{{"SuccessAction", success, hasSuccess}, {"FailureAction", failure, hasFailure}} {
		switch {
		case !act.set:
			b.WriteString(act.key + "=exit\n")
		case act.value != "none":
			b.WriteString(act.key + "=" + act.value + "\n")
		}
	}
	b.WriteString("\n[Service]\nType=oneshot\nStandardOutput=journal+console\n")
	for _, c := range cmds {
		b.WriteString("ExecStart=" + specifierEscape(c) + "\n")
	}
	if !r.out.add(genDirNormal+"/kernel-command-line.service", &genNode{mode: 0o644, data: []byte(b.String()), source: r.exe}) {
		return
	}
	if !r.out.add(genDirNormal+"/kernel-command-line.target", &genNode{mode: 0o644, source: r.exe, data: []byte(
		"# Automatically generated by " + runGeneratorName + "\n\n[Unit]\nDescription=Command from Kernel Command Line\n" +
			"Documentation=man:systemd-run-generator(8)\nSourcePath=/proc/cmdline\n" +
			"Requires=kernel-command-line.service\nAfter=kernel-command-line.service\n")}) {
		return
	}
	r.out.symlink("kernel-command-line.target", genDirNormal, DefaultTarget, r.exe)
}

// mangleResult is how unit_name_mangle_with_suffix ends.
type mangleResult uint8

const (
	mangleOK      mangleResult = iota
	mangleInvalid              // -EINVAL: no valid name
	mangleHashed               // a path too long: systemd names it by a hash, not modelled
)

// mangleUnitName is unit_name_mangle_with_suffix(name, flags without
// UNIT_NAME_MANGLE_GLOB, suffix) of version: a valid unit name is itself,
// an absolute path names its device unit (below /dev/ or /sys/) or mount
// unit, anything else has "/" turned to "-" and the characters no unit
// name holds escaped as \xNN, with the suffix when it has no unit type;
// the result must be a valid name.
func mangleUnitName(version int, name, suffix string) (string, mangleResult) {
	if name == "" {
		return "", mangleInvalid
	}
	if unit.Valid(name) {
		return name, mangleOK
	}
	if strings.HasPrefix(name, "/") {
		p := unit.PathSimplify(version, name)
		for _, sfx := range []string{".device", ".mount"} {
			if sfx == ".device" && !isDevicePath(p) {
				continue
			}
			// unit_name_from_path: -EINVAL (not normalized) falls
			// through to escaping.
			if p == "/" {
				return "-" + sfx, mangleOK
			}
			if !unit.PathNormalized(p) || !pathValid(p) {
				continue
			}
			n := escapeName(strings.Trim(p, "/")) + sfx
			if len(n) > unit.MaxNameLen {
				return "", mangleHashed
			}
			if unit.Valid(n) {
				return n, mangleOK
			}
		}
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '/':
			b.WriteByte('-')
		case c == '@' || unit.ValidChar(c):
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "\\x%02x", c)
		}
	}
	s := b.String()
	if unit.Type(s) == "" {
		s += suffix
	}
	if !unit.Valid(s) {
		return "", mangleInvalid
	}
	return s, mangleOK
}

// pathComponent is path_find_first_component with ".." accepted: the
// first component of p past slashes and "." components, and the rest
// after it; n is its length, 0 when p has none, -1 when it is longer than
// NAME_MAX.
func pathComponent(p string) (comp, rest string, n int) {
	p = skipSlashOrDot(p)
	if p == "" || p == "." {
		return "", "", 0
	}
	end := strings.IndexByte(p, '/')
	if end < 0 {
		end = len(p)
	}
	if end > 255 {
		return "", "", -1
	}
	rest = skipSlashOrDot(p[end:])
	if rest == "." {
		rest = ""
	}
	return p[:end], rest, end
}

// skipSlashOrDot is skip_slash_or_dot: past every "/" and "./".
func skipSlashOrDot(p string) string {
	for p != "" {
		switch {
		case p[0] == '/':
			p = p[1:]
		case strings.HasPrefix(p, "./"):
			p = p[2:]
		default:
			return p
		}
	}
	return p
}

// skipDevPrefix is skip_dev_prefix: what follows path_startswith(p,
// "/dev/"), p itself when it does not start so. The rest starts at the
// component after "dev" (slashes and "." components skipped); a component
// too long there fails the match.
func skipDevPrefix(p string) string {
	if !strings.HasPrefix(p, "/") {
		return p
	}
	comp, rest, n := pathComponent(p)
	if n != 3 || comp != "dev" {
		return p
	}
	start := skipSlashOrDot(rest)
	if _, _, n := pathComponent(start); n < 0 {
		return p
	}
	if start == "." {
		return ""
	}
	return start
}

// pathEqual is path_equal (path_compare == 0): both absolute or both
// relative, with the same components ("." ones and extra slashes aside).
func pathEqual(a, b string) bool {
	if strings.HasPrefix(a, "/") != strings.HasPrefix(b, "/") {
		return false
	}
	for {
		ca, ra, na := pathComponent(a)
		cb, rb, nb := pathComponent(b)
		if na < 0 || nb < 0 {
			return na == nb
		}
		if na == 0 || nb == 0 {
			return na == nb
		}
		if ca != cb {
			return false
		}
		a, b = ra, rb
	}
}

// pathValid is path_is_valid's length rules: no component longer than
// NAME_MAX, shorter than PATH_MAX.
func pathValid(p string) bool {
	if p == "" || len(p) >= maxPath {
		return false
	}
	for c := range strings.SplitSeq(p, "/") {
		if len(c) > 255 {
			return false
		}
	}
	return true
}

// mkdirParents makes the directory dir/rel as generator_add_symlink's
// mkdir_parents does before its symlink(2) of dir/rel/leaf: component by component, "."
// and empty ones skipped. It returns the directory's image name, false
// when the link would fail: a ".." anywhere (path_is_safe refuses the
// path, and the directories after it do not exist), a component that
// exists as no directory, or a path too long for the kernel (counted from
// /run/systemd/generator.early/).
func (t *genOut) mkdirParents(dir, rel, leaf string) (string, bool) {
	if !pathValid("/"+dir+"/"+rel+"/"+leaf) || slices.Contains(strings.Split(rel, "/"), "..") {
		return "", false
	}
	cur := dir
	for c := range strings.SplitSeq(rel, "/") {
		if c == "" || c == "." {
			continue
		}
		next := cur + "/" + c
		if n, ok := t.nodes[next]; !ok {
			t.mkdirAll(next)
		} else if !n.mode.IsDir() {
			return "", false
		}
		cur = next
	}
	return cur, true
}
