package security

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "regenerate data/ from the systemd-analyze oracles")

// TestTables checks every embedded table against the systemd-analyze of
// its version (with -update, rewrites them): the verbatim output of
// `syscall-filter` and `capability`, and what its parsers accept, probed
// through `security` itself: which system call names libseccomp knows and
// which are x86-64's own, which address family and errno names parse.
func TestTables(t *testing.T) {
	for _, a := range analyzers(t) {
		t.Run(fmt.Sprint(a.Version), func(t *testing.T) {
			dir := filepath.Join("data", fmt.Sprint(a.Version))
			out, _, code := a.run(t, "", nil, "syscall-filter", "--no-pager")
			require.Zero(t, code)
			out = cutKernelTail(out)
			golden(t, filepath.Join(dir, "syscall-filter.txt"), out)
			out, _, code = a.run(t, "", nil, "capability", "--no-pager")
			require.Zero(t, code)
			golden(t, filepath.Join(dir, "capability.txt"), out)
			if *update {
				tablesReload(t, a.Version)
			}
			tb, err := parseTables(a.Version)
			require.NoError(t, err)
			golden(t, filepath.Join(dir, "syscalls.txt"), probeSyscalls(t, a, tb))
			golden(t, filepath.Join(dir, "archs.txt"), probeArchs(t, a))
			probeFamilies(t, a, tb)
			probeErrnos(t, a, tb)
		})
	}
}

// cutKernelTail drops what `syscall-filter` prints after the groups: the
// lists of ungrouped and of the running kernel's unlisted calls.
func cutKernelTail(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if strings.HasPrefix(l, "# Ungrouped") || strings.HasPrefix(l, "# Unlisted") {
			break
		}
		b.WriteString(l)
	}
	return b.String()
}

// golden compares a data file with want, or writes it with -update.
func golden(t *testing.T, path, want string) {
	t.Helper()
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
		return
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, want, string(got), "%s differs from systemd-analyze (go test -run TestTables -update)", path)
}

// tablesReload makes parseTables read the files just written: the embedded
// copy is the one compiled in, so -update needs a second run to verify.
func tablesReload(t *testing.T, v int) {
	t.Logf("systemd %d: data rewritten; run the test again without -update to verify it", v)
}

// probeService is a minimal valid service with extra [Service] lines.
func probeService(lines ...string) string {
	return "[Service]\nExecStart=/bin/true\n" + strings.Join(lines, "\n") + "\n"
}

// probeSyscalls classifies every name of every group (@known does not
// list some group members, such as nfsservctl): "unknown" when
// `SystemCallFilter=~NAME` leaves the filter empty (libseccomp cannot
// resolve it), else "native" or "foreign" for a member of a checked group
// (the group's check fails when NAME alone is taken out of a deny list of
// the group exactly when NAME is a system call of x86-64), else "known".
func probeSyscalls(t *testing.T, a analyzer, tb *Tables) string {
	t.Helper()
	checked := map[string]string{} // name -> a checked group containing it
	for _, c := range tb.Checks {
		if c.SyscallGroup == "" {
			continue
		}
		for _, n := range tb.expand(c.SyscallGroup) {
			if _, ok := checked[n]; !ok {
				checked[n] = c.SyscallGroup
			}
		}
	}
	var names []string
	for _, g := range tb.groupSeq {
		names = append(names, tb.expand(g)...)
	}
	sort.Strings(names)
	names = slices.Compact(names)
	files := map[string]string{}
	var units []string
	for i, n := range names {
		u := fmt.Sprintf("k%04d.service", i)
		files["etc/systemd/system/"+u] = probeService("SystemCallFilter=~" + n)
		units = append(units, u)
		if g, ok := checked[n]; ok {
			u := fmt.Sprintf("n%04d.service", i)
			files["etc/systemd/system/"+u] = probeService("SystemCallFilter=~"+g, "SystemCallFilter="+n)
			units = append(units, u)
		}
	}
	got, _ := a.security(t, writeTree(t, files), "", units)
	require.Len(t, got, len(units))
	var b strings.Builder
	for i, n := range names {
		known := got[fmt.Sprintf("k%04d.service", i)]
		desc := known.Checks["SystemCallFilter_swap"].Description
		require.NotNil(t, desc)
		kind := "known"
		switch {
		case *desc == "Service does not filter system calls":
			kind = "unknown"
		case checked[n] != "":
			c := got[fmt.Sprintf("n%04d.service", i)].Checks["SystemCallFilter_"+strings.ReplaceAll(strings.TrimPrefix(checked[n], "@"), "-", "_")]
			kind = "foreign"
			if c.Badness.String() != "0" {
				kind = "native"
			}
		}
		fmt.Fprintf(&b, "%s %s\n", n, kind)
	}
	return b.String()
}

// archCandidates are every name seccomp_arch_from_string knows in any
// version; which a version accepts depends on its libseccomp.
var archCandidates = []string{"native", "x86", "x86-64", "x32", "arm", "arm64", "loongarch64", "mips", "mips64",
	"mips64-n32", "mips-le", "mips64-le", "mips64-le-n32", "parisc", "parisc64", "ppc", "ppc64", "ppc64-le",
	"riscv64", "s390", "s390x", "x86_64", "Native", "amd64", "i386"}

// probeArchs lists the SystemCallArchitectures= names the version
// accepts: an accepted name makes the check 0 (native alone) or 8, an
// ignored one leaves it at 10.
func probeArchs(t *testing.T, a analyzer) string {
	t.Helper()
	files := map[string]string{}
	var units []string
	for i, n := range archCandidates {
		u := fmt.Sprintf("a%04d.service", i)
		files["etc/systemd/system/"+u] = probeService("SystemCallArchitectures=" + n)
		units = append(units, u)
	}
	got, _ := a.security(t, writeTree(t, files), "", units)
	var b strings.Builder
	for i, n := range archCandidates {
		c := got[fmt.Sprintf("a%04d.service", i)].Checks["SystemCallArchitectures"]
		if c.Badness.String() != "10" {
			fmt.Fprintln(&b, n)
		}
	}
	return b.String()
}

// probeFamilies checks that exactly the address family names of the table
// parse, each as its class (the check whose family it allows).
func probeFamilies(t *testing.T, a analyzer, tb *Tables) {
	t.Helper()
	names := []string{"AF_UNSPEC", "AF_MAX", "AF_NOSUCH", "af_inet", "Af_Netlink", "inet", "2"}
	for n := range tb.families {
		names = append(names, n)
	}
	sort.Strings(names)
	files := map[string]string{}
	var units []string
	for i, n := range names {
		u := fmt.Sprintf("f%04d.service", i)
		files["etc/systemd/system/"+u] = probeService("RestrictAddressFamilies=" + n)
		units = append(units, u)
	}
	got, _ := a.security(t, writeTree(t, files), "", units)
	for i, n := range names {
		allowed := []string{}
		for _, f := range []string{"AF_INET_INET6", "AF_UNIX", "AF_NETLINK", "AF_PACKET", "OTHER"} {
			c := got[fmt.Sprintf("f%04d.service", i)].Checks["RestrictAddressFamilies_"+f]
			if c.Set != nil && !*c.Set {
				allowed = append(allowed, f)
			}
		}
		want := []string{}
		if num, ok := tb.family(n); ok {
			want = []string{familyClass(num)}
		}
		assert.Equal(t, want, allowed, "systemd %d: RestrictAddressFamilies=%s", a.Version, n)
	}
}

// probeErrnos checks that exactly the errno names and numbers of the
// table parse in SystemCallFilter=~NAME:ERRNO.
func probeErrnos(t *testing.T, a analyzer, tb *Tables) {
	t.Helper()
	names := []string{"0", "1", "4095", "4096", "-1", "ENOSUCH", "eperm", "kill", "KILL", "0x1", "010", "0o7", "0b11", "+5"}
	for n := range tb.errnos {
		names = append(names, n)
	}
	sort.Strings(names)
	files := map[string]string{}
	var units []string
	for i, n := range names {
		u := fmt.Sprintf("e%04d.service", i)
		files["etc/systemd/system/"+u] = probeService("SystemCallFilter=~swapon:" + n)
		units = append(units, u)
	}
	got, _ := a.security(t, writeTree(t, files), "", units)
	for i, n := range names {
		d := got[fmt.Sprintf("e%04d.service", i)].Checks["SystemCallFilter_swap"].Description
		require.NotNil(t, d)
		_, err := tb.parseErrnoOrAction(n)
		assert.Equal(t, err == nil, *d != "Service does not filter system calls", "systemd %d: SystemCallFilter=~swapon:%s: %s", a.Version, n, *d)
	}
}

// TestChecksTable keeps checks_table.go, the compiled form of
// data/checks.json (decoding the JSON at every start costs more than
// scoring a dozen services), in step with it; -update rewrites it.
func TestChecksTable(t *testing.T) {
	raw, err := data.ReadFile("data/checks.json")
	require.NoError(t, err)
	var want []CheckSpec
	require.NoError(t, json.Unmarshal(raw, &want))
	src := checksSource(want)
	if *update {
		require.NoError(t, os.WriteFile("checks_table.go", []byte(src), 0o644))
		return
	}
	got, err := os.ReadFile("checks_table.go")
	require.NoError(t, err)
	assert.Equal(t, src, string(got), "checks_table.go is stale: go test ./internal/systemd/security -run TestChecksTable -args -update")
	assert.Equal(t, want, checkTable())
}

// checksSource renders the checks as the Go source of checkTable.
func checksSource(cs []CheckSpec) string {
	var b strings.Builder
	b.WriteString("// Code generated from data/checks.json by TestChecksTable; DO NOT EDIT.\n\npackage security\n\n")
	b.WriteString("// checkTable returns systemd's security_assessor_table (data/checks.json).\n")
	b.WriteString("func checkTable() []CheckSpec {\n\treturn []CheckSpec{\n")
	for _, c := range cs {
		fmt.Fprintf(&b, "\t\t{Name: %q, JSONField: %q, DescriptionGood: %q, DescriptionBad: %q, DescriptionNA: %q, URL: %q,\n", c.Name, c.JSONField, c.DescriptionGood, c.DescriptionBad, c.DescriptionNA, c.URL)
		fmt.Fprintf(&b, "\t\t\tWeight: %d, Range: %d, Assess: %q, Field: %q, Capabilities: %#v, SyscallGroup: %q, Namespace: %q, Invert: %v, DefaultDependenciesOnly: %v},\n",
			c.Weight, c.Range, c.Assess, c.Field, c.Capabilities, c.SyscallGroup, c.Namespace, c.Invert, c.DefaultDependenciesOnly)
	}
	b.WriteString("\t}\n}\n")
	return b.String()
}

// familyClass names which RestrictAddressFamilies check a family falls under.
func familyClass(af int) string {
	switch af {
	case 2, 10:
		return "AF_INET_INET6"
	case 1:
		return "AF_UNIX"
	case 16:
		return "AF_NETLINK"
	case 17:
		return "AF_PACKET"
	}
	return "OTHER"
}
