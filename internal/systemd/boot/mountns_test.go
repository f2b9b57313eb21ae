package boot

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// mountNSSettings are, for each setting that gives a unit a mount
// namespace of its own (exec_needs_mount_namespace), an assignment its
// parser keeps, then assignments it ignores or that leave the namespace
// off.
var mountNSSettings = []struct {
	name         string
	kept, ignore string
}{
	{"rootimage", "RootImage=/srv/img.raw", "RootImage=/srv/img.raw\nRootImage="},
	{"rw", "ReadWritePaths=/srv", "ReadWritePaths=rel"},
	{"ro", "ReadOnlyPaths=-/srv a", "ReadOnlyPaths=/a/../b"},
	{"inacc", "InaccessiblePaths=+/srv", "InaccessiblePaths=-+rel"},
	{"inaccdir", "InaccessibleDirectories=/srv", "InaccessibleDirectories=/srv\nInaccessiblePaths="},
	{"exec", "ExecPaths=\"/s rv\"", "ExecPaths=\"/srv"},
	{"noexec", "NoExecPaths=/srv/%i", "NoExecPaths=%i"},
	{"extdir", "ExtensionDirectories=/srv", "ExtensionDirectories=rel"},
	{"bind", "BindPaths=/srv:/mnt:norbind", "BindPaths=/srv:/mnt:bogus"},
	{"bindro", "BindReadOnlyPaths=-/srv", "BindReadOnlyPaths=/srv:rel"},
	{"bindsp", "BindPaths=rel /srv", "BindPaths=/srv:"},
	{"tmpfs", "TemporaryFileSystem=/mnt:size=1M", "TemporaryFileSystem=rel:size=1M"},
	{"mountimg", "MountImages=/srv/img.raw:/mnt", "MountImages=/srv/img.raw"},
	{"extimg", "ExtensionImages=-/srv/img.raw", "ExtensionImages=/proc/img.raw"},
	{"extimg-opt", "ExtensionImages=/srv/img.raw:root:ro", "ExtensionImages=/srv/img.raw:root:\\q"},
	{"mountflags", "MountFlags=slave", "MountFlags=shared"},
	{"mountflags-reset", "MountFlags=private\nMountFlags=bogus", "MountFlags=private\nMountFlags="},
	{"privtmp", "PrivateTmp=disconnected", "PrivateTmp=yes"},
	{"privdev", "PrivateDevices=yes", "PrivateDevices=maybe"},
	{"privmounts", "PrivateMounts=yes", "PrivateMounts=yes\nPrivateMounts="},
	{"privnet", "PrivateNetwork=yes", "PrivateNetwork=yes\nPrivateMounts=no"},
	{"netns", "NetworkNamespacePath=/run/netns/x", "NetworkNamespacePath=rel"},
	{"protsys", "ProtectSystem=full", "ProtectSystem=bogus"},
	{"protsys-yes", "ProtectSystem=1", "ProtectSystem=Strict"},
	{"prothome", "ProtectHome=tmpfs", "ProtectHome=no"},
	{"tunables", "ProtectKernelTunables=yes", "ProtectKernelTunables=bogus"},
	{"tunables-empty", "ProtectKernelTunables=yes\nProtectKernelTunables=", "ProtectKernelTunables=yes\nProtectKernelTunables=0"},
	{"modules", "ProtectKernelModules=true", "ProtectKernelModules=2"},
	{"logs", "ProtectKernelLogs=on", "ProtectKernelLogs=on\nProtectKernelLogs=off"},
	{"cgroups", "ProtectControlGroups=strict", "ProtectControlGroups=bogus"},
	{"cgroups-yes", "ProtectControlGroups=yes", "ProtectControlGroups=no"},
	{"protproc", "ProtectProc=invisible", "ProtectProc=yes"},
	{"procsubset", "ProcSubset=pid", "ProcSubset=all"},
	{"privipc", "PrivateIPC=yes", "PrivateIPC=no"},
	{"ipcns", "IPCNamespacePath=/run/ipc", "IPCNamespacePath=rel"},
	{"rootdir", "RootDirectory=/srv/root", "RootDirectory=/srv/root\nMountAPIVFS=no"},
	{"rootdir-dirs", "RootDirectory=/\nStateDirectory=foo", "RootDirectory=/"},
	{"rootdir-apivfs", "RootDirectory=/\nMountAPIVFS=yes", "RootDirectory=/\nMountAPIVFS=maybe"},
	{"rootdir-cfg", "RootDirectory=/\nConfigurationDirectory=foo", "RootDirectory=/\nConfigurationDirectory=/foo"},
	{"apivfs", "MountAPIVFS=yes", "MountAPIVFS=yes\nMountAPIVFS="},
	{"dynamic", "DynamicUser=yes", "DynamicUser=no"},
	{"lognamespace", "LogNamespace=foo", "LogNamespace=foo\nLogNamespace="},
	{"bindlog", "BindLogSockets=yes", "BindLogSockets=maybe"},
	{"bindlog-apivfs", "MountAPIVFS=yes\nBindLogSockets=", "MountAPIVFS=yes\nBindLogSockets=no"},
	{"rootfs-privdev", "RootImage=/srv/img.raw\nMountAPIVFS=no\nPrivateDevices=yes", "RootDirectory=/\nPrivateDevices=no"},
	{"dirro", "StateDirectory=foo:bar:ro", "StateDirectory=foo::bogus"},
	{"dirro-logs", "LogsDirectory=a::ro", "CacheDirectory=private:ro"},
	{"dirro-cfg", "ConfigurationDirectory=a::ro", "ConfigurationDirectory=a:b:ro"},
	{"dirro-dup", "RuntimeDirectory=a a:x:ro", "RuntimeDirectory=a:x:ro\nRuntimeDirectory="},
	{"pids", "PrivatePIDs=yes", "PrivatePIDs=maybe"},
}

// mountNSCases are enabled units with a WorkingDirectory= below /proc,
// /sys or /dev (or beside them), with and without each of
// mountNSSettings: 257 refuses the ones that get a mount namespace, 252
// none.
func mountNSCases() map[string]string {
	cases := map[string]string{}
	svcText := func(extra string) string {
		return "[Service]\nExecStart=/bin/true\n" + extra + "\n"
	}
	for _, s := range mountNSSettings {
		cases["wd-"+s.name+"-kept.service"] = svcText("WorkingDirectory=/proc/x\n" + s.kept)
		cases["wd-"+s.name+"-ign.service"] = svcText("WorkingDirectory=/proc/x\n" + s.ignore)
		cases["wd-"+s.name+"-beside.service"] = svcText("WorkingDirectory=/procfoo\n" + s.kept)
	}
	// The working directory itself: below /sys or /dev, the API file
	// system itself, with "-", simplified, with specifiers; reset, made
	// "~" or kept over an ignored value.
	for name, wd := range map[string]string{
		"sys": "/sys/x", "dev": "/dev//x", "proc": "/proc", "dash": "-/proc/x", "spec": "/sys/%p",
		"devfoo": "/devfoo", "reset": "/dev/x\nWorkingDirectory=", "home": "/dev/x\nWorkingDirectory=~",
		"keep": "/dev/x\nWorkingDirectory=-rel", "dashkeep": "/dev/x\nWorkingDirectory=-/sys/%Q",
		"replace": "/dev/x\nWorkingDirectory=/srv", "sec": "/dev/x\n[Unit]\nWorkingDirectory=/srv",
	} {
		cases["wd-dir-"+name+".service"] = svcText("ProtectSystem=yes\nWorkingDirectory=" + wd)
	}
	edges := slices.Sorted(maps.Keys(mountNSEdges))
	for i, text := range edges {
		cases[fmt.Sprintf("wd-edge%02d.service", i)] = svcText("WorkingDirectory=/proc/x\n" + text)
	}
	// The other types with an execution context.
	for _, s := range []struct{ name, text string }{
		{"kept", "ProtectHome=yes"}, {"ign", "ProtectHome=bogus"}, {"none", ""}, {"pids", "PrivatePIDs=yes"},
	} {
		cases["wd-"+s.name+".socket"] = "[Socket]\nListenStream=/run/wd-" + s.name + ".sock\nWorkingDirectory=/dev/x\n" + s.text + "\n"
		cases["srv-wd"+s.name+".mount"] = "[Mount]\nWhat=tmpfs\nType=tmpfs\nWorkingDirectory=/sys/x\n" + s.text + "\n"
		cases["wd"+s.name+".swap"] = "[Swap]\nWhat=/wd" + s.name + "\nWorkingDirectory=/proc/x\n" + s.text + "\n"
	}
	return cases
}

// mountNSOps enables each of mountNSCases (a service for each socket).
func mountNSOps() []op {
	wants := map[string]string{".service": "multi-user", ".socket": "sockets", ".mount": "local-fs", ".swap": "swap"}
	cases := mountNSCases()
	names := make([]string, 0, len(cases))
	for n := range cases {
		names = append(names, n)
	}
	sort.Strings(names)
	var ops []op
	for _, name := range names {
		suffix := name[strings.LastIndex(name, "."):]
		ops = append(ops, file("/etc/systemd/system/"+name, cases[name]),
			link(fmt.Sprintf("/etc/systemd/system/%s.target.wants/%s", wants[suffix], name), "/etc/systemd/system/"+name))
		if suffix == ".socket" {
			ops = append(ops, file("/etc/systemd/system/"+strings.TrimSuffix(name, suffix)+".service", svc))
		}
	}
	return ops
}

// mountNSEdges are corner cases of the readers of exec_needs_mount_namespace
// and whether they give a mount namespace.
var mountNSEdges = map[string]bool{
	"":                                     false,
	"BindPaths=/a:/b: /c":                  false,
	"BindPaths=/a:/b:x /c":                 true,
	"BindPaths=/a:/b:x":                    false,
	"BindPaths=\"/a":                       false,
	"BindPaths=:/a":                        true,
	`TemporaryFileSystem="" "/a\\" /b`:     true,
	`TemporaryFileSystem="/a\\"`:           false,
	`TemporaryFileSystem="/a`:              false,
	"StateDirectory=a:b:ro:x\\q":           true,
	"StateDirectory=a:b\\q:ro":             false,
	"StateDirectory=a:ro\nStateDirectory=": false,
	"StateDirectory=a:/b:ro":               false,
	"StateDirectory=private/x::ro":         false,
	"StateDirectory=a::ro a":               true,
	"ExtensionImages=/proc/a:root:\\q /b":  true,
	"ExtensionImages=/a:root:\\q /b":       false,
	"ExtensionImages=::: /dev/a":           false,
	"RootDirectory=%i\nMountAPIVFS=yes":    true,
	"RootDirectory=%i\nStateDirectory=a":   false,
}

// testUnit is a unit named name with the one source text, as the loader
// would read it.
func testUnit(t testing.TB, name, text string) *Unit {
	u, err := parseTestUnit(name, text)
	require.NoError(t, err)
	return u
}

func parseTestUnit(name, text string) (*Unit, error) {
	opts, err := unit.ParseConfig([]byte(text))
	if err != nil {
		return nil, err
	}
	return &Unit{Name: name, Sources: []Source{{Path: "/etc/systemd/system/" + name, Options: opts}}}, nil
}

// TestNeedsMountNamespace checks what the oracle cannot: on this host's
// hybrid cgroup hierarchy systemd drops ProtectControlGroups=private,
// which the unified hierarchy of a Debian 13 boot keeps. The readers'
// corner cases are in the oracle too (mountNSCases).
func TestNeedsMountNamespace(t *testing.T) {
	g := &Graph{version: 257}
	cases := map[string]bool{
		"ProtectControlGroups=private":                         true,
		"ProtectControlGroups=private\nProtectControlGroups=0": false,
	}
	maps.Copy(cases, mountNSEdges)
	for text, want := range cases {
		u := testUnit(t, "x.service", "[Service]\n"+text+"\n")
		assert.Equal(t, want, g.needsMountNamespace(u, "Service", u.Name), text)
	}
	for text, want := range map[string]string{
		"WorkingDirectory=/dev//x/":                          "/dev/x",
		"WorkingDirectory=/dev/x\nWorkingDirectory=-rel":     "/dev/x",
		"WorkingDirectory=/dev/x\nWorkingDirectory=-~":       "",
		"WorkingDirectory=/dev/x\nWorkingDirectory=":         "",
		"WorkingDirectory=-/sys/%p":                          "/sys/x",
		"WorkingDirectory=/dev/x\nWorkingDirectory=-/%Q":     "/dev/x",
		"WorkingDirectory=/dev/x\nWorkingDirectory=-/a/../b": "/dev/x",
	} {
		u := testUnit(t, "x.service", "[Service]\n"+text+"\n")
		assert.Equal(t, want, workDirSetting(u, "Service", u.Name, 257).dir, text)
	}
}

func TestColonFields(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want []string
		bad  bool
	}{
		{in: "a:b:ro", max: 3, want: []string{"a", "b", "ro"}},
		{in: "a::ro", max: 3, want: []string{"a", "", "ro"}},
		{in: "", max: 3, want: []string{""}},
		{in: "a:", max: 3, want: []string{"a", ""}},
		{in: "a:b:c:d\\q", max: 3, want: []string{"a", "b", "c"}},
		{in: "a:b\\q", max: 3, bad: true},
		{in: "a\\:b:c", max: 1, want: []string{"a:b"}},
	} {
		got, err := colonFields(tc.in, tc.max, true)
		if tc.bad {
			assert.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	got, err := colonFields("::a::b:", 1, false)
	require.NoError(t, err)
	assert.Equal(t, []string{"a"}, got)
}

// mountNSResets are the settings whose empty assignment drops what the
// earlier ones set.
var mountNSResets = []string{"RootImage", "RootDirectory", "ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths",
	"ExecPaths", "NoExecPaths", "ExtensionDirectories", "BindPaths", "BindReadOnlyPaths", "TemporaryFileSystem",
	"MountImages", "ExtensionImages", "MountFlags", "PrivateMounts", "MountAPIVFS", "BindLogSockets",
	"LogNamespace", "NetworkNamespacePath", "IPCNamespacePath", "StateDirectory", "RuntimeDirectory",
	"CacheDirectory", "LogsDirectory", "ConfigurationDirectory"}

// FuzzMountNamespace runs the readers of exec_needs_mount_namespace and
// config_parse_working_directory on any value of each setting: they never
// panic, and a setting reset by an empty assignment gives no namespace.
func FuzzMountNamespace(f *testing.F) {
	for _, s := range mountNSSettings {
		_, v, _ := strings.Cut(strings.SplitN(s.kept, "\n", 2)[0], "=")
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		// A value ending in a backslash would continue onto the next line.
		if len(v) > 4096 || strings.ContainsAny(v, "\n\r") || strings.HasSuffix(strings.TrimRight(v, " \t"), "\\") {
			return
		}
		for _, version := range []int{252, 257} {
			g := &Graph{version: version}
			for _, s := range mountNSSettings {
				name, _, _ := strings.Cut(s.kept, "=")
				u, err := parseTestUnit("x@i.service", "[Service]\nWorkingDirectory="+v+"\n"+name+"="+v+"\n")
				if err != nil {
					return
				}
				g.needsMountNamespace(u, "Service", u.Name)
				workDirSetting(u, "Service", u.Name, version)
			}
			for _, name := range mountNSResets {
				u, err := parseTestUnit("x@i.service", "[Service]\n"+name+"="+v+"\n"+name+"=\n")
				if err != nil {
					return
				}
				if g.needsMountNamespace(u, "Service", u.Name) {
					t.Fatalf("%s=%q then empty: still a mount namespace", name, v)
				}
			}
		}
	})
}
