package boot

import (
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// lastWord is the value the enumerated setting name of section sec ends
// with when its parser reads each assignment as one of words (compared as
// written): an assignment of another word, the empty one included, is
// ignored and the earlier value stays. def is the value before any
// assignment. Enumerations whose parser resets on an empty assignment
// use lastWordReset.
func lastWord(u *Unit, sec, name string, words []string, def string) string {
	return lastEnum(u, sec, name, words, def, false)
}

// lastWordReset is lastWord for a parser that resets the setting to def
// on an empty assignment (config_parse_kill_mode, for one).
func lastWordReset(u *Unit, sec, name string, words []string, def string) string {
	return lastEnum(u, sec, name, words, def, true)
}

func lastEnum(u *Unit, sec, name string, words []string, def string, reset bool) string {
	v := def
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != sec || o.Name != name {
				continue
			}
			switch {
			case o.Value == "" && reset:
				v = def
			case slices.Contains(words, o.Value):
				v = o.Value
			}
		}
	}
	return v
}

// lastBool is the value of the boolean setting name of section sec as
// config_parse_bool reads it: an assignment parse_boolean refuses, the
// empty one included, is ignored.
func lastBool(u *Unit, sec, name string, def bool) bool {
	v, _ := lastBoolFrom(u, sec, name, def)
	return v
}

// lastBoolFrom is lastBool and the file of the assignment that set the
// value, "" when none did.
func lastBoolFrom(u *Unit, sec, name string, def bool) (bool, string) {
	v, src := def, ""
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != sec || o.Name != name {
				continue
			}
			if b, ok := unit.ParseBoolean(o.Value); ok {
				v, src = b, s.Path
			}
		}
	}
	return v, src
}

// serviceTypes are the words Type= takes; notify-reload is new in 253.
func serviceTypes(version int) []string {
	types := []string{"simple", "forking", "oneshot", "dbus", "notify", "idle", "exec"}
	if version >= 253 {
		types = append(types, "notify-reload")
	}
	return types
}

// restartModes are the words Restart= takes.
var restartModes = []string{"no", "on-success", "on-failure", "on-abnormal", "on-watchdog", "on-abort", "always"}

// killModes are the words KillMode= takes.
var killModes = []string{"control-group", "process", "mixed", "none"}

// serviceType is a service's Type= as its parser keeps it or, when none
// is set, the type service_add_extras picks: dbus with a BusName=, from
// 257 exec with a credential, simple with an ExecStart=, oneshot
// otherwise.
func (g *Graph) serviceType(u *Unit, requested string) string {
	if typ := lastWord(u, "Service", "Type", serviceTypes(g.version), ""); typ != "" {
		return typ
	}
	switch {
	case hasBusName(u, requested, g.version):
		return "dbus"
	case g.version >= credentialsExec && hasCredentials(u, "Service", requested, g.version):
		return "exec"
	case commandCount(u, "Service", "ExecStart", requested, g.version) > 0:
		return "simple"
	}
	return "oneshot"
}

// hasBusName reports whether a service keeps a BusName=: config_parse_bus_name
// ignores an assignment whose specifiers do not resolve or that is not a
// valid bus service name, the empty one included.
func hasBusName(u *Unit, requested string, version int) bool {
	ok := false
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != "Service" || o.Name != "BusName" {
				continue
			}
			if k, err := expand(version, requested, o.Value, busNameMax); err == nil && busNameValid(k) {
				ok = true
			}
		}
	}
	return ok
}

// busNameMax is the longest D-Bus name.
const busNameMax = 255

// busNameValid is sd-bus's service name check: a unique name (":" and
// then elements that may start with a digit) or a well-known one, of at
// least two non-empty dot-separated elements of letters, digits, "_" and
// "-", no element starting with a digit; at most 255 bytes.
func busNameValid(p string) bool {
	if p == "" || len(p) > busNameMax {
		return false
	}
	unique := p[0] == ':'
	q := p
	if unique {
		q = p[1:]
	}
	dot, foundDot := true, false
	for i := 0; i < len(q); i++ {
		c := q[i]
		if c == '.' {
			if dot {
				return false
			}
			foundDot, dot = true, true
			continue
		}
		alpha := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		digit := c >= '0' && c <= '9'
		if !alpha && !(digit && (!dot || unique)) && c != '_' && c != '-' {
			return false
		}
		dot = false
	}
	return !dot && foundDot
}

// oneshotForceStatus is the first systemd version modelled to accept a
// RestartForceExitStatus= on a Type=oneshot service: 252 refuses it, 257
// does not (the versions between are not checked and modelled as 252).
const oneshotForceStatus = 257

// hasExitStatus reports whether the exit status list setting name of
// [Service] ends non-empty as config_parse_set_status reads it: each
// word is an exit status (0 to 255 or a name such as DATAERR) or a signal
// (a number up to 64, a name with or without "SIG", RTMIN+n, RTMAX-n);
// other words are ignored, and an empty assignment empties the list.
func hasExitStatus(u *Unit, name string) bool {
	n := 0
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != "Service" || o.Name != name {
				continue
			}
			if o.Value == "" {
				n = 0
				continue
			}
			for _, w := range strings.Fields(o.Value) {
				if exitStatusOrSignal(w) {
					n++
				}
			}
		}
	}
	return n > 0
}

// exitStatusNames are the names exit_status_from_string knows.
var exitStatusNames = strings.Fields(`SUCCESS FAILURE CHDIR NICE FDS EXEC MEMORY LIMITS OOM_ADJUST
	SIGNAL_MASK STDIN STDOUT CHROOT IOPRIO TIMERSLACK SECUREBITS SETSCHEDULER CPUAFFINITY GROUP USER
	CAPABILITIES CGROUP SETSID CONFIRM STDERR PAM NETWORK NAMESPACE NO_NEW_PRIVILEGES SECCOMP
	SELINUX_CONTEXT PERSONALITY APPARMOR ADDRESS_FAMILIES RUNTIME_DIRECTORY CHOWN SMACK_PROCESS_LABEL
	KEYRING STATE_DIRECTORY CACHE_DIRECTORY LOGS_DIRECTORY CONFIGURATION_DIRECTORY NUMA_POLICY
	CREDENTIALS BPF EXCEPTION INVALIDARGUMENT NOTIMPLEMENTED NOPERMISSION NOTINSTALLED NOTCONFIGURED
	NOTRUNNING USAGE DATAERR NOINPUT NOUSER NOHOST UNAVAILABLE SOFTWARE OSERR OSFILE CANTCREAT IOERR
	TEMPFAIL PROTOCOL NOPERM CONFIG`)

// signalNames are the Linux signal names signal_from_string knows.
var signalNames = strings.Fields(`HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM
	TERM STKFLT CHLD CONT STOP TSTP TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH IO PWR SYS`)

func exitStatusOrSignal(w string) bool {
	if slices.Contains(exitStatusNames, w) {
		return true
	}
	if n, err := strconv.Atoi(w); err == nil {
		return n >= 0 && n <= 255
	}
	w = strings.TrimPrefix(w, "SIG")
	if slices.Contains(signalNames, w) {
		return true
	}
	for _, p := range []string{"RTMIN", "RTMAX"} {
		if rest, ok := strings.CutPrefix(w, p); ok {
			if rest == "" {
				return true
			}
			n, err := strconv.Atoi(rest)
			return err == nil && (p == "RTMIN" && rest[0] == '+' && n <= 30 || p == "RTMAX" && rest[0] == '-' && n >= -30)
		}
	}
	return false
}

// contextChecks is the first systemd version whose unit_verify_contexts
// checks the execution context of every unit type that has one (PAM and
// the kill mode, PrivatePIDs=, WorkingDirectory=~ and, with a mount
// namespace, below an API file system); 252 checks PAM in
// each type's verify step, with a stricter kill mode for all but services.
const contextChecks = 257

// verifyContexts refuses the execution contexts systemd refuses for the
// unit types that have one (service, socket, mount, swap).
func (g *Graph) verifyContexts(u *Unit, t, requested string) error {
	switch t {
	case "service", "socket", "mount", "swap":
	default:
		return nil
	}
	bad := func(msg string) error { return fmt.Errorf("%s: %w: %s", u.Name, ErrBadSetting, msg) }
	sec := sectionOf(t)
	kill := lastWordReset(u, sec, "KillMode", killModes, "control-group")
	pam := pamName(u, sec, requested, g.version)
	if g.version < contextChecks {
		switch {
		case pam && t == "service" && kill != "control-group" && kill != "mixed":
			return bad("Service has PAM enabled. Kill mode must be set to 'control-group' or 'mixed'. Refusing.")
		case pam && t != "service" && kill != "control-group":
			return bad("Unit has PAM enabled. Kill mode must be set to 'control-group'. Refusing.")
		}
		return nil
	}
	wd := workDirSetting(u, sec, requested, g.version)
	switch {
	case lastBool(u, sec, "DynamicUser", false) && wd.home:
		return bad("WorkingDirectory=~ is not allowed under DynamicUser=yes. Refusing.")
	case g.version >= workingDirAPIVFS && belowAPIVFS(wd.dir) && g.needsMountNamespace(u, sec, requested):
		return bad("WorkingDirectory= may not be below /proc/, /sys/ or /dev/ when using mount namespacing. Refusing.")
	// PrivatePIDs= takes effect where the kernel has PID namespaces, as
	// every kernel systemd 257 boots on Debian does.
	case t != "service" && privatePIDs(u, g.version):
		return bad("PrivatePIDs= setting is only supported for service units. Refusing.")
	case pam && kill != "control-group" && kill != "mixed":
		return bad("Unit has PAM enabled. Kill mode must be set to 'control-group' or 'mixed'. Refusing.")
	}
	return nil
}

// pamName reports whether a unit keeps a PAMName=: an empty assignment
// unsets it, one whose specifiers do not resolve is ignored.
func pamName(u *Unit, sec, requested string, version int) bool {
	set := false
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != sec || o.Name != "PAMName" {
				continue
			}
			if o.Value == "" {
				set = false
			} else if k, err := expand(version, requested, o.Value, unit.PathPrintfMax); err == nil && k != "" {
				set = true
			}
		}
	}
	return set
}

// privatePIDs reports whether PrivatePIDs= (new in 257) ends "yes": a
// boolean or "yes"/"no"; anything else is ignored.
func privatePIDs(u *Unit, version int) bool {
	if version < contextChecks {
		return false
	}
	v := false
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Name != "PrivatePIDs" || o.Section != sectionOf(unit.Type(u.Name)) {
				continue
			}
			if b, ok := unit.ParseBoolean(o.Value); ok {
				v = b
			}
		}
	}
	return v
}

// maxConnAlways is the first systemd version modelled to refuse
// MaxConnections=0 on every socket, not only on an Accept=yes one (252
// does the latter; the versions between are modelled as 252).
const maxConnAlways = 257

// maxConnections is a socket's MaxConnections= as config_parse_unsigned
// reads it: a value that is not an unsigned number (the empty one
// included) is ignored; the default is 64.
func maxConnections(u *Unit) uint64 {
	v := uint64(64)
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != "Socket" || o.Name != "MaxConnections" {
				continue
			}
			w := strings.TrimLeft(o.Value, " \t\n\r")
			if strings.ContainsAny(w, "_-oObB") {
				continue
			}
			if n, err := strconv.ParseUint(w, 0, 32); err == nil {
				v = n
			}
		}
	}
	return v
}

// symlinkCount is the number of paths Symlinks= of a socket keeps: each
// word whose specifiers resolve to an absolute, normalized path; an
// empty assignment empties the list.
func symlinkCount(u *Unit, requested string, version int) int {
	n := 0
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != "Socket" || o.Name != "Symlinks" {
				continue
			}
			if o.Value == "" {
				n = 0
				continue
			}
			for _, w := range strings.Fields(o.Value) {
				if _, why := absPath(version, requested, w); why == "" {
					n++
				}
			}
		}
	}
	return n
}

// credentialMounts is the first systemd version modelled to refuse mount
// units below /run/credentials (257 does, 252 does not).
const credentialMounts = 257

// apiMountPoint reports the mount points mount_verify refuses as API
// file systems systemd mounts itself or leaves to others
// (mount_point_is_api, mount_point_ignore): the same in 252 and 257.
func apiMountPoint(p string) bool {
	switch p {
	case "/proc", "/sys", "/dev", "/sys/kernel/security", "/sys/fs/smackfs", "/dev/shm", "/dev/pts", "/run",
		"/sys/fs/pstore", "/sys/firmware/efi/efivars", "/sys/fs/bpf",
		"/sys/fs/selinux", "/dev/console", "/proc/kmsg", "/proc/sys", "/proc/sys/kernel/random/boot_id":
		return true
	}
	return pathBelow(p, "/sys/fs/cgroup") || pathBelow(p, "/run/host")
}

// pathBelow reports whether p is dir or below it.
func pathBelow(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// reservedAutomountOption reports whether an automount's ExtraOptions=
// names an option systemd passes to the autofs mount itself: fd, pgrp,
// minproto, maxproto, direct or indirect (automount_verify).
func reservedAutomountOption(u *Unit, requested string, version int) bool {
	opts, _ := lastPrintf(u, "Automount", "ExtraOptions", requested, version)
	return fstabTestOption(opts, "fd", "pgrp", "minproto", "maxproto", "direct", "indirect")
}

// lastPrintf is what config_parse_unit_string_printf leaves of setting
// name in section sec: the last assignment whose specifiers resolve
// (unit_full_printf), unset (false) when that one is empty or there is
// none.
func lastPrintf(u *Unit, sec, name, requested string, version int) (string, bool) {
	v := ""
	for _, s := range u.Sources {
		for _, o := range s.Options {
			if o.Section != sec || o.Name != name {
				continue
			}
			if k, err := expand(version, requested, o.Value, unit.FullPrintfMax); err == nil {
				v = k
			}
		}
	}
	return v, v != ""
}

// fstabTestOption is fstab_test_option: whether a mount option string
// names one of names (fstabOptionName).
func fstabTestOption(opts string, names ...string) bool {
	for word := range fstabOptionWords(opts) {
		if fstabOptionName(word, names...) != "" {
			return true
		}
	}
	return false
}

// fstabOptionWords yields the words of a mount option string as
// fstab_filter_options splits it when it only tests: at commas a
// backslash does not escape, the escapes left in the words.
func fstabOptionWords(opts string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for word := opts; ; {
			end := 0
			for end < len(word) && word[end] != ',' {
				if word[end] == '\\' && end+1 < len(word) {
					end++
				}
				end++
			}
			if !yield(word[:end]) || end >= len(word) {
				return
			}
			word = word[end+1:]
		}
	}
}

// fstabOptionName is the first of names a mount option word names: the
// word is the name alone or the name before "=". "" when none is.
func fstabOptionName(word string, names ...string) string {
	for _, n := range names {
		if strings.HasPrefix(word, n) && (len(word) == len(n) || word[len(n)] == '=') {
			return n
		}
	}
	return ""
}
