package security

import (
	"bufio"
	"bytes"
	"embed"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// data holds the per-version tables; data/README.md says where each file
// comes from and how `go test -run TestTables -update` regenerates it.
//
//go:embed data
var data embed.FS

// Versions are the systemd versions whose tables amilint carries.
var Versions = []int{252, 257}

// CheckSpec is one row of systemd's security_assessor_table: a check, its
// weight and range, and what it assesses.
type CheckSpec struct {
	// Name is systemd's id for the check ("PrivateTmp=",
	// "CapabilityBoundingSet=~CAP_SYS_ADMIN"), the text table's first column.
	Name string `json:"name"`
	// JSONField is systemd's json_field, the key of a security policy and
	// the id in `-o json`.
	JSONField       string `json:"json_field"`
	DescriptionGood string `json:"description_good,omitempty"`
	DescriptionBad  string `json:"description_bad,omitempty"`
	DescriptionNA   string `json:"description_na,omitempty"`
	URL             string `json:"url"`
	Weight          uint64 `json:"weight"`
	Range           uint64 `json:"range"`
	// Assess names the assessment: "bool" (Field), "capability_bounding_set"
	// (Capabilities), "restrict_namespaces" (Namespace),
	// "system_call_filter" (SyscallGroup), or one of its own.
	Assess       string   `json:"assess"`
	Field        string   `json:"field,omitempty"`
	Capabilities []string `json:"capabilities,omitempty"`
	SyscallGroup string   `json:"syscall_group,omitempty"`
	Namespace    string   `json:"namespace,omitempty"`
	// Invert makes a bool check bad when the setting is true (Delegate=).
	Invert bool `json:"invert,omitempty"`
	// DefaultDependenciesOnly checks do not apply to a service with
	// DefaultDependencies=no.
	DefaultDependenciesOnly bool `json:"default_dependencies_only,omitempty"`

	capMask    uint64 // Capabilities as a bit mask
	fieldIndex int    // Field as an index of info.bools
	nsFlag     uint64 // Namespace as a clone flag
}

// syscallInfo is what libseccomp, as the version links it, knows of a name.
type syscallInfo uint8

const (
	syscallUnknown syscallInfo = iota // __NR_SCMP_ERROR: the name is ignored
	syscallKnown                      // known; native or not is never asked (no checked group has it)
	syscallForeign                    // known, but not a system call of x86-64
	syscallNative                     // a system call of x86-64
)

// Tables are one systemd version's data: the checks, the system call
// groups, what libseccomp knows of each system call name, the capability,
// address family and errno names, and the behaviour that differs between
// versions.
type Tables struct {
	// Version is the systemd version the tables are from.
	Version int
	// Checks are the checks in systemd's table order.
	Checks []CheckSpec

	groups   map[string][]string    // "@swap" -> members, "@sub" entries included
	groupSeq []string               // group names in systemd's order
	syscalls map[string]syscallInfo // every name of @known
	caps     map[string]int         // lower-case capability name -> number
	families map[string]int         // upper-case AF_ name -> number
	errnos   map[string]int         // upper-case E name -> number
	archs    map[string]bool        // SystemCallArchitectures= names

	// The system calls libseccomp knows, by index, for syscallSet.
	syscallIndex map[string]int
	syscallNames []string
	// groupMembers are each group's known system calls, subgroups
	// expanded; nativeOrder the x86-64 ones in the order systemd's check
	// walks them (depth first), which names the first offender.
	groupMembers map[string][]int
	nativeOrder  map[string][]int
}

// TablesFor returns the tables of systemd version v: exactly v's when
// amilint carries them, else those of the nearest carried version below
// (or the oldest carried one for older systemd). The returned Version says
// which one.
func TablesFor(v int) (*Tables, error) {
	pick := Versions[0]
	for _, c := range Versions {
		if c <= v {
			pick = c
		}
	}
	return loadTables(pick)
}

var tableCache = map[int]func() (*Tables, error){
	252: sync.OnceValues(func() (*Tables, error) { return parseTables(252) }),
	257: sync.OnceValues(func() (*Tables, error) { return parseTables(257) }),
}

func loadTables(v int) (*Tables, error) {
	f, ok := tableCache[v]
	if !ok {
		return nil, fmt.Errorf("no security tables for systemd %d", v)
	}
	return f()
}

// parseTables reads the embedded files of version v.
func parseTables(v int) (*Tables, error) {
	t := &Tables{Version: v, groups: map[string][]string{}, syscalls: map[string]syscallInfo{},
		caps: map[string]int{}, families: map[string]int{}, errnos: map[string]int{}, archs: map[string]bool{}}
	dir := fmt.Sprintf("data/%d/", v)
	t.Checks = checkTable()
	if err := t.readGroups(dir + "syscall-filter.txt"); err != nil {
		return nil, err
	}
	if err := readPairs(dir+"capability.txt", func(k, v string) error {
		if k == "NAME" {
			return nil // the header
		}
		n, err := strconv.Atoi(v)
		t.caps[strings.ToLower(k)] = n
		return err
	}); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		file string
		m    map[string]int
	}{{"address-families.txt", t.families}, {"errno.txt", t.errnos}} {
		if err := readPairs(dir+f.file, func(k, v string) error {
			n, err := strconv.Atoi(v)
			f.m[strings.ToUpper(k)] = n
			return err
		}); err != nil {
			return nil, err
		}
	}
	archs, err := data.ReadFile(dir + "archs.txt")
	if err != nil {
		return nil, err
	}
	for _, a := range strings.Fields(string(archs)) {
		t.archs[a] = true
	}
	if err := readPairs(dir+"syscalls.txt", func(k, v string) error {
		switch v {
		case "native":
			t.syscalls[k] = syscallNative
		case "foreign":
			t.syscalls[k] = syscallForeign
		case "known":
			t.syscalls[k] = syscallKnown
		case "unknown":
			t.syscalls[k] = syscallUnknown
		default:
			return fmt.Errorf("system call %s: kind %q", k, v)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	t.indexSyscalls()
	for i := range t.Checks {
		c := &t.Checks[i]
		for _, name := range c.Capabilities {
			n, ok := t.caps[strings.ToLower(name)]
			if !ok {
				return nil, fmt.Errorf("check %s: unknown capability %s", c.JSONField, name)
			}
			c.capMask |= 1 << n
		}
		if c.Field != "" {
			f, ok := boolFields[c.Field]
			if !ok && c.Assess == "bool" {
				return nil, fmt.Errorf("check %s: unknown field %s", c.JSONField, c.Field)
			}
			c.fieldIndex = f
		}
		if c.Namespace != "" {
			f, ok := cloneFlags[c.Namespace]
			if !ok {
				return nil, fmt.Errorf("check %s: unknown namespace %s", c.JSONField, c.Namespace)
			}
			c.nsFlag = f
		}
		if c.SyscallGroup != "" {
			if _, ok := t.groups[c.SyscallGroup]; !ok {
				return nil, fmt.Errorf("check %s: unknown system call group %s", c.JSONField, c.SyscallGroup)
			}
		}
	}
	return t, nil
}

// indexSyscalls numbers the known system calls and expands the groups.
func (t *Tables) indexSyscalls() {
	t.syscallIndex = map[string]int{}
	for _, n := range slices.Sorted(maps.Keys(t.syscalls)) {
		if t.syscalls[n] != syscallUnknown {
			t.syscallIndex[n] = len(t.syscallNames)
			t.syscallNames = append(t.syscallNames, n)
		}
	}
	t.groupMembers = map[string][]int{}
	t.nativeOrder = map[string][]int{}
	for _, g := range t.groupSeq {
		for _, m := range t.expand(g) {
			i, ok := t.syscallIndex[m]
			if !ok {
				continue
			}
			t.groupMembers[g] = append(t.groupMembers[g], i)
			if t.syscalls[m] == syscallNative {
				t.nativeOrder[g] = append(t.nativeOrder[g], i)
			}
		}
	}
}

// syscallSet is a set of known system calls by index (Tables.syscallIndex).
type syscallSet []uint64

func newSyscallSet(t *Tables) syscallSet { return make(syscallSet, (len(t.syscallNames)+63)/64) }

func (s syscallSet) has(i int) bool { return s[i/64]&(1<<(i%64)) != 0 }
func (s syscallSet) set(i int)      { s[i/64] |= 1 << (i % 64) }
func (s syscallSet) clear(i int)    { s[i/64] &^= 1 << (i % 64) }

func (s syscallSet) empty() bool {
	for _, w := range s {
		if w != 0 {
			return false
		}
	}
	return true
}

// readGroups parses `systemd-analyze syscall-filter`: "@group" lines, then
// indented members, "#" comments.
func (t *Tables) readGroups(name string) error {
	b, err := data.ReadFile(name)
	if err != nil {
		return err
	}
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := sc.Text()
		s := strings.TrimSpace(l)
		switch {
		case s == "" || strings.HasPrefix(s, "#"):
		case strings.HasPrefix(l, "@"):
			cur = s
			t.groups[cur] = []string{}
			t.groupSeq = append(t.groupSeq, cur)
		case cur == "":
			return fmt.Errorf("%s: member %q before any group", name, s)
		default:
			t.groups[cur] = append(t.groups[cur], s)
		}
	}
	for g, members := range t.groups {
		for _, m := range members {
			if strings.HasPrefix(m, "@") {
				if _, ok := t.groups[m]; !ok {
					return fmt.Errorf("%s: group %s names unknown group %s", name, g, m)
				}
			}
		}
	}
	return sc.Err()
}

// readPairs calls f for the two fields of every line of an embedded file.
func readPairs(name string, f func(k, v string) error) error {
	b, err := data.ReadFile(name)
	if err != nil {
		return err
	}
	for i, l := range strings.Split(string(b), "\n") {
		fields := strings.Fields(l)
		if len(fields) == 0 {
			continue
		}
		if len(fields) != 2 {
			return fmt.Errorf("%s:%d: want two fields, got %q", name, i+1, l)
		}
		if err := f(fields[0], fields[1]); err != nil {
			return fmt.Errorf("%s:%d: %w", name, i+1, err)
		}
	}
	return nil
}

// Clone flags (linux/sched.h).
const (
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000
	cloneNewTime   = 0x00000080

	// namespaceFlagsAll is NAMESPACE_FLAGS_ALL (time is not in it).
	namespaceFlagsAll = cloneNewCgroup | cloneNewIPC | cloneNewNet | cloneNewNS | cloneNewPID | cloneNewUser | cloneNewUTS
	// namespaceFlagsInitial is NAMESPACE_FLAGS_INITIAL (ULONG_MAX).
	namespaceFlagsInitial = ^uint64(0)
)

var cloneFlags = map[string]uint64{
	"CLONE_NEWNS": cloneNewNS, "CLONE_NEWCGROUP": cloneNewCgroup, "CLONE_NEWUTS": cloneNewUTS,
	"CLONE_NEWIPC": cloneNewIPC, "CLONE_NEWUSER": cloneNewUser, "CLONE_NEWPID": cloneNewPID, "CLONE_NEWNET": cloneNewNet,
}

// namespaceNames is namespace_info's proc names, in its order.
var namespaceNames = []struct {
	name string
	flag uint64
}{
	{"cgroup", cloneNewCgroup}, {"ipc", cloneNewIPC}, {"net", cloneNewNet}, {"mnt", cloneNewNS},
	{"pid", cloneNewPID}, {"user", cloneNewUser}, {"uts", cloneNewUTS}, {"time", cloneNewTime},
}

// Group returns the members of a system call group as systemd lists them.
func (t *Tables) Group(name string) []string { return slices.Clone(t.groups[name]) }

// capLimit is the highest capability number a numeric value may name.
func (t *Tables) capLimit() int {
	if t.Version >= 257 {
		return 62 // CAP_LIMIT
	}
	return 63
}

// templateInstance is the instance systemd-analyze gives a template name.
func (t *Tables) templateInstance() string {
	if t.Version >= 257 {
		return "test_instance" // arg_instance
	}
	return "i"
}
