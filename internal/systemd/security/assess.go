package security

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Tenths is an exposure in tenths: 96 is systemd's "9.6". It marshals to
// JSON as the decimal number. Like systemd's, it is an unsigned 64-bit
// number: a security policy's weights can make the arithmetic wrap (a
// hostile policy file in an image), and systemd then prints and ranks the
// wrapped value, which amilint does too.
type Tenths uint64

// String formats t as systemd prints it ("9.6").
func (t Tenths) String() string { return string(t.append(nil)) }

// append appends what String returns (without fmt: a facts document
// writes thousands of these).
func (t Tenths) append(b []byte) []byte {
	b = strconv.AppendUint(b, uint64(t)/10, 10)
	return strconv.AppendUint(append(b, '.'), uint64(t)%10, 10)
}

// MarshalJSON writes t as a JSON number (9.6).
func (t Tenths) MarshalJSON() ([]byte, error) { return t.append(make([]byte, 0, 8)), nil }

// AppendJSON appends what MarshalJSON returns.
func (t Tenths) AppendJSON(b []byte) []byte { return t.append(b) }

// UnmarshalJSON reads a JSON number (9.6) as tenths.
func (t *Tenths) UnmarshalJSON(b []byte) error {
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return fmt.Errorf("exposure %s: %w", b, err)
	}
	if !(f >= 0 && f*10 < 1<<64) { // NaN, negative or beyond 64 bits
		return fmt.Errorf("exposure %s: out of range", b)
	}
	*t = Tenths(f*10 + 0.5)
	return nil
}

// ParseTenths reads "9.6" (or "9", "10.0") as 96, refusing anything
// outside 0.0..10.0 or with more than one decimal.
func ParseTenths(s string) (Tenths, error) {
	whole, frac, hasFrac := strings.Cut(s, ".")
	w, err := strconv.Atoi(whole)
	if err != nil || w < 0 || strings.HasPrefix(whole, "+") {
		return 0, fmt.Errorf("exposure %q: want a number from 0.0 to 10.0", s)
	}
	f := 0
	if hasFrac {
		if len(frac) != 1 || frac[0] < '0' || frac[0] > '9' {
			return 0, fmt.Errorf("exposure %q: want one decimal, from 0.0 to 10.0", s)
		}
		f = int(frac[0] - '0')
	}
	if w > 10 || w*10+f > 100 {
		return 0, fmt.Errorf("exposure %q: above 10.0", s)
	}
	return Tenths(w*10 + f), nil
}

// levels is systemd's badness_table: the first level whose floor the
// exposure reaches.
var levels = []struct {
	floor Tenths
	name  string
}{
	{100, "DANGEROUS"}, {90, "UNSAFE"}, {75, "EXPOSED"}, {50, "MEDIUM"}, {10, "OK"}, {1, "SAFE"}, {0, "PERFECT"},
}

// Level names an exposure as systemd does (UNSAFE, OK, …).
func Level(e Tenths) string {
	for _, l := range levels {
		if e >= l.floor {
			return l.name
		}
	}
	return "PERFECT"
}

// notApplicable is systemd's UINT64_MAX badness.
const notApplicable = ^uint64(0)

// info is systemd's SecurityInfo, as get_security_info fills it offline.
type info struct {
	defaultDeps                                  bool
	ambient, bounding                            uint64
	user                                         *string
	supplementary                                []string
	dynamicUser                                  bool
	ipDenyAll, ipAllowLocalhost, ipAllowOther    bool
	ipFiltersIngress, ipFiltersEgress            bool
	keyringMode, protectProc, procSubset, notify string
	bools                                        [numBoolFields]bool
	protectHome, protectSystem                   string
	restrictNamespaces                           uint64
	rootDirectory, rootImage                     *string
	devicePolicy                                 string
	deviceAllow                                  []string
	archs                                        map[string]bool
	syscallAllowList                             bool
	syscallFilter                                syscallSet // nil when there is no filter
	umask                                        uint32
}

// info converts the loaded settings as get_security_info does.
func (s *settings) info() *info {
	in := &info{
		defaultDeps: s.defaultDeps, ambient: s.ambient, bounding: s.bounding,
		user: s.user, supplementary: s.supplementary, dynamicUser: s.dynamicUser,
		keyringMode: s.keyringMode, protectProc: s.protectProc, procSubset: s.procSubset, notify: s.notifyAccess,
		protectHome: s.protectHome, protectSystem: s.protectSystem, restrictNamespaces: s.restrictNamespaces,
		rootDirectory: s.rootDirectory, rootImage: s.rootImage, devicePolicy: s.devicePolicy,
		archs: s.archs, syscallAllowList: s.syscallAllowList, umask: s.umask,
		ipFiltersIngress: len(s.ipIngress) > 0, ipFiltersEgress: len(s.ipEgress) > 0,
	}
	b := &in.bools
	for _, f := range []int{fieldAFInet, fieldAFUnix, fieldAFNetlink, fieldAFPacket, fieldAFOther} {
		b[f] = s.afAllowList
	}
	for fam := range s.afSet {
		if fam != 0 {
			b[familyField(fam)] = !s.afAllowList
		}
	}
	b[fieldLockPersonality], b[fieldMemoryDenyWX] = s.lockPersonality, s.memoryDenyWX
	b[fieldNoNewPrivileges], b[fieldProtectHostname] = s.noNewPrivileges, s.protectHostname
	b[fieldPrivateDevices], b[fieldPrivateMounts] = s.privateDevices, s.privateMounts != 0
	b[fieldPrivateNetwork], b[fieldPrivateTmp] = s.privateNetwork, s.privateTmp != "no"
	b[fieldPrivateUsers], b[fieldProtectCgroups] = s.privateUsers != "no", s.protectCgroups != "no"
	b[fieldProtectKernelModules], b[fieldProtectKernelTunables] = s.protectKernelMods, s.protectKernelTun
	b[fieldProtectKernelLogs], b[fieldProtectClock] = s.protectKernelLogs, s.protectClock
	b[fieldRemoveIPC], b[fieldRestrictRealtime], b[fieldRestrictSUIDSGID] = s.removeIPC, s.restrictRealtime, s.restrictSUIDSGID
	b[fieldDelegate] = s.delegate
	if s.syscallFilter != nil {
		// An allow list does not allow what it lists with an errno.
		in.syscallFilter = slices.Clone(s.syscallFilter)
		if s.syscallAllowList {
			for i, w := range s.syscallErrno {
				in.syscallFilter[i] &^= w
			}
		}
	}
	v4any, v6any := netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")
	in.ipDenyAll = s.ipDeny[v4any] && s.ipDeny[v6any]
	for p := range s.ipAllow {
		a := p.Addr()
		if a.Is4() && a.As4()[0] == 127 || a.Is6() && a == netip.IPv6Loopback() {
			in.ipAllowLocalhost = true
		} else {
			in.ipAllowOther = true
		}
	}
	for _, d := range s.deviceAllow {
		var p strings.Builder
		p.WriteString(d.path + ":")
		if d.r {
			p.WriteByte('r')
		}
		if d.w {
			p.WriteByte('w')
		}
		if d.m {
			p.WriteByte('m')
		}
		in.deviceAllow = append(in.deviceAllow, p.String())
	}
	return in
}

// The boolean fields of SecurityInfo the checks read, by index.
const (
	fieldLockPersonality = iota
	fieldMemoryDenyWX
	fieldNoNewPrivileges
	fieldProtectHostname
	fieldPrivateDevices
	fieldPrivateMounts
	fieldPrivateNetwork
	fieldPrivateTmp
	fieldPrivateUsers
	fieldProtectCgroups
	fieldProtectKernelModules
	fieldProtectKernelTunables
	fieldProtectKernelLogs
	fieldProtectClock
	fieldRemoveIPC
	fieldRestrictRealtime
	fieldRestrictSUIDSGID
	fieldDelegate
	fieldAFInet
	fieldAFUnix
	fieldAFNetlink
	fieldAFPacket
	fieldAFOther
	numBoolFields
)

// boolFields maps SecurityInfo's field names (checks.json "field") to indexes.
var boolFields = map[string]int{
	"lock_personality": fieldLockPersonality, "memory_deny_write_execute": fieldMemoryDenyWX,
	"no_new_privileges": fieldNoNewPrivileges, "protect_hostname": fieldProtectHostname,
	"private_devices": fieldPrivateDevices, "private_mounts": fieldPrivateMounts,
	"private_network": fieldPrivateNetwork, "private_tmp": fieldPrivateTmp,
	"private_users": fieldPrivateUsers, "protect_control_groups": fieldProtectCgroups,
	"protect_kernel_modules": fieldProtectKernelModules, "protect_kernel_tunables": fieldProtectKernelTunables,
	"protect_kernel_logs": fieldProtectKernelLogs, "protect_clock": fieldProtectClock,
	"remove_ipc": fieldRemoveIPC, "restrict_realtime": fieldRestrictRealtime, "restrict_suid_sgid": fieldRestrictSUIDSGID,
	"delegate":                     fieldDelegate,
	"restrict_address_family_inet": fieldAFInet, "restrict_address_family_unix": fieldAFUnix,
	"restrict_address_family_netlink": fieldAFNetlink, "restrict_address_family_packet": fieldAFPacket,
	"restrict_address_family_other": fieldAFOther,
}

// familyField is the RestrictAddressFamilies field a family falls under.
func familyField(af int) int {
	switch af {
	case 2, 10:
		return fieldAFInet
	case 1:
		return fieldAFUnix
	case 16:
		return fieldAFNetlink
	case 17:
		return fieldAFPacket
	}
	return fieldAFOther
}

// runsPrivileged is security_info_runs_privileged.
func (in *info) runsPrivileged() bool {
	if in.user != nil && (*in.user == "0" || *in.user == "root") {
		return true
	}
	if in.dynamicUser {
		return false
	}
	return in.user == nil || *in.user == ""
}

// assess returns a check's badness (notApplicable when it does not apply)
// and its own description ("" to use the good/bad/n-a one).
func (t *Tables) assess(c *CheckSpec, in *info) (uint64, string) {
	b2u := func(b bool) uint64 {
		if b {
			return 1
		}
		return 0
	}
	userIs := func(names ...string) bool { return in.user != nil && slices.Contains(names, *in.user) }
	switch c.Assess {
	case "bool":
		v := in.bools[c.fieldIndex]
		if c.Invert {
			return b2u(v), ""
		}
		return b2u(!v), ""
	case "user":
		switch {
		case userIs("nobody"):
			return 9, "Service runs under as 'nobody' user, which should not be used for services"
		case in.dynamicUser && !userIs("0", "root"):
			return 0, "Service runs under a transient non-root user identity"
		case in.user != nil && !userIs("0", "root", ""):
			return 0, "Service runs under a static non-root user identity"
		}
		return 10, ""
	case "supplementary_groups":
		if in.runsPrivileged() {
			return notApplicable, ""
		}
		return b2u(len(in.supplementary) > 0), ""
	case "remove_ipc":
		if in.runsPrivileged() {
			return notApplicable, ""
		}
		return b2u(!in.bools[fieldRemoveIPC]), ""
	case "protect_home":
		switch in.protectHome {
		case "yes":
			return 0, "Service has no access to home directories"
		case "read-only":
			return 5, "Service has read-only access to home directories"
		case "tmpfs":
			return 1, "Service has access to fake empty home directories"
		}
		return 10, "Service has full access to home directories"
	case "protect_system":
		switch in.protectSystem {
		case "yes":
			return 5, "Service has limited write access to the OS file hierarchy"
		case "full":
			return 3, "Service has very limited write access to the OS file hierarchy"
		case "strict":
			return 0, "Service has strict read-only access to the OS file hierarchy"
		}
		return 10, "Service has full access to the OS file hierarchy"
	case "root_directory":
		return b2u(emptyOrRoot(in.rootDirectory) && emptyOrRoot(in.rootImage)), ""
	case "capability_bounding_set":
		return b2u(in.bounding&c.capMask != 0), ""
	case "umask":
		switch {
		case in.umask&0o002 == 0:
			return 10, "Files created by service are world-writable by default"
		case in.umask&0o004 == 0:
			return 5, "Files created by service are world-readable by default"
		case in.umask&0o020 == 0:
			return 2, "Files created by service are group-writable by default"
		case in.umask&0o040 == 0:
			return 1, "Files created by service are group-readable by default"
		}
		return 0, "Files created by service are accessible only by service's own user by default"
	case "keyring_mode":
		return b2u(in.keyringMode != "private"), ""
	case "protect_proc":
		switch in.protectProc {
		case "noaccess":
			return 1, ""
		case "invisible", "ptraceable":
			return 0, ""
		}
		return 3, ""
	case "proc_subset":
		return b2u(in.procSubset != "pid"), ""
	case "notify_access":
		return b2u(in.notify == "all"), ""
	case "restrict_namespaces":
		return b2u(in.restrictNamespaces&c.nsFlag != 0), ""
	case "system_call_architectures":
		switch {
		case len(in.archs) == 0:
			return 10, "Service may execute system calls with all ABIs"
		case len(in.archs) == 1 && in.archs["native"]:
			return 0, "Service may execute system calls only with native ABI"
		}
		return 8, "Service may execute system calls with multiple ABIs"
	case "system_call_filter":
		return t.assessSyscalls(c.SyscallGroup, in)
	case "ip_address_allow":
		switch {
		case in.ipFiltersIngress || in.ipFiltersEgress:
			return 0, "Service defines custom ingress/egress IP filters with BPF programs"
		case !in.ipDenyAll:
			return 10, "Service does not define an IP address allow list"
		case in.ipAllowOther:
			return 5, "Service defines IP address allow list with non-localhost entries"
		case in.ipAllowLocalhost:
			return 2, "Service defines IP address allow list with only localhost entries"
		}
		return 0, "Service blocks all IP address ranges"
	case "device_allow":
		if in.devicePolicy == "strict" || in.devicePolicy == "closed" {
			if len(in.deviceAllow) > 0 {
				return 5, "Service has a device ACL with some special devices: " + strings.Join(in.deviceAllow, " ")
			}
			return 0, "Service has a minimal device ACL"
		}
		return 10, "Service has no device ACL"
	case "ambient_capabilities":
		return b2u(in.ambient != 0), ""
	}
	panic("security: unknown assessment " + c.Assess)
}

// assessSyscalls is assess_system_call_filter for one group.
func (t *Tables) assessSyscalls(group string, in *info) (uint64, string) {
	if !in.syscallAllowList && (in.syscallFilter == nil || in.syscallFilter.empty()) {
		return 10, "Service does not filter system calls"
	}
	offender, bad := t.offender(group, in)
	switch {
	case in.syscallAllowList && bad:
		return 9, fmt.Sprintf("System call allow list defined for service, and %s is included (e.g. %s is allowed)", group, offender)
	case in.syscallAllowList:
		return 0, fmt.Sprintf("System call allow list defined for service, and %s is not included", group)
	case bad:
		return 10, fmt.Sprintf("System call deny list defined for service, and %s is not included (e.g. %s is allowed)", group, offender)
	}
	return 0, fmt.Sprintf("System call deny list defined for service, and %s is included", group)
}

// offender is syscall_names_in_filter: the first x86-64 system call of the
// group (depth first, in systemd's order) that the filter lets through.
func (t *Tables) offender(group string, in *info) (string, bool) {
	for _, i := range t.nativeOrder[group] {
		if (in.syscallFilter != nil && in.syscallFilter.has(i)) == in.syscallAllowList {
			return t.syscallNames[i], true
		}
	}
	return "", false
}

// expand lists a group's system calls, subgroups expanded, in order.
func (t *Tables) expand(group string) []string {
	var out []string
	for _, m := range t.groups[group] {
		if strings.HasPrefix(m, "@") {
			out = append(out, t.expand(m)...)
			continue
		}
		out = append(out, m)
	}
	return out
}
