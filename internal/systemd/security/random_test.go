package security

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The random trees: services with random mixes of the sandboxing settings
// the assessment reads, with valid, odd and invalid values, set in unit
// files under /etc and /usr/lib, reset and overridden by drop-ins (per
// unit, per template instance, per name prefix, per type, masked), with
// syntax systemd tolerates (continuations, comments, spaces around "=").

var (
	bools       = []string{"yes", "no", "true", "false", "1", "0", "on", "off", "YES", "y", "t", "n", "maybe", ""}
	capNames    = []string{"CAP_SYS_ADMIN", "CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_SYS_PTRACE", "CAP_SYS_TIME", "CAP_NET_ADMIN", "CAP_SYS_RAWIO", "CAP_SYS_MODULE", "CAP_AUDIT_CONTROL", "CAP_AUDIT_READ", "CAP_AUDIT_WRITE", "CAP_SYSLOG", "CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_MKNOD", "CAP_CHOWN", "CAP_FSETID", "CAP_SETFCAP", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_IPC_OWNER", "CAP_KILL", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_RAW", "CAP_SYS_BOOT", "CAP_MAC_ADMIN", "CAP_MAC_OVERRIDE", "CAP_LINUX_IMMUTABLE", "CAP_IPC_LOCK", "CAP_SYS_CHROOT", "CAP_BLOCK_SUSPEND", "CAP_WAKE_ALARM", "CAP_LEASE", "CAP_SYS_TTY_CONFIG", "CAP_SYS_PACCT", "CAP_BPF", "CAP_PERFMON", "CAP_CHECKPOINT_RESTORE", "cap_sys_admin", "Cap_Net_Raw", "CAP_NOPE", "21", "0x15", "0b10101", "0b0b10101", "0o25", "62", "63", "64", "-1", "'CAP_KILL'", "\"CAP_SYS_BOOT CAP_LEASE\"", "'CAP_KILL"}
	groupNames  = []string{"@swap", "@obsolete", "@clock", "@cpu-emulation", "@debug", "@mount", "@module", "@raw-io", "@reboot", "@privileged", "@resources", "@system-service", "@basic-io", "@file-system", "@default", "@known", "@network-io", "@process", "@signal", "@setuid", "@sync", "@timer", "@chown", "@keyring", "@memlock", "@sandbox", "@aio", "@nosuch"}
	syscallPick = []string{"swapon", "swapoff", "reboot", "kexec_load", "init_module", "ptrace", "mount", "umount2", "clock_settime", "settimeofday", "ioperm", "iopl", "setrlimit", "sched_setscheduler", "personality", "chown", "read", "write", "execve", "socketcall", "_llseek", "nosuchcall", "uselib", "bpf", "acct", "fanotify_init", "pivot_root", "vm86", "lookup_dcookie", "create_module"}
	errnoPick   = []string{"", "", "", ":EPERM", ":eacces", ":1", ":0", ":kill", ":ENOSUCH", ":4096", ":0x5", ":0b101", ":0b0b101", ":0o0o5"}
	familyPick  = []string{"AF_INET", "AF_INET6", "AF_UNIX", "AF_LOCAL", "AF_NETLINK", "AF_ROUTE", "AF_PACKET", "AF_BLUETOOTH", "AF_VSOCK", "AF_ALG", "af_inet", "AF_UNSPEC", "AF_NOSUCH", "'AF_INET'", "AF_MCTP"}
	nsPick      = []string{"cgroup", "ipc", "net", "mnt", "pid", "user", "uts", "time", "nosuch"}
	ipPick      = []string{"any", "localhost", "127.0.0.1", "127.0.0.0/8", "::1", "10.0.0.0/8", "0.0.0.0/0", "::/0", "link-local", "multicast", "1.2.3.4/33", "bogus", "1.2.3.4/0", "localhost.localdomain", "x.localhost", "fe80::1%eth0", "::ffff:127.0.0.1", "192.168.1.1/24", "127.1.2.3/32", "0.0.0.0/0 ::/0"}
)

// setting is one directive with its value generator.
type setting struct {
	section, name string
	value         func(r *rand.Rand) string
}

func oneOf(vs ...string) func(r *rand.Rand) string {
	return func(r *rand.Rand) string { return vs[r.IntN(len(vs))] }
}

func some(r *rand.Rand, vs []string, max int) []string {
	n := 1 + r.IntN(max)
	out := make([]string, n)
	for i := range out {
		out[i] = vs[r.IntN(len(vs))]
	}
	return out
}

func tilde(r *rand.Rand) string {
	if r.IntN(2) == 0 {
		return "~"
	}
	return ""
}

var randomSettings = []setting{
	{"Service", "User", oneOf("root", "0", "nobody", "daemon", "www-data", "_svc", "1000", "65535", "4294967295", "-1", "9x", "a b", "%i", "%p", "%n", "%j", "user:x", "", "%Z", "0755", "Root", "%u")},
	{"Service", "Group", oneOf("root", "adm", "", "1000", "a:b")},
	{"Service", "SupplementaryGroups", oneOf("adm", "adm sudo", "", "1000 adm", "'adm'", "a:b", "%p", "'unterminated")},
	{"Service", "DynamicUser", oneOf(append([]string{"yes", "no"}, bools...)...)},
	{"Service", "UMask", oneOf("0022", "0027", "0077", "0002", "0000", "077", "7777", "10000", "abc", "-1", "0o22", "", "0x1", "0066", "0007", "+0022", " 0027")},
	{"Service", "CapabilityBoundingSet", func(r *rand.Rand) string {
		if r.IntN(8) == 0 {
			return oneOf("", "~", "~'CAP_X")(r)
		}
		return tilde(r) + strings.Join(some(r, capNames, 5), " ")
	}},
	{"Service", "AmbientCapabilities", func(r *rand.Rand) string {
		if r.IntN(6) == 0 {
			return oneOf("", "~")(r)
		}
		return tilde(r) + strings.Join(some(r, capNames, 3), " ")
	}},
	{"Service", "NoNewPrivileges", oneOf(bools...)},
	{"Service", "KeyringMode", oneOf("inherit", "private", "shared", "bogus", "")},
	{"Service", "ProtectProc", oneOf("default", "noaccess", "invisible", "ptraceable", "bogus", "")},
	{"Service", "ProcSubset", oneOf("all", "pid", "bogus", "")},
	{"Service", "SystemCallFilter", func(r *rand.Rand) string {
		if r.IntN(10) == 0 {
			return ""
		}
		var ws []string
		for _, w := range some(r, append(append([]string{}, groupNames...), syscallPick...), 4) {
			ws = append(ws, w+errnoPick[r.IntN(len(errnoPick))])
		}
		return tilde(r) + strings.Join(ws, " ")
	}},
	{"Service", "SystemCallArchitectures", oneOf("native", "native x86", "x86-64", "native native", "bogus", "", "loongarch64", "'native'", "x86 x32", "native bogus")},
	{"Service", "MemoryDenyWriteExecute", oneOf(bools...)},
	{"Service", "RestrictRealtime", oneOf(bools...)},
	{"Service", "RestrictSUIDSGID", oneOf(bools...)},
	{"Service", "LockPersonality", oneOf(bools...)},
	{"Service", "RestrictNamespaces", func(r *rand.Rand) string {
		if r.IntN(3) == 0 {
			return oneOf(append([]string{"yes", "no"}, bools...)...)(r)
		}
		return tilde(r) + strings.Join(some(r, nsPick, 4), " ")
	}},
	{"Service", "RestrictAddressFamilies", func(r *rand.Rand) string {
		if r.IntN(6) == 0 {
			return oneOf("", "none", "~'AF_INET")(r)
		}
		return tilde(r) + strings.Join(some(r, familyPick, 4), " ")
	}},
	{"Service", "PrivateTmp", oneOf(append([]string{"disconnected", "connected"}, bools...)...)},
	{"Service", "PrivateDevices", oneOf(bools...)},
	{"Service", "PrivateNetwork", oneOf(bools...)},
	{"Service", "PrivateUsers", oneOf(append([]string{"self", "identity", "full"}, bools...)...)},
	{"Service", "PrivateMounts", oneOf(bools...)},
	{"Service", "PrivateIPC", oneOf(bools...)},
	{"Service", "ProtectControlGroups", oneOf(append([]string{"private", "strict"}, bools...)...)},
	{"Service", "ProtectKernelTunables", oneOf(bools...)},
	{"Service", "ProtectKernelModules", oneOf(bools...)},
	{"Service", "ProtectKernelLogs", oneOf(bools...)},
	{"Service", "ProtectClock", oneOf(bools...)},
	{"Service", "ProtectHostname", oneOf(bools...)},
	{"Service", "ProtectSystem", oneOf("yes", "no", "full", "strict", "", "bogus", "true", "Strict")},
	{"Service", "ProtectHome", oneOf("yes", "no", "read-only", "tmpfs", "", "bogus", "1")},
	{"Service", "RemoveIPC", oneOf(bools...)},
	{"Service", "RootDirectory", oneOf("", "/", "/srv/x", "//srv//x/", "relative", "/srv/../x", "/srv/%i", "/srv/%Z", "/./", "/srv/./x", "//")},
	{"Service", "RootImage", oneOf("", "/img.raw", "/", "rel", "/a/%n")},
	{"Service", "DevicePolicy", oneOf("auto", "closed", "strict", "", "bogus")},
	{"Service", "DeviceAllow", oneOf("", "/dev/null rw", "/dev/sda", "char-rtc r", "block-loop rwm", "/dev/../x r", "/tmp/x", "/dev/null rwx", "'/dev/zero' r", "/dev//null", "char-* rw", "/dev/%p r", "/dev r", "/run/systemd/inaccessible/chr r", "/dev/ w")},
	{"Service", "Delegate", oneOf("yes", "no", "", "cpu memory", "bogus", "'cpu")},
	{"Service", "IPAddressDeny", func(r *rand.Rand) string {
		if r.IntN(8) == 0 {
			return ""
		}
		return strings.Join(some(r, ipPick, 3), " ")
	}},
	{"Service", "IPAddressAllow", func(r *rand.Rand) string {
		if r.IntN(8) == 0 {
			return ""
		}
		return strings.Join(some(r, ipPick, 3), " ")
	}},
	{"Service", "IPIngressFilterPath", oneOf("", "/sys/fs/bpf/x", "relative", "/sys/fs/bpf/%n", "/sys//fs/bpf/y/")},
	{"Service", "IPEgressFilterPath", oneOf("", "/sys/fs/bpf/x", "/sys/fs/bpf/../x")},
	{"Service", "NotifyAccess", oneOf("none", "main", "exec", "all", "", "bogus")},
	{"Service", "LoadCredentialEncrypted", oneOf("foo:/etc/x", "foo", "", "a/b:/x")},
	{"Service", "SetCredentialEncrypted", oneOf("foo:aGVsbG8=", "foo:!!!", "", "bar")},
	{"Service", "LoadCredential", oneOf("foo:/etc/x", "")},
	{"Unit", "DefaultDependencies", oneOf("yes", "no", "no", "bogus")},
	{"Service", "Type", oneOf("simple", "exec", "notify", "oneshot", "forking")},
}

// randomTree writes n random services and their drop-ins.
func randomTree(seed uint64, n int) (map[string]string, []string) {
	r := rand.New(rand.NewPCG(seed, 0x5ec))
	files := map[string]string{}
	var names []string
	body := func() string {
		var b strings.Builder
		sections := map[string][]string{}
		for range r.IntN(12) {
			s := randomSettings[r.IntN(len(randomSettings))]
			v := s.value(r)
			eq := "="
			switch r.IntN(20) {
			case 0:
				eq = " = "
			case 1:
				eq = "= "
			}
			line := s.name + eq + v
			if r.IntN(25) == 0 && strings.Contains(v, " ") {
				line = s.name + eq + strings.Replace(v, " ", " \\\n  ", 1)
			}
			sections[s.section] = append(sections[s.section], line)
		}
		for _, sec := range []string{"Unit", "Service"} {
			if len(sections[sec]) == 0 && sec == "Unit" {
				continue
			}
			fmt.Fprintf(&b, "[%s]\n", sec)
			if r.IntN(10) == 0 {
				b.WriteString("# a comment\n; another\n")
			}
			for _, l := range sections[sec] {
				b.WriteString(l + "\n")
			}
		}
		return b.String()
	}
	dirs := []string{"etc/systemd/system/", "usr/lib/systemd/system/", "run/systemd/system/"}
	for i := range n {
		name := fmt.Sprintf("r%04d.service", i)
		template := r.IntN(12) == 0
		if template {
			name = fmt.Sprintf("t%04d@.service", i)
		}
		if r.IntN(10) == 0 {
			name = fmt.Sprintf("p-%04d.service", i)
		}
		dir := dirs[r.IntN(2)]
		frag := body()
		if !strings.Contains(frag, "[Service]") {
			frag += "[Service]\n"
		}
		frag += "ExecStart=/bin/true\n"
		files[dir+name] = frag
		names = append(names, name)
		if template && r.IntN(2) == 0 {
			inst := strings.Replace(name, "@", "@web", 1)
			names = append(names, inst)
			if r.IntN(2) == 0 {
				files["etc/systemd/system/"+inst+".d/inst.conf"] = body()
			}
		}
		for range r.IntN(3) {
			d := dirs[r.IntN(len(dirs))]
			files[fmt.Sprintf("%s%s.d/%02d-x.conf", d, name, r.IntN(30))] = body()
		}
		switch r.IntN(40) {
		case 0:
			files["etc/systemd/system/"+name+".d/zz-masked.conf"] = "->/dev/null"
		case 1:
			files["etc/systemd/system/"+name+".d/bad.conf"] = "[Service]\nPrivateTmp=yes\n[Service\nProtectHome=yes\n"
		case 2:
			files["etc/systemd/system/"+name+".d/nosection.conf"] = "ProtectSystem=strict\ngarbage line\n[Service]\nNoNewPrivileges=yes\n"
		case 3:
			files["etc/systemd/system/"+name] = "->/dev/null" // masked
		}
	}
	files["usr/lib/systemd/system/p-.service.d/prefix.conf"] = body()
	if r.IntN(3) == 0 {
		files["usr/lib/systemd/system/service.d/type.conf"] = body()
	}
	sort.Strings(names)
	return files, names
}

// randomSeeds are the seeds `make test` runs; AMILINT_SECURITY_SEEDS=N
// runs N more (make fuzz).
func randomSeeds(t *testing.T) []uint64 {
	seeds := []uint64{1, 2}
	if s := os.Getenv("AMILINT_SECURITY_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "AMILINT_SECURITY_SEEDS")
		for i := range n {
			seeds = append(seeds, uint64(1000+i))
		}
	}
	return seeds
}

// TestRandomTrees scores seeded random service trees with amilint and
// with systemd-analyze 252 and 257, every service of every tree.
func TestRandomTrees(t *testing.T) {
	const perTree = 200
	total := map[int]int{}
	for _, a := range analyzers(t) {
		for _, seed := range randomSeeds(t) {
			t.Run(fmt.Sprintf("%d/seed%d", a.Version, seed), func(t *testing.T) {
				files, names := randomTree(seed, perTree)
				dir := writeTree(t, files)
				got, failed := scoreTree(t, dir, a.Version, nil, names)
				want, stderr := a.security(t, dir, "", names)
				total[a.Version] += compare(t, a.Version, got, failed, want, stderr)
			})
		}
	}
	t.Logf("services compared: %v", total)
}

// TestDumpRandomTree writes the random tree of AMILINT_SECURITY_DUMP_SEED
// to AMILINT_SECURITY_DUMP, for debugging a difference by hand.
func TestDumpRandomTree(t *testing.T) {
	dir := os.Getenv("AMILINT_SECURITY_DUMP")
	if dir == "" {
		t.Skip("set AMILINT_SECURITY_DUMP=DIR (and AMILINT_SECURITY_DUMP_SEED) to write a random tree")
	}
	seed, err := strconv.ParseUint(os.Getenv("AMILINT_SECURITY_DUMP_SEED"), 10, 64)
	require.NoError(t, err)
	files, _ := randomTree(seed, 200)
	for p, content := range files {
		full := dir + "/" + p
		require.NoError(t, os.MkdirAll(full[:strings.LastIndexByte(full, '/')], 0o755))
		if target, ok := strings.CutPrefix(content, "->"); ok {
			require.NoError(t, os.Symlink(target, full))
			continue
		}
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
}
