package security

import (
	"encoding/base64"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// settings is what systemd loads of a service that the assessment reads:
// the parts of Unit, Service, ExecContext and CGroupContext that
// get_security_info copies, with systemd's defaults.
type settings struct {
	t  *Tables
	id string // the unit id specifiers expand with

	defaultDeps  bool
	notifyAccess string

	user, group        *string
	supplementary      []string
	dynamicUser        bool
	ambient, bounding  uint64
	keyringMode        string
	protectProc        string
	procSubset         string
	lockPersonality    bool
	memoryDenyWX       bool
	noNewPrivileges    bool
	protectHostname    bool
	privateDevices     bool
	privateNetwork     bool
	privateTmp         string // "no", "connected", "disconnected" (252: "no" or "connected")
	privateUsers       string // "no", "self", "identity"
	privateMounts      int    // -1 unset (257), 0, 1
	protectCgroups     string // "no", "yes", "private", "strict"
	protectKernelMods  bool
	protectKernelTun   bool
	protectKernelLogs  bool
	protectClock       bool
	protectHome        string
	protectSystem      string
	removeIPC          bool
	afAllowList        bool
	afSet              map[int]bool // nil: no set (systemd's NULL)
	restrictNamespaces uint64
	restrictRealtime   bool
	restrictSUIDSGID   bool
	rootDirectory      *string
	rootImage          *string
	umask              uint32
	archs              map[string]bool
	syscallAllowList   bool
	// syscallFilter holds the filter's system calls (nil: no filter,
	// systemd's NULL hashmap); syscallErrno those with an errno or action
	// (which an allow list does not allow).
	syscallFilter, syscallErrno syscallSet
	mountImages                 bool
	loadCreds, setCreds         map[string]bool // credential id -> encrypted

	delegate     bool
	devicePolicy string
	deviceAllow  []deviceAllow // newest first, as LIST_PREPEND keeps them
	ipDeny       map[netip.Prefix]bool
	ipAllow      map[netip.Prefix]bool
	ipIngress    []string
	ipEgress     []string

	// fatal is the first assignment that makes systemd refuse the unit
	// (bad-setting).
	fatal error
	// notes say which assignments systemd ignores, and which values
	// amilint could only approximate.
	notes []string
}

// deviceAllow is one DeviceAllow= entry.
type deviceAllow struct {
	path    string
	r, w, m bool
}

func newSettings(t *Tables, id string) *settings {
	return &settings{
		t: t, id: id,
		defaultDeps:        true,
		bounding:           ^uint64(0), // CAP_ALL (252), CAP_MASK_UNSET (257)
		keyringMode:        "private",  // service_init for the system manager
		protectProc:        "default",
		procSubset:         "all",
		privateTmp:         "no",
		privateUsers:       "no",
		privateMounts:      map[bool]int{true: -1, false: 0}[t.Version >= 257],
		protectCgroups:     "no",
		protectHome:        "no",
		protectSystem:      "no",
		restrictNamespaces: namespaceFlagsInitial,
		umask:              0o022,
		devicePolicy:       "auto",
	}
}

func (s *settings) note(src string, o *unit.Option, why string, args ...any) {
	s.notes = append(s.notes, fmt.Sprintf("%s: %s=%s: %s", src, o.Name, o.Value, fmt.Sprintf(why, args...)))
}

func (s *settings) fail(src string, o *unit.Option, why string, args ...any) {
	if s.fatal == nil {
		s.fatal = fmt.Errorf("%s: %s=%s: %s", src, o.Name, o.Value, fmt.Sprintf(why, args...))
	}
}

// printf expands specifiers up to max bytes (unit.FullPrintfMax,
// unit.PathPrintfMax or credNameMax, by the printf function the
// setting's parser calls), noting machine-dependent ones.
func (s *settings) printf(src string, o *unit.Option, v string, max int) (string, error) {
	machine := false
	r, err := unit.Expand(s.t.Version, s.id, v, max, func(c byte) string {
		machine = true
		return unit.MachineStandIn(c)
	})
	if machine {
		s.note(src, o, "expands a specifier that depends on the machine systemd-analyze runs on; amilint uses a fixed stand-in")
	}
	return r, err
}

// apply applies one assignment of src (a unit file or drop-in), as the
// version's config parser for that setting does.
func (s *settings) apply(src string, o *unit.Option) {
	v := o.Value
	switch o.Section {
	case "Unit":
		if o.Name == "DefaultDependencies" {
			s.setBool(src, o, &s.defaultDeps)
		}
		return
	case "Service":
	default:
		return
	}
	switch o.Name {
	case "NotifyAccess":
		s.setEnum(src, o, &s.notifyAccess, "none", "main", "exec", "all")
	case "User", "Group":
		dst := &s.user
		if o.Name == "Group" {
			dst = &s.group
		}
		if v == "" {
			*dst = nil
			return
		}
		k, err := s.printf(src, o, v, unit.FullPrintfMax)
		if err != nil {
			s.fail(src, o, "failed to resolve unit specifiers: %v", err)
			return
		}
		if !unit.ValidUserGroupName(k, true, true) {
			s.fail(src, o, "invalid user/group name or numeric ID")
			return
		}
		*dst = &k
	case "SupplementaryGroups":
		if v == "" {
			s.supplementary = nil
			return
		}
		ws, err := words(v, 0)
		for _, w := range ws {
			k, err := s.printf(src, o, w, unit.FullPrintfMax)
			if err != nil {
				s.fail(src, o, "failed to resolve unit specifiers in %s: %v", w, err)
				return
			}
			if !unit.ValidUserGroupName(k, true, true) {
				s.fail(src, o, "invalid user/group name or numeric ID: %s", k)
				return
			}
			s.supplementary = append(s.supplementary, k)
		}
		if err != nil {
			s.fail(src, o, "invalid syntax")
		}
	case "UMask":
		m, ok := parseMode(v)
		if !ok {
			s.note(src, o, "not a file mode, ignored")
			return
		}
		s.umask = m
	case "DynamicUser":
		b, ok := unit.ParseBoolean(v)
		if !ok {
			s.fail(src, o, "not a boolean")
			return
		}
		s.dynamicUser = b
	case "RemoveIPC":
		s.setBool(src, o, &s.removeIPC)
	case "CapabilityBoundingSet":
		s.capabilities(src, o, &s.bounding, true)
	case "AmbientCapabilities":
		s.capabilities(src, o, &s.ambient, false)
	case "NoNewPrivileges":
		s.setBool(src, o, &s.noNewPrivileges)
	case "KeyringMode":
		s.setEnum(src, o, &s.keyringMode, "inherit", "private", "shared")
	case "ProtectProc":
		s.setEnum(src, o, &s.protectProc, "default", "noaccess", "invisible", "ptraceable")
	case "ProcSubset":
		s.setEnum(src, o, &s.procSubset, "all", "pid")
	case "SystemCallFilter":
		s.syscallFilterAssign(src, o)
	case "SystemCallArchitectures":
		s.syscallArchs(src, o)
	case "MemoryDenyWriteExecute":
		s.setBool(src, o, &s.memoryDenyWX)
	case "RestrictNamespaces":
		s.namespaces(src, o)
	case "RestrictRealtime":
		s.setBool(src, o, &s.restrictRealtime)
	case "RestrictSUIDSGID":
		s.setBool(src, o, &s.restrictSUIDSGID)
	case "RestrictAddressFamilies":
		s.addressFamilies(src, o)
	case "LockPersonality":
		s.setBool(src, o, &s.lockPersonality)
	case "PrivateTmp":
		if s.t.Version >= 257 {
			s.setEnumBool(src, o, &s.privateTmp, "connected", "no", "connected", "disconnected")
		} else {
			s.setBoolString(src, o, &s.privateTmp, "connected")
		}
	case "PrivateDevices":
		s.setBool(src, o, &s.privateDevices)
	case "ProtectKernelTunables":
		s.setBool(src, o, &s.protectKernelTun)
	case "ProtectKernelModules":
		s.setBool(src, o, &s.protectKernelMods)
	case "ProtectKernelLogs":
		s.setBool(src, o, &s.protectKernelLogs)
	case "ProtectClock":
		s.setBool(src, o, &s.protectClock)
	case "ProtectControlGroups":
		if s.t.Version >= 257 {
			s.setEnumBool(src, o, &s.protectCgroups, "yes", "no", "yes", "private", "strict")
		} else {
			s.setBoolString(src, o, &s.protectCgroups, "yes")
		}
	case "PrivateNetwork":
		s.setBool(src, o, &s.privateNetwork)
	case "PrivateUsers":
		if s.t.Version >= 257 {
			s.setEnumBool(src, o, &s.privateUsers, "self", "no", "self", "identity")
		} else {
			s.setBoolString(src, o, &s.privateUsers, "self")
		}
	case "PrivateMounts":
		if s.t.Version >= 257 {
			if v == "" {
				s.privateMounts = -1
				return
			}
			b, ok := unit.ParseBoolean(v)
			if !ok {
				s.note(src, o, "not a boolean, ignored")
				return
			}
			s.privateMounts = map[bool]int{true: 1, false: 0}[b]
			return
		}
		var b bool
		if s.setBool(src, o, &b) {
			s.privateMounts = map[bool]int{true: 1, false: 0}[b]
		}
	case "ProtectSystem":
		s.setEnumBool(src, o, &s.protectSystem, "yes", "no", "yes", "full", "strict")
	case "ProtectHome":
		s.setEnumBool(src, o, &s.protectHome, "yes", "no", "yes", "read-only", "tmpfs")
	case "ProtectHostname":
		s.setBool(src, o, &s.protectHostname)
	case "RootDirectory", "RootImage":
		dst := &s.rootDirectory
		if o.Name == "RootImage" {
			dst = &s.rootImage
		}
		k, err := s.printf(src, o, v, unit.PathPrintfMax)
		if err != nil {
			s.fail(src, o, "failed to resolve unit specifiers: %v", err)
			return
		}
		if k == "" {
			*dst = nil
			return
		}
		p, why := unit.SimplifyPath(s.t.Version, k, true)
		if why != "" {
			s.fail(src, o, "%s", why)
			return
		}
		*dst = &p
	case "MountImages":
		s.mountImagesAssign(src, o)
	case "LoadCredential", "LoadCredentialEncrypted":
		s.credential(src, o, &s.loadCreds, true, o.Name == "LoadCredentialEncrypted")
	case "SetCredential", "SetCredentialEncrypted":
		s.credential(src, o, &s.setCreds, false, o.Name == "SetCredentialEncrypted")
	case "DevicePolicy":
		s.setEnum(src, o, &s.devicePolicy, "auto", "closed", "strict")
	case "DeviceAllow":
		s.deviceAllowAssign(src, o)
	case "Delegate":
		s.delegateAssign(src, o)
	case "IPAddressAllow":
		s.prefixes(src, o, &s.ipAllow)
	case "IPAddressDeny":
		s.prefixes(src, o, &s.ipDeny)
	case "IPIngressFilterPath":
		s.bpfPath(src, o, &s.ipIngress)
	case "IPEgressFilterPath":
		s.bpfPath(src, o, &s.ipEgress)
	}
}

// setBool is config_parse_bool (non-fatal): a value that is not a boolean
// is ignored. It reports whether the value was taken.
func (s *settings) setBool(src string, o *unit.Option, dst *bool) bool {
	b, ok := unit.ParseBoolean(o.Value)
	if !ok {
		s.note(src, o, "not a boolean, ignored")
		return false
	}
	*dst = b
	return true
}

// setBoolString is a boolean stored as "no" or yes.
func (s *settings) setBoolString(src string, o *unit.Option, dst *string, yes string) {
	var b bool
	if s.setBool(src, o, &b) {
		*dst = map[bool]string{true: yes, false: "no"}[b]
	}
}

// setEnum is DEFINE_CONFIG_PARSE_ENUM: one of values exactly, else ignored.
func (s *settings) setEnum(src string, o *unit.Option, dst *string, values ...string) {
	if !slices.Contains(values, o.Value) {
		s.note(src, o, "not one of %s, ignored", strings.Join(values, ", "))
		return
	}
	*dst = o.Value
}

// setEnumBool is an enum whose lookup takes booleans first
// (DEFINE_STRING_TABLE_LOOKUP_WITH_BOOLEAN): true is yes, false the first
// value, else one of values exactly.
func (s *settings) setEnumBool(src string, o *unit.Option, dst *string, yes string, values ...string) {
	if b, ok := unit.ParseBoolean(o.Value); ok {
		*dst = map[bool]string{true: yes, false: values[0]}[b]
		return
	}
	s.setEnum(src, o, dst, values...)
}

// capabilities is config_parse_capability_set.
func (s *settings) capabilities(src string, o *unit.Option, dst *uint64, bounding bool) {
	v := o.Value
	invert := false
	if strings.HasPrefix(v, "~") {
		invert, v = true, v[1:]
	}
	// 252 replaces when the set still holds its initial value (all bits
	// for the bounding set); 257 when it holds its "unset" value.
	def := uint64(0)
	if bounding {
		def = ^uint64(0)
	}
	var sum uint64
	if s.t.Version >= 257 {
		ws, err := words(v, wordUnquote|wordRelax)
		if err != nil {
			s.note(src, o, "invalid syntax, ignored")
			return
		}
		for _, w := range ws {
			n, ok := s.capabilityFromName(w)
			if !ok {
				s.note(src, o, "unknown capability %s, ignored", w)
				continue
			}
			sum |= 1 << n
		}
	} else {
		ws, err := words(v, wordUnquote)
		if err != nil {
			s.note(src, o, "invalid syntax, the rest ignored")
		}
		for _, w := range ws {
			n, ok := s.capabilityFromName(w)
			if !ok {
				s.note(src, o, "unknown capability %s, ignored", w)
				continue
			}
			sum |= 1 << n
		}
	}
	if sum == 0 || *dst == def {
		if invert {
			*dst = ^sum
		} else {
			*dst = sum
		}
		return
	}
	if invert {
		*dst &^= sum
	} else {
		*dst |= sum
	}
}

// capabilityFromName is capability_from_name: a number up to the
// version's limit, or a name in any case.
func (s *settings) capabilityFromName(w string) (int, bool) {
	if n, ok := safeAtoi(s.t.Version, w); ok {
		if n < 0 || n > s.t.capLimit() {
			return 0, false
		}
		return n, true
	}
	n, ok := s.t.caps[unit.ASCIILower(w)]
	return n, ok
}

// syscallFilterAssign is config_parse_syscall_filter.
func (s *settings) syscallFilterAssign(src string, o *unit.Option) {
	v := o.Value
	if v == "" {
		s.syscallFilter, s.syscallErrno, s.syscallAllowList = nil, nil, false
		return
	}
	invert := false
	if strings.HasPrefix(v, "~") {
		invert, v = true, v[1:]
	}
	if s.syscallFilter == nil {
		s.syscallFilter, s.syscallErrno = newSyscallSet(s.t), newSyscallSet(s.t)
		if invert {
			s.syscallAllowList = false
		} else {
			s.syscallAllowList = true
			s.parseSyscall("@default", -1, false, true)
		}
	}
	ws, err := words(v, 0)
	if err != nil {
		s.note(src, o, "invalid syntax, the rest ignored")
	}
	for _, w := range ws {
		name, num, ok := s.t.syscallAndErrno(w)
		if !ok {
			s.note(src, o, "cannot parse %s as syscall[:errno], ignored", w)
			continue
		}
		if !invert && num >= 0 {
			s.note(src, o, "allow-listed system calls cannot take an error number, %s ignored", w)
			continue
		}
		if name[0] != '@' {
			if info, known := s.t.syscalls[name]; !known || info == syscallUnknown {
				s.note(src, o, "unknown system call %s, ignored", name)
				continue
			}
		} else if _, ok := s.t.groups[name]; !ok {
			s.note(src, o, "unknown system call group %s, ignored", name)
			continue
		}
		s.parseSyscall(name, num, invert, s.syscallAllowList)
	}
}

// parseSyscall is seccomp_parse_syscall_filter, permissive: a group adds
// or removes each of its known system calls, a name itself.
func (s *settings) parseSyscall(name string, errno int, invert, allowList bool) {
	if !invert && errno >= 0 {
		return
	}
	put := !invert == allowList || (invert && allowList && errno >= 0)
	apply := func(i int) {
		switch {
		case !put:
			s.syscallFilter.clear(i)
			s.syscallErrno.clear(i)
		case errno >= 0:
			s.syscallFilter.set(i)
			s.syscallErrno.set(i)
		default:
			s.syscallFilter.set(i)
			s.syscallErrno.clear(i)
		}
	}
	if strings.HasPrefix(name, "@") {
		for _, i := range s.t.groupMembers[name] {
			apply(i)
		}
		return
	}
	if i, ok := s.t.syscallIndex[name]; ok {
		apply(i)
	}
}

// syscallAndErrno is parse_syscall_and_errno: "name" or "name:errno".
func (t *Tables) syscallAndErrno(w string) (string, int, bool) {
	name, e, hasErrno := strings.Cut(w, ":")
	num := -1
	if hasErrno {
		n, err := t.parseErrnoOrAction(e)
		if err != nil {
			return "", 0, false
		}
		num = n
	}
	if name == "" {
		return "", 0, false
	}
	return name, num, true
}

// errnoKill is SECCOMP_ERROR_NUMBER_KILL.
const errnoKill = 1<<31 - 2

// parseErrnoOrAction is seccomp_parse_errno_or_action: "kill", an errno
// name (any case), or a number 0..4095.
func (t *Tables) parseErrnoOrAction(e string) (int, error) {
	if e == "kill" {
		return errnoKill, nil
	}
	if n, ok := t.errnos[asciiUpper(e)]; ok && n > 0 {
		return n, nil
	}
	n, ok := safeAtoi(t.Version, e)
	if !ok {
		return 0, fmt.Errorf("invalid errno %q", e)
	}
	if n < 0 || n > 4095 {
		return 0, fmt.Errorf("errno %d out of range", n)
	}
	return n, nil
}

// archNames are seccomp_arch_from_string's names; which exist depends on
// the libseccomp a version was built with (data/VERSION/archs.txt).
func (s *settings) syscallArchs(src string, o *unit.Option) {
	if o.Value == "" {
		s.archs = nil
		return
	}
	ws, err := words(o.Value, wordUnquote)
	if err != nil {
		s.note(src, o, "invalid syntax, the rest ignored")
	}
	for _, w := range ws {
		if !s.t.archs[w] {
			s.note(src, o, "unknown system call architecture %s, ignored", w)
			continue
		}
		if s.archs == nil {
			s.archs = map[string]bool{}
		}
		s.archs[w] = true
	}
}

// namespaces is config_parse_restrict_namespaces.
func (s *settings) namespaces(src string, o *unit.Option) {
	v := o.Value
	if v == "" {
		s.restrictNamespaces = namespaceFlagsInitial
		return
	}
	if b, ok := unit.ParseBoolean(v); ok {
		if b {
			s.restrictNamespaces = 0
		} else {
			s.restrictNamespaces = namespaceFlagsAll
		}
		return
	}
	invert := false
	if strings.HasPrefix(v, "~") {
		invert, v = true, v[1:]
	}
	ws, err := words(v, 0)
	if err != nil {
		s.note(src, o, "invalid syntax, ignored")
		return
	}
	var flags uint64
	for _, w := range ws {
		i := slices.IndexFunc(namespaceNames, func(n struct {
			name string
			flag uint64
		}) bool {
			return n.name == w
		})
		if i < 0 {
			s.note(src, o, "unknown namespace type %s, ignored", w)
			return
		}
		flags |= namespaceNames[i].flag
	}
	if s.restrictNamespaces == namespaceFlagsInitial {
		if invert {
			s.restrictNamespaces = ^flags & namespaceFlagsAll
		} else {
			s.restrictNamespaces = flags
		}
		return
	}
	if invert {
		s.restrictNamespaces &^= flags
	} else {
		s.restrictNamespaces |= flags
	}
}

// addressFamilies is config_parse_address_families.
func (s *settings) addressFamilies(src string, o *unit.Option) {
	v := o.Value
	switch v {
	case "":
		s.afSet, s.afAllowList = nil, false
		return
	case "none":
		s.afSet, s.afAllowList = nil, true
		return
	}
	invert := false
	if strings.HasPrefix(v, "~") {
		invert, v = true, v[1:]
	}
	if s.afSet == nil {
		s.afSet = map[int]bool{}
		s.afAllowList = !invert
	}
	ws, err := words(v, wordUnquote)
	if err != nil {
		s.note(src, o, "invalid syntax, the rest ignored")
	}
	for _, w := range ws {
		af, ok := s.t.family(w)
		if !ok {
			s.note(src, o, "unknown address family %s, ignored", w)
			continue
		}
		if !invert == s.afAllowList {
			s.afSet[af] = true
		} else {
			delete(s.afSet, af)
		}
	}
}

// family is af_from_name: an AF_ name of the table, in any case.
func (t *Tables) family(name string) (int, bool) {
	n, ok := t.families[asciiUpper(name)]
	return n, ok
}

// mountImagesAssign is config_parse_mount_images, as far as whether any
// image is configured: "SOURCE:DEST[:OPTIONS]" entries, "-" before an
// optional source.
func (s *settings) mountImagesAssign(src string, o *unit.Option) {
	if o.Value == "" {
		s.mountImages = false
		return
	}
	ws, err := words(o.Value, wordUnquote)
	if err != nil {
		s.note(src, o, "invalid syntax, ignored")
		return
	}
	for _, w := range ws {
		first, second, ok := strings.Cut(w, ":")
		first = strings.TrimPrefix(first, "-")
		second, _, _ = strings.Cut(second, ":")
		if !ok || !strings.HasPrefix(first, "/") || !strings.HasPrefix(second, "/") {
			s.note(src, o, "%s: want SOURCE:DESTINATION with absolute paths, ignored", w)
			continue
		}
		s.mountImages = true
	}
	s.note(src, o, "MountImages= is modelled only as configured or not")
}

// credential is config_parse_load_credential / config_parse_set_credential
// as far as the assessment needs: which credential ids are encrypted
// (an encrypted one lets a closed device policy reach the TPM).
func (s *settings) credential(src string, o *unit.Option, dst *map[string]bool, load, encrypted bool) {
	if o.Value == "" {
		*dst = nil
		return
	}
	word, rest, ok, err := nextWord(o.Value, wordUnquote)
	if err != nil || !ok {
		s.note(src, o, "invalid syntax, ignored")
		return
	}
	id, value, hasValue := strings.Cut(word, ":")
	_ = rest
	k, err := s.printf(src, o, id, credNameMax)
	if err != nil || !credentialNameValid(k) {
		s.note(src, o, "invalid credential name, ignored")
		return
	}
	if !load {
		if !hasValue {
			s.note(src, o, "no value, ignored")
			return
		}
		if encrypted {
			if _, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(value), "")); err != nil {
				s.note(src, o, "value is not base64, ignored")
				return
			}
		}
	}
	if *dst == nil {
		*dst = map[string]bool{}
	}
	(*dst)[k] = encrypted
}

// credNameMax bounds unit_cred_printf (CREDENTIAL_NAME_MAX, FDNAME_MAX).
const credNameMax = 255

// credentialNameValid is credential_name_valid: a valid file name.
func credentialNameValid(n string) bool {
	return n != "" && n != "." && n != ".." && !strings.Contains(n, "/") && len(n) <= 255 && utf8.ValidString(n)
}

// deviceAllowAssign is config_parse_device_allow.
func (s *settings) deviceAllowAssign(src string, o *unit.Option) {
	if o.Value == "" {
		s.deviceAllow = nil
		return
	}
	p, rest, ok, err := nextWord(o.Value, wordUnquote)
	if err != nil || !ok {
		s.note(src, o, "cannot extract device path and rights, ignored")
		return
	}
	resolved, err := s.printf(src, o, p, unit.PathPrintfMax)
	if err != nil {
		s.note(src, o, "failed to resolve unit specifiers, ignored")
		return
	}
	if !strings.HasPrefix(resolved, "block-") && !strings.HasPrefix(resolved, "char-") {
		simplified, why := unit.SimplifyPath(s.t.Version, resolved, false)
		if why != "" {
			s.note(src, o, "%s, ignored", why)
			return
		}
		if !unit.ValidDeviceNodePath(simplified) {
			s.note(src, o, "invalid device node path, ignored")
			return
		}
		resolved = simplified
	}
	var a deviceAllow
	a.path = resolved
	if rest == "" {
		a.r, a.w, a.m = true, true, true
	} else {
		for i := 0; i < len(rest); i++ {
			switch rest[i] {
			case 'r':
				a.r = true
			case 'w':
				a.w = true
			case 'm':
				a.m = true
			default:
				s.note(src, o, "invalid device rights %q, ignored", rest)
				return
			}
		}
	}
	s.deviceAllow = append([]deviceAllow{a}, s.deviceAllow...)
}

// delegateAssign is config_parse_delegate as far as Delegate= on or off.
func (s *settings) delegateAssign(src string, o *unit.Option) {
	if o.Value == "" {
		s.delegate = true
		return
	}
	if b, ok := unit.ParseBoolean(o.Value); ok {
		s.delegate = b
		return
	}
	if _, err := words(o.Value, wordUnquote); err != nil {
		s.note(src, o, "invalid syntax, ignored")
		return
	}
	s.delegate = true
}

// prefixes is config_parse_in_addr_prefixes.
func (s *settings) prefixes(src string, o *unit.Option, dst *map[netip.Prefix]bool) {
	if o.Value == "" {
		*dst = nil
		return
	}
	ws, err := words(o.Value, 0)
	if err != nil {
		s.note(src, o, "invalid syntax, the rest ignored")
	}
	add := func(p netip.Prefix) {
		if *dst == nil {
			*dst = map[netip.Prefix]bool{}
		}
		(*dst)[p.Masked()] = true
	}
	for _, w := range ws {
		switch {
		case w == "any":
			add(netip.MustParsePrefix("0.0.0.0/0"))
			add(netip.MustParsePrefix("::/0"))
		case isLocalhost(w):
			add(netip.MustParsePrefix("127.0.0.0/8"))
			add(netip.MustParsePrefix("::1/128"))
		case w == "link-local":
			add(netip.MustParsePrefix("169.254.0.0/16"))
			add(netip.MustParsePrefix("fe80::/64"))
		case w == "multicast":
			add(netip.MustParsePrefix("224.0.0.0/4"))
			add(netip.MustParsePrefix("ff00::/8"))
		default:
			p, ok := parsePrefix(w)
			if !ok {
				s.note(src, o, "invalid address prefix %s, ignored", w)
				continue
			}
			add(p)
		}
	}
}

// parsePrefix is in_addr_prefix_from_string_auto: an IPv4 or IPv6 address
// as inet_pton reads it, optionally "/LEN" (the full length without).
func parsePrefix(w string) (netip.Prefix, bool) {
	a, l, hasLen := strings.Cut(w, "/")
	if strings.ContainsAny(a, "%") {
		return netip.Prefix{}, false // inet_pton knows no zones
	}
	addr, err := netip.ParseAddr(a)
	if err != nil {
		return netip.Prefix{}, false
	}
	bits := addr.BitLen()
	if hasLen {
		n, ok := safeAtou8(l)
		if !ok || n > bits {
			return netip.Prefix{}, false
		}
		bits = n
	}
	return netip.PrefixFrom(addr, bits), true
}

// safeAtou8 is safe_atou8: decimal (C's strtoul base 10 after skipping
// whitespace, no sign), at most 255.
func safeAtou8(s string) (int, bool) {
	s = strings.TrimLeft(s, whitespace)
	if s != "" && (s[0] == '-' || s[0] == '+') {
		return 0, false
	}
	v, _, ok := strtol(s, 10)
	if !ok || v > 255 {
		return 0, false
	}
	return int(v), true
}

// isLocalhost is is_localhost.
func isLocalhost(h string) bool {
	l := strings.ToLower(h)
	switch l {
	case "localhost", "localhost.", "localhost.localdomain", "localhost.localdomain.":
		return true
	}
	for _, suffix := range []string{".localhost", ".localhost.", ".localhost.localdomain", ".localhost.localdomain."} {
		if strings.HasSuffix(l, suffix) {
			return true
		}
	}
	return false
}

// bpfPath is config_parse_ip_filter_bpf_progs.
func (s *settings) bpfPath(src string, o *unit.Option, dst *[]string) {
	if o.Value == "" {
		*dst = nil
		return
	}
	k, err := s.printf(src, o, o.Value, unit.PathPrintfMax)
	if err != nil {
		s.note(src, o, "failed to resolve unit specifiers, ignored")
		return
	}
	p, why := unit.SimplifyPath(s.t.Version, k, true)
	if why != "" {
		s.note(src, o, "%s, ignored", why)
		return
	}
	if !slices.Contains(*dst, p) {
		*dst = append(*dst, p)
	}
}

// emptyOrRoot is empty_or_root.
func emptyOrRoot(p *string) bool {
	return p == nil || path.Clean("/"+*p) == "/" && strings.Trim(*p, "/") == ""
}

func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
