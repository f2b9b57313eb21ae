package boot

import (
	"slices"
	"strconv"
	"strings"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// systemd-getty-generator, ported for a boot on a virtual machine or bare
// metal (src/getty-generator, run): unless the kernel command line says
// systemd.getty_auto=no, every active kernel console that is no virtual
// terminal, and every virtualizer console the machine has, gets a
// serial-getty@NAME.service link in getty.target.wants of the normal
// directory: a login prompt on that console. Which consoles a machine has
// is its own; the model assumes (gettyConsoles):
//
//   - The active consoles (/sys/class/tty/console/active) are those the
//     kernel registers from the command line's console= words
//     (console_setup, try_enable_preferred_console): of each console
//     driver, the first word naming it, when the driver is a serial one
//     (a name starting "tty" but the virtual terminals' "tty" and
//     "ttynull", or hvc, hvsi, xvc), and the machine has that device, so
//     verify_tty passes. Without console=, x86's default console is a
//     virtual terminal (tty0, skipped); the firmware's (ACPI SPCR, a
//     device tree's stdout-path) is not known, and none is assumed.
//     console=uart8250,… and other early forms, console=null, braille
//     consoles and DEVNAME:0.0 names are left out.
//   - Of the virtualizer consoles (hvc0, xvc0, hvsi0, sclp_line0,
//     ttysclp0, 3270/tty1) a Xen guest has hvc0 (--assume
//     virtualization=xen); another or an unknown machine has none (KVM's
//     hvc0 exists only with a virtio console).
//
// Left out as the machine's: $SYSTEMD_GETTY_AUTO in PID 1's environment,
// 257's getty.ttys.serial and getty.ttys.container credentials, and a
// container's console-getty.service and $container_ttys.

const gettyGeneratorName = "systemd-getty-generator"

// genGetty is run on a virtual machine or bare metal.
func genGetty(r genRun) {
	auto := true
	for a := range cmdlineArgs(r.cmdline) {
		// parse_proc_cmdline_item: an invalid value is ignored.
		if strings.ReplaceAll(a.key, "-", "_") == "systemd.getty_auto" {
			a.setBool(&auto)
		}
	}
	if !auto {
		return
	}
	for _, tty := range gettyConsoles(r.cmdline, r.machine.Virtualization) {
		// add_serial_getty: unit_name_from_path_instance; add_symlink
		// ignores EEXIST (a console listed twice).
		name, ok := gettyUnitName(r.version, tty)
		if !ok {
			return // the generator fails there
		}
		dir, ok := r.out.mkdirParents(genDirNormal, "getty.target.wants", name)
		if !ok {
			return
		}
		r.out.symlink(dataUnitDir(r.version)+"/serial-getty@.service", dir, name, r.exe)
	}
}

// gettyUnitName is unit_name_from_path_instance("serial-getty", tty,
// ".service").
func gettyUnitName(version int, tty string) (string, bool) {
	p := unit.PathSimplify(version, tty)
	esc := "-"
	if p != "/" {
		if !unit.PathNormalized(p) || !pathValid(p) {
			return "", false
		}
		esc = escapeName(strings.Trim(p, "/"))
	}
	n := "serial-getty@" + esc + ".service"
	return n, len(n) <= unit.MaxNameLen && unit.Valid(n)
}

// gettyConsoles are the consoles the generator links a serial getty to,
// in its order: the active kernel consoles that are no virtual terminal
// (tty_is_vc: the "tty" driver's, which kernelConsoles leaves out), then
// the virtualizer consoles of the machine.
func gettyConsoles(cmdline, virt string) []string {
	out := kernelConsoles(cmdline)
	if strings.EqualFold(strings.TrimSpace(virt), "xen") {
		out = append(out, "hvc0")
	}
	return out
}

// maxCmdlineConsoles is the kernel's MAX_CMDLINECONSOLES.
const maxCmdlineConsoles = 8

// kernelConsoles is what the model takes /sys/class/tty/console/active to
// list for a boot with cmdline (see the assumptions above): the kernel's
// console_setup of each console= parameter (a leading digit means ttyS;
// the name ends at the first digit or ","; the index is the number
// there), at most maxCmdlineConsoles distinct ones, the first per driver,
// serial drivers only.
func kernelConsoles(cmdline string) []string {
	type console struct {
		name string
		idx  int
	}
	var cons []console
	for _, p := range kernelParams(cmdline) {
		v, ok := strings.CutPrefix(p, "console=")
		if !ok || v == "" || v == "null" || strings.HasPrefix(v, "brl,") || strings.Contains(v, ":") {
			continue
		}
		if v[0] >= '0' && v[0] <= '9' {
			v = "ttyS" + v
		}
		i := strings.IndexFunc(v, func(r rune) bool { return r >= '0' && r <= '9' || r == ',' })
		if i < 0 {
			i = len(v)
		}
		digits := v[i:]
		if j := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
			digits = digits[:j]
		}
		idx := 0
		if digits != "" {
			n, err := strconv.Atoi(digits)
			if err != nil || n > 9999 {
				continue // no driver has such a console
			}
			idx = n
		}
		c := console{v[:i], idx}
		if len(c.name) >= 16 || slices.Contains(cons, c) {
			continue
		}
		if len(cons) == maxCmdlineConsoles {
			break
		}
		cons = append(cons, c)
	}
	var out []string
	seen := map[string]bool{}
	for _, c := range cons {
		if seen[c.name] {
			continue
		}
		seen[c.name] = true
		serial := strings.HasPrefix(c.name, "tty") && c.name != "tty" && c.name != "ttynull" ||
			c.name == "hvc" || c.name == "hvsi" || c.name == "xvc"
		if serial {
			out = append(out, c.name+strconv.Itoa(c.idx))
		}
	}
	return out
}

// kernelParams splits a kernel command line as the kernel's parse_args
// does (next_arg): blank-separated, double quotes keep blanks and are
// removed around a value or a whole parameter; "--" ends the kernel's
// parameters (the rest is init's).
func kernelParams(s string) []string {
	space := func(c byte) bool { return c == ' ' || c >= '\t' && c <= '\r' }
	var out []string
	for {
		for s != "" && space(s[0]) {
			s = s[1:]
		}
		if s == "" || len(out) >= maxCmdlineArgs {
			return out
		}
		in, quoted := false, false
		if s[0] == '"' {
			s, in, quoted = s[1:], true, true
		}
		i, eq := 0, -1
		for ; i < len(s); i++ {
			if space(s[i]) && !in {
				break
			}
			if eq < 0 && s[i] == '=' {
				eq = i
			}
			if s[i] == '"' {
				in = !in
			}
		}
		arg := s[:i]
		s = s[i:]
		param, val := arg, ""
		if eq >= 0 {
			// One closing quote goes, after a value's opening one or a
			// whole parameter's.
			param, val = arg[:eq], arg[eq+1:]
			if v, ok := strings.CutPrefix(val, "\""); ok || quoted {
				val = strings.TrimSuffix(v, "\"")
			}
		} else if quoted {
			param = strings.TrimSuffix(param, "\"")
		}
		if eq < 0 && param == "--" {
			return out
		}
		if eq >= 0 {
			param += "=" + val
		}
		out = append(out, param)
	}
}
