//go:build e2e

package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/systemd/systemdtest"
	"github.com/amilint/amilint/rules"
)

// The proof of the hardening catalog: the Debian root is booted twice
// under systemd-nspawn, plain and hardened by `amilint fix --harden`, and
// the hardened boot must run every unit the plain one ran, leave no unit
// failed that was not, bring every hardened service to the state it
// reached in the plain boot with no more restarts, and pass the same probes of what the services
// do (a message logged reaches /var/log/syslog, a cron job runs, sshd
// answers, the container engines answer, the daily jobs their timers run
// back up dpkg's database, rotate a log, update apt's lists from a local
// repository and mail root). The wide root (Postfix and PostgreSQL, run
// as instances of templates the catalog hardens) gets the same, with its
// own probes: a local mail delivered, a query answered. systemd-analyze
// security of the root's own systemd scores every hardened service lower.

// probeCron is a cron job that proves cron still runs jobs: it writes to
// /run (cron's sandbox keeps /run writable; /tmp is private to it).
const probeCron = "* * * * * root date > /run/amilint-cron-probe\n"

// chronyOptions keep chronyd from ever setting the clock it shares with
// the host (-x); -F 1 is Debian's default (chronyd's own seccomp filter).
const chronyOptions = "DAEMON_OPTS=\"-F 1 -x\"\n"

// probeLogrotate is a logrotate configuration that rotates the probe's
// log whenever logrotate runs (size 1: any log not empty).
const probeLogrotate = "/var/log/amilint-probe.log {\n\trotate 2\n\tsize 1\n\tmissingok\n\tnocompress\n}\n"

// probeRsyslog asks rsyslog for a log socket in a chroot, as Debian's
// HAProxy package does for its own (/etc/rsyslog.d/49-haproxy.conf): fix
// --harden must let the hardened rsyslog make it.
const (
	probeRsyslogDir  = "/var/lib/amilint-probe/dev"
	probeRsyslogConf = "$AddUnixListenSocket " + probeRsyslogDir + "/log\n"
)

// probeE2scrub makes e2scrub_all go past its early exit (periodic scrubs
// are off by default) to its checks of the tools it needs.
const probeE2scrub = "periodic_e2scrub=1\n"

// The boot has no network: apt-daily's probe updates from a local
// repository, a file: source of one package, unsigned but trusted; the
// test writes its Release file with the Packages file's hash.
const (
	probeAptSources  = "deb [trusted=yes] file:/srv/amilint-apt ./\n"
	probeAptPackages = "Package: amilint-probe\nVersion: 1.0\nArchitecture: all\nMaintainer: amilint <amilint@example.org>\nFilename: amilint-probe_1.0_all.deb\nSize: 1\nDescription: apt probe of the amilint hardening boot test\n"
)

// probeRpcbind asks rpcbind over TCP and UDP and has rpc.statd register
// with it; then stops it, requires the state it saves on stop written as
// its own user, and asks again: rpcbind.socket starts it anew, and with
// -w it reads that state back (and removes it), so the registration must
// still be there.
const probeRpcbind = "rpcinfo -p 127.0.0.1 | grep -qw portmapper && rpcinfo -T udp 127.0.0.1 100000 4 && " +
	"systemctl start rpc-statd.service && rpcinfo -s 127.0.0.1 | grep -qw status && " +
	"systemctl stop rpcbind.service && [ \"$(stat -c %U /run/rpcbind/rpcbind.xdr)\" = _rpc ] && " +
	"rpcinfo -s 127.0.0.1 | grep -qw status && [ ! -e /run/rpcbind/rpcbind.xdr ]"

// probeStatd has rpc.statd (started at boot: nfs-server.service wants it)
// answer over UDP and TCP as the user that owns its state directory, then
// leaves a monitored host in /var/lib/nfs/sm, as a reboot finds it, and
// runs sm-notify again (its pid file gone, as after a reboot): sm-notify
// must move the host to sm.bak, raise the state number, notify the host
// (localhost, whose rpc.statd answers) and forget it.
const probeStatd = "systemctl start rpc-statd.service && [ \"$(ps -o user= -C rpc.statd)\" = \"$(stat -c %U /var/lib/nfs/sm)\" ] && " +
	"rpcinfo -T udp 127.0.0.1 status 1 && rpcinfo -T tcp 127.0.0.1 status 1 && " +
	"h=/var/lib/nfs/sm/localhost && printf '0100007f 000186b5 00000004 00000010 %032d localhost amilint-probe\\n' 0 > $h && " +
	"chown --reference=/var/lib/nfs/sm $h && s=$(od -An -td4 /var/lib/nfs/state) && " +
	"rm -f /run/sm-notify.pid && systemctl restart rpc-statd-notify.service && " +
	"for i in $(seq 60); do [ ! -e $h ] && [ ! -e /var/lib/nfs/sm.bak/localhost ] && [ $(od -An -td4 /var/lib/nfs/state) -gt $s ] && exit 0; sleep 0.5; done; " +
	"ls -l /var/lib/nfs/sm /var/lib/nfs/sm.bak; exit 1"

// probeSysstat runs sysstat's collector twice (two samples make an
// interval sar can show) and its daily summary, and requires the day's
// data file to hold CPU and network interface samples (lo) and the day's
// report to be written; the boots' /etc/sysstat/sysstat has YESTERDAY=no
// (sysstatToday), so sa2 reports on today's file rather than yesterday's.
const probeSysstat = "d=$(date +%d) && systemctl start sysstat-collect.service && sleep 1 && systemctl start sysstat-collect.service && " +
	"sar -u -f /var/log/sysstat/sa$d | grep -q ^Average: && sar -n DEV -f /var/log/sysstat/sa$d | grep -qw lo && " +
	"systemctl start sysstat-summary.service && grep -q ^Average: /var/log/sysstat/sar$d"

// probeSysstatRotate runs sysstat-rotate (sysstat 12.7 and later) twice
// with the previous day's data file removed, and requires the file it
// closes to be made anew with the CPU samples of both runs.
const probeSysstatRotate = "y=/var/log/sysstat/sa$(date --date=yesterday +%d) && rm -f $y && " +
	"systemctl start sysstat-rotate.service && sleep 1 && systemctl start sysstat-rotate.service && " +
	"sar -u -f $y | grep -q ^Average:"

// sysstatToday is what the probe adds to a root's /etc/sysstat/sysstat.
const sysstatToday = "YESTERDAY=no\n"

// bootProbe is one check of what a service does, run inside the booted
// container; it passes when the command exits 0.
type bootProbe struct {
	name string
	argv []string
}

var bootProbes = []bootProbe{
	// rsyslog gives the files it creates $FileOwner:$FileGroup (root:adm
	// on Debian).
	{"rsyslog writes /var/log/syslog, owned by root:adm", []string{"sh", "-c", "logger -t amilint-e2e probe-$$ && for i in $(seq 50); do grep -q amilint-e2e /var/log/syslog && [ \"$(stat -c %U:%G /var/log/syslog)\" = root:adm ] && exit 0; sleep 0.2; done; exit 1"}},
	{"rsyslog listens in a chroot its configuration names", []string{"test", "-S", probeRsyslogDir + "/log"}},
	{"sshd answers", []string{"sh", "-c", "ssh-keyscan -T 5 127.0.0.1 2>/dev/null | grep -q ssh-"}},
	{"cron runs a job", []string{"sh", "-c", "for i in $(seq 90); do [ -s /run/amilint-cron-probe ] && exit 0; sleep 1; done; exit 1"}},
	{"chronyd answers", []string{"chronyc", "-n", "tracking"}},
	{"containerd answers", []string{"ctr", "version"}},
	{"dockerd answers", []string{"docker", "info"}},
	{"unattended-upgrades waits for shutdown", []string{"pgrep", "-f", "unattended-upgrade-shutdown"}},
	// The services their timers run are started by hand, and each must
	// leave its work done.
	{"dpkg-db-backup backs up dpkg's database", []string{"sh", "-c", "rm -f /var/backups/dpkg.status.0 /var/backups/alternatives.tar.0 && systemctl start dpkg-db-backup.service && cmp /var/backups/dpkg.status.0 /var/lib/dpkg/status && tar -tf /var/backups/alternatives.tar.0 | grep -q ^alternatives/"}},
	{"e2scrub_all runs to success", []string{"sh", "-c", "systemctl start e2scrub_all.service && [ \"$(systemctl show -P ConditionResult e2scrub_all.service)\" = yes ] && [ \"$(systemctl show -P Result e2scrub_all.service)\" = success ] && [ \"$(systemctl show -P ExecMainStatus e2scrub_all.service)\" = 0 ]"}},
	{"apt-daily updates the package lists", []string{"sh", "-c", "rm -f /var/lib/apt/periodic/update-stamp /var/lib/apt/lists/*amilint-apt* && systemctl start apt-daily.service && test -f /var/lib/apt/periodic/update-stamp && apt-cache policy amilint-probe | grep -q 'Candidate: 1.0'"}},
	// exim4-base mails root when exim's panic log is not empty; the probe's
	// queue run (outside the sandbox) delivers what the job queued.
	{"exim4-base mails root about exim's panic log", []string{"sh", "-c", "t=amilint-$$ && echo $t > /var/log/exim4/paniclog && chown Debian-exim:adm /var/log/exim4/paniclog && systemctl start exim4-base.service && exim4 -q && grep -rqs $t /var/mail/"}},
	{"logrotate rotates a log", []string{"sh", "-c", "t=amilint-$$ && echo $t > /var/log/amilint-probe.log && systemctl start logrotate.service && grep -qx $t /var/log/amilint-probe.log.1"}},
}

// wideProbes are the probes of the wide root (Postfix and PostgreSQL,
// run as instances of templates their generators make at boot): Postfix
// delivers a local mail to root's mailbox, the cluster answers a query;
// and rpcbind, of the NFS packages, and sysstat): rpcbind keeps a
// registration, sysstat collects and reports.
var wideProbes = []bootProbe{
	{"postfix delivers a local mail", []string{"sh", "-c", "t=amilint-$$ && printf 'Subject: %s\\n\\n%s\\n' $t $t | sendmail root && for i in $(seq 100); do grep -qs $t /var/mail/root && exit 0; sleep 0.3; done; exit 1"}},
	// Debian's /etc/rsyslog.d/postfix.conf: rsyslog makes a log socket
	// in Postfix's chroot.
	{"rsyslog listens in Postfix's chroot", []string{"test", "-S", "/var/spool/postfix/dev/log"}},
	// rpcbind: lookups over TCP and UDP, and a registration (the probe's
	// own, made with rpcinfo as root) kept across a restart through the
	// warm-start state rpcbind writes to /run/rpcbind as its own user.
	{"rpcbind answers and keeps a registration across a restart", []string{"sh", "-c", probeRpcbind}},
	{"rpc.statd answers as its own user and sm-notify notifies a monitored host", []string{"sh", "-c", probeStatd}},
	{"sysstat collects and reports", []string{"sh", "-c", probeSysstat}},
	{"postgresql answers a query", []string{"sh", "-c", "for i in $(seq 60); do [ \"$(su postgres -c \"psql -Atc 'select 1'\" 2>/dev/null)\" = 1 ] && exit 0; sleep 0.5; done; exit 1"}},
}

// wideTrixieProbes are wideProbes with sysstat-rotate, which Debian 13's
// sysstat (12.7) adds.
var wideTrixieProbes = append(append([]bootProbe(nil), wideProbes...),
	bootProbe{"sysstat-rotate closes the previous day's data file", []string{"sh", "-c", probeSysstatRotate}})

// wideInstances are the instances of the wide root's template services
// the boot runs: systemd-analyze scores these, not the templates.
var wideInstances = map[string]string{"postfix@.service": "postfix@-.service", "postgresql@.service": "postgresql@15-main.service"}

// wideTrixieInstances are wideInstances on Debian 13: PostgreSQL 17, and
// no Postfix instance (Postfix 3.10 runs as postfix.service, which Debian
// sandboxes itself and the postfix entry does not name; the probes still
// require it to deliver).
var wideTrixieInstances = map[string]string{"postgresql@.service": "postgresql@17-main.service"}

// onDemand are services a client's D-Bus call starts and that exit after
// some idle seconds: whether a boot's snapshot finds one running is a
// matter of timing (on Debian 13, snapd asks systemd-timedated while it
// runs its first seconds), so the comparison of the two boots leaves them
// out unless the catalog hardens them.
var onDemand = []string{"systemd-timedated.service", "systemd-hostnamed.service", "systemd-localed.service"}

// booted is what one boot showed.
type booted struct {
	state    string            // is-system-running
	units    map[string]string // unit -> "ACTIVE/SUB"
	failed   []string
	restarts map[string]int // service -> NRestarts, of the services asked for
	kills    []string       // processes a system call filter killed: "EXE syscall N"
	probes   map[string]bool
}

// bootRoot boots root under systemd-nspawn (changes to it go to a tmpfs:
// --volatile=overlay), waits until systemd has finished booting and the
// unit states settle, counts the restarts of services, runs the probes,
// and stops the container.
func bootRoot(ctx context.Context, t *testing.T, root, label string, probes []bootProbe, services []string) booted {
	t.Helper()
	console, err := os.Create(filepath.Join(t.TempDir(), label+"-console.log"))
	require.NoError(t, err)
	defer console.Close()
	klog := watchKernelLog(t)
	// A network namespace of its own with CAP_NET_ADMIN lets dockerd set
	// up its iptables chains; CAP_SYS_TIME lets chrony pass its
	// ConditionCapability= (it runs with -x: it never sets the clock),
	// CAP_SYS_RAWIO e2scrub_all.
	nspawn := exec.Command("systemd-nspawn", "-D", root, "-b", "--register=no", "--keep-unit", "--volatile=overlay", "--console=pipe",
		"--private-network", "--capability=CAP_NET_ADMIN,CAP_SYS_TIME,CAP_SYS_RAWIO")
	nspawn.Stdout, nspawn.Stderr = console, console
	nspawn.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	require.NoError(t, nspawn.Start())
	exited := make(chan error, 1)
	go func() { exited <- nspawn.Wait() }()
	defer stopContainer(nspawn, exited, 30*time.Second)
	var initPID int
	require.Eventually(t, func() bool { initPID = containerInit(nspawn.Process.Pid); return initPID > 0 },
		30*time.Second, 100*time.Millisecond, "%s: the container's init appears", label)
	inside := func(timeout time.Duration, argv ...string) (string, error) {
		return run(ctx, timeout, "nsenter", append([]string{"-t", strconv.Itoa(initPID), "-a"}, argv...)...)
	}
	var b booted
	ok := assert.Eventually(t, func() bool {
		out, _ := inside(90*time.Second, "systemctl", "is-system-running", "--wait")
		b.state = strings.TrimSpace(out)
		return b.state == "running" || b.state == "degraded"
	}, 240*time.Second, 500*time.Millisecond, "%s: systemd finishes booting", label)
	if !ok {
		out, _ := os.ReadFile(console.Name())
		t.Fatalf("%s: console (tail):\n%s", label, tail(string(out), 3000))
	}
	// Let services that start late (socket activation, Type=notify
	// daemons) and those that run a while after boot and exit (snapd, on
	// a root without snaps, runs some seconds) settle: the states must
	// not change for twelve seconds, two minutes at most.
	const quiet, every = 12 * time.Second, 3 * time.Second
	var since time.Time
	for i := 0; i < 40; i++ {
		now := unitStates(t, inside)
		if b.units == nil || !maps.Equal(b.units, now) {
			for _, u := range changed(b.units, now) {
				if b.units != nil {
					t.Logf("%s: settling: %-40s %q → %q", label, u, b.units[u], now[u])
				}
			}
			b.units, since = now, time.Now()
		} else if time.Since(since) >= quiet {
			break
		}
		time.Sleep(every)
	}
	out, err := inside(30*time.Second, "systemctl", "list-units", "--failed", "--no-legend", "--plain", "--all")
	require.NoError(t, err, out)
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			b.failed = append(b.failed, f[0])
			// Why it failed, for a failure in the hardened boot.
			log, _ := inside(30*time.Second, "journalctl", "-b", "--no-pager", "-n", "15", "-u", f[0])
			t.Logf("%s: failed %s:\n%s", label, f[0], log)
		}
	}
	// A service killed and restarted by systemd (Restart=) may end up
	// running: only its restart counter tells. Those restarts, with the
	// journal's reason, before the probes add any.
	b.restarts = map[string]int{}
	if len(services) > 0 {
		out, err := inside(30*time.Second, append([]string{"systemctl", "show", "-p", "Id", "-p", "NRestarts", "--"}, services...)...)
		require.NoError(t, err, out)
		b.restarts = parseRestarts(out)
		for _, s := range services {
			if b.restarts[s] > 0 {
				log, _ := inside(30*time.Second, "journalctl", "-b", "--no-pager", "-n", "15", "-u", s)
				t.Logf("%s: %s restarted %d times:\n%s", label, s, b.restarts[s], log)
			}
		}
	}
	b.probes = map[string]bool{}
	for _, p := range probes {
		out, err := inside(2*time.Minute, p.argv...)
		b.probes[p.name] = err == nil
		t.Logf("%s: probe %q: %v %s", label, p.name, err == nil, strings.TrimSpace(tail(out, 200)))
	}
	b.kills = klog.controlledKills(t, label, inside)
	t.Logf("%s: processes killed by a system call filter: %v", label, b.kills)
	return b
}

// seccompControl is a copy of chown that the control has a system call
// filter kill; its name is its own, so no service's kill is taken for it.
const seccompControl = "/usr/local/sbin/amilint-seccomp-control"

// controlledKills returns the processes a system call filter killed in
// the boot (seccompKills), after proving that the kernel's log shows such
// kills here: a transient service whose filter denies @chown runs a copy
// of chown, and its kill must be read from the log within 20 s. Where the
// log shows none (an audit daemon takes the records, or the kernel does
// not print them), the test fails instead of seeing no kill in either
// boot.
// The control's own kill is not returned.
func (k *kernelLog) controlledKills(t *testing.T, label string, inside func(time.Duration, ...string) (string, error)) []string {
	t.Helper()
	out, err := inside(30*time.Second, "cp", "/usr/bin/chown", seccompControl)
	require.NoError(t, err, out)
	out, err = inside(time.Minute, "systemd-run", "--wait", "--quiet", "--collect", "--unit=amilint-seccomp-control",
		"-p", "SystemCallFilter=~@chown", seccompControl, "root", "/")
	require.Error(t, err, "%s: the control is killed by its system call filter: %s", label, out)
	seen := map[string]bool{}
	control := false
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		for _, kill := range k.seccompKills(t) {
			if strings.HasPrefix(kill, seccompControl+" ") {
				control = true
			} else {
				seen[kill] = true
			}
		}
		if control || time.Now().After(deadline) {
			break
		}
	}
	// The kernel notes records its rate limit dropped only when it prints
	// the next one after its 5 s window: a dropped kill is followed by
	// the control's record with the note before it, or the control's
	// record is dropped too and not seen here.
	require.True(t, control, "%s: the kernel's log shows the control's process killed by its system call filter "+
		"(no audit daemon may take the kernel's audit records, and the kernel's rate limit of 10 in 5 s may have dropped it)", label)
	require.Zero(t, k.suppressed, "%s: the kernel's rate limit dropped audit records, so a kill may not have been seen", label)
	return slices.Sorted(maps.Keys(seen))
}

// kernelLog reads the kernel's log (/dev/kmsg) from where it stood when
// it was opened.
type kernelLog struct {
	fd int
	// suppressed counts the audit records the kernel's printk rate limit
	// dropped (its "kauditd_printk_skb: N callbacks suppressed"): a kill
	// among them would not be seen.
	suppressed int
}

// watchKernelLog opens the kernel's log at its end. Without an audit
// daemon (none runs here) the kernel prints each process a seccomp filter
// kills there: that is how a sandbox that kills a child process, which
// neither a unit's state nor its restarts show, is seen.
func watchKernelLog(t *testing.T) *kernelLog {
	t.Helper()
	fd, err := unix.Open("/dev/kmsg", unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	require.NoError(t, err, "the kernel log is read for processes killed by a system call filter")
	t.Cleanup(func() { unix.Close(fd) })
	_, err = unix.Seek(fd, 0, io.SeekEnd)
	require.NoError(t, err)
	return &kernelLog{fd: fd}
}

// seccompRE matches the kernel's audit record of a seccomp action (type
// 1326): sig is 0 for an action that only logs.
var seccompRE = regexp.MustCompile(`audit: type=1326 .*\bexe=("[^"]*"|\S+) sig=(\d+) .*\bsyscall=(\d+)`)

// suppressedRE matches the kernel's note that its rate limit dropped
// audit records it would have printed.
var suppressedRE = regexp.MustCompile(`kauditd_printk_skb: (\d+) callbacks suppressed`)

// seccompKills returns, sorted and once each, the processes killed by a
// system call filter since the log was opened or last read, as "EXE
// syscall N" (the x86-64 system call number).
func (k *kernelLog) seccompKills(t *testing.T) []string {
	t.Helper()
	seen := map[string]bool{}
	buf := make([]byte, 8192) // a record is at most 1 KiB of text and its dictionary
	for i := 0; i < 1_000_000; i++ {
		n, err := unix.Read(k.fd, buf)
		if err == unix.EAGAIN || (err == nil && n == 0) {
			break
		}
		if err == unix.EPIPE || err == unix.EINTR {
			continue // records overwritten before they were read; go on with the next
		}
		require.NoError(t, err, "reading the kernel log")
		if m := seccompRE.FindSubmatch(buf[:n]); m != nil && string(m[2]) != "0" {
			seen[fmt.Sprintf("%s syscall %s", strings.Trim(string(m[1]), `"`), m[3])] = true
		} else if m := suppressedRE.FindSubmatch(buf[:n]); m != nil {
			d, _ := strconv.Atoi(string(m[1]))
			k.suppressed += d
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// parseRestarts reads systemctl show -p Id -p NRestarts of several
// units: blocks separated by blank lines.
func parseRestarts(out string) map[string]int {
	restarts := map[string]int{}
	for _, block := range strings.Split(out, "\n\n") {
		var id string
		n := -1
		for _, l := range strings.Split(block, "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(l), "=")
			switch k {
			case "Id":
				id = v
			case "NRestarts":
				if i, err := strconv.Atoi(v); err == nil {
					n = i
				}
			}
		}
		if id != "" && n >= 0 {
			restarts[id] = n
		}
	}
	return restarts
}

// changed lists, sorted, the units whose states differ between a and b,
// a unit missing from one of them included.
func changed(a, b map[string]string) []string {
	var names []string
	for u, s := range a {
		if t, ok := b[u]; !ok || s != t {
			names = append(names, u)
		}
	}
	for u := range b {
		if _, ok := a[u]; !ok {
			names = append(names, u)
		}
	}
	sort.Strings(names)
	return names
}

// unitStates lists every loaded unit's ACTIVE/SUB state.
func unitStates(t *testing.T, inside func(time.Duration, ...string) (string, error)) map[string]string {
	out, err := inside(30*time.Second, "systemctl", "list-units", "--all", "--no-legend", "--plain", "--full")
	require.NoError(t, err, out)
	states := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) < 4 || f[1] != "loaded" {
			continue
		}
		states[f[0]] = f[2] + "/" + f[3]
	}
	return states
}

// overlayRoot stacks upper on the root at a new mount point.
func overlayRoot(t *testing.T, lower, upper string) string {
	t.Helper()
	tmp := t.TempDir()
	work, merged := filepath.Join(tmp, "work"), filepath.Join(tmp, "merged")
	require.NoError(t, os.Mkdir(work, 0o755))
	require.NoError(t, os.Mkdir(merged, 0o755))
	require.NoError(t, unix.Mount("overlay", merged, "overlay", 0, fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)))
	t.Cleanup(func() {
		if err := unix.Unmount(merged, 0); err != nil {
			_ = unix.Unmount(merged, unix.MNT_DETACH)
		}
	})
	return merged
}

var overallRE = regexp.MustCompile(`Overall exposure level for (\S+): (\d+\.\d)`)

// analyze returns systemd-analyze security --offline=true's overall
// exposure of units in root, with the systemd-analyze of sd: the host's
// for Debian 12 (252, the roots' own version), the Debian 13 root's own
// (257) run in a chroot of it for a Debian 13 root.
func analyze(ctx context.Context, t *testing.T, sd systemdtest.Systemd, root string, units []string) map[string]string {
	t.Helper()
	var out string
	if sd.Version == systemdtest.Bookworm.Version {
		out, _ = run(ctx, time.Minute, "systemd-analyze", append([]string{"security", "--offline=true", "--root=" + root, "--no-pager"}, units...)...)
	} else {
		o := sd.Run(t, root, append([]string{"systemd-analyze", "security", "--offline=true", "--root=" + systemdtest.Tree, "--no-pager"}, units...)...)
		out = string(o.Stdout) + string(o.Stderr)
	}
	got := map[string]string{}
	for _, m := range overallRE.FindAllStringSubmatch(out, -1) {
		got[m[1]] = m[2]
	}
	return got
}

// TestE2EHarden boots the Debian root and the wide root, of Debian 12 and
// of Debian 13, plain and hardened by `amilint fix --harden`, and proves
// every shipped hardening catalog entry the roots have a service for
// harmless to that service and to the boot, on both releases' systemd and
// packages.
func TestE2EHarden(t *testing.T) {
	testenv.Root(t, "booting systemd-nspawn containers and overlay mounts")
	testenv.Tool(t, "systemd-nspawn", "systemd-container")
	testenv.Tool(t, "systemd-analyze", "systemd")
	testenv.Tool(t, "nsenter", "util-linux")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	root := os.Getenv("AMILINT_E2E_ROOT")
	if root == "" {
		root = testenv.Bookworm.Path(t)
	}
	wide := testenv.Wide.Path(t)
	t.Run("debian", func(t *testing.T) { hardenPair(ctx, t, systemdtest.Bookworm, root, bootProbes, nil, 5) })
	// The wide root: Postfix and PostgreSQL, hardened through their
	// templates (the base services are hardened too, and must run as
	// plain, but only the wide root's own probes run).
	t.Run("wide", func(t *testing.T) { hardenPair(ctx, t, systemdtest.Bookworm, wide, wideProbes, wideInstances, 2) })
	// The same two over Debian 13 (systemd 257): each entry is proven on
	// the systemd and the package versions of both releases.
	t.Run("trixie", func(t *testing.T) {
		hardenPair(ctx, t, systemdtest.Trixie, testenv.Trixie.Path(t), bootProbes, nil, 5)
	})
	t.Run("wide-trixie", func(t *testing.T) {
		hardenPair(ctx, t, systemdtest.Trixie, testenv.WideTrixie.Path(t), wideTrixieProbes, wideTrixieInstances, 2)
	})
}

// hardenPair boots root plain and hardened by `amilint fix --harden` and
// requires every hardened service to keep working: its state, no new
// failed unit, probes passing, exposure lower. instances names the
// instance that stands for a hardened template; the root must have at
// least minServices hardened services.
func hardenPair(ctx context.Context, t *testing.T, sd systemdtest.Systemd, root string, probes []bootProbe, instances map[string]string, minServices int) {
	began := time.Now()
	phase := func(name string) { t.Logf("%6.1fs %s", time.Since(began).Seconds(), name) }

	// Both boots get the probes' cron job, logrotate configuration, e2scrub
	// configuration, apt repository and rsyslog socket, and chrony's -x.
	pkgSum := sha256.Sum256([]byte(probeAptPackages))
	release := fmt.Sprintf("Origin: amilint\nLabel: amilint\nSuite: amilint\nCodename: amilint\nDate: %s\nSHA256:\n %x %d Packages\n",
		time.Now().UTC().Format(time.RFC1123Z), pkgSum, len(probeAptPackages))
	probe := func(upper string) {
		writeFile(t, filepath.Join(upper, "etc/cron.d/amilint-probe"), probeCron, 0o644)
		writeFile(t, filepath.Join(upper, "etc/default/chrony"), chronyOptions, 0o644)
		writeFile(t, filepath.Join(upper, "etc/logrotate.d/amilint-probe"), probeLogrotate, 0o644)
		writeFile(t, filepath.Join(upper, "etc/e2scrub.conf"), probeE2scrub, 0o644)
		writeFile(t, filepath.Join(upper, "etc/apt/sources.list"), probeAptSources, 0o644)
		writeFile(t, filepath.Join(upper, "srv/amilint-apt/Packages"), probeAptPackages, 0o644)
		writeFile(t, filepath.Join(upper, "srv/amilint-apt/Release"), release, 0o644)
		writeFile(t, filepath.Join(upper, "etc/rsyslog.d/49-amilint-probe.conf"), probeRsyslogConf, 0o644)
		require.NoError(t, os.MkdirAll(filepath.Join(upper, probeRsyslogDir), 0o755))
		if conf, err := os.ReadFile(filepath.Join(root, "etc/sysstat/sysstat")); err == nil {
			writeFile(t, filepath.Join(upper, "etc/sysstat/sysstat"), string(conf)+sysstatToday, 0o644)
		}
	}
	plainUpper := t.TempDir()
	probe(plainUpper)
	plain := overlayRoot(t, root, plainUpper)

	// The hardened tree: /etc/systemd/system copied into the upper layer
	// as an opaque directory, so fix's atomic swap of the directory
	// (renameat2 RENAME_EXCHANGE) works on overlayfs, then fix --harden.
	hardUpper := t.TempDir()
	probe(hardUpper)
	sys := filepath.Join(hardUpper, "etc/systemd/system")
	require.NoError(t, os.MkdirAll(filepath.Dir(sys), 0o755))
	out, err := run(ctx, time.Minute, "cp", "-a", filepath.Join(root, "etc/systemd/system"), sys)
	require.NoError(t, err, out)
	require.NoError(t, unix.Setxattr(sys, "trusted.overlay.opaque", []byte("y"), 0))
	hardened := overlayRoot(t, root, hardUpper)
	var stdout, stderr bytes.Buffer
	code := Run(ctx, []string{"fix", hardened, "--harden", "--fail-on", "critical"}, &stdout, &stderr)
	require.Equal(t, ExitOK, code, "fix --harden: %s\n%s", stdout.String(), stderr.String())
	t.Logf("fix --harden:\n%s", stdout.String())
	phase("fix --harden wrote the drop-ins")

	catalog, err := rules.LoadHardening()
	require.NoError(t, err)
	var services []string
	entryOf := map[string]string{}
	for _, h := range catalog {
		for _, u := range h.Units {
			if _, err := os.Stat(filepath.Join(hardened, "etc/systemd/system", u+".d", rules.DropInName)); err == nil {
				if i, ok := instances[u]; ok {
					u = i
				}
				services = append(services, u)
				entryOf[u] = h.ID
			}
		}
	}
	sort.Strings(services)
	require.GreaterOrEqual(t, len(services), minServices, "fix --harden hardens at least %d services of the root", minServices)
	for tmpl, inst := range instances {
		require.Contains(t, services, inst, "fix --harden hardens %s through its template %s", inst, tmpl)
	}

	// systemd-analyze scores every hardened service lower.
	before, after := analyze(ctx, t, sd, plain, services), analyze(ctx, t, sd, hardened, services)
	var sum float64
	for _, s := range services {
		b, err1 := strconv.ParseFloat(before[s], 64)
		a, err2 := strconv.ParseFloat(after[s], 64)
		require.NoError(t, err1, "systemd-analyze scores %s: %v", s, before)
		require.NoError(t, err2, "systemd-analyze scores %s hardened: %v", s, after)
		t.Logf("systemd-analyze security %-28s %s → %s (%s)", s, before[s], after[s], entryOf[s])
		assert.Less(t, a, b, "%s is scored lower hardened", s)
		sum += b - a
	}
	avg := sum / float64(len(services))
	t.Logf("average reduction over %d services: %.2f", len(services), avg)
	assert.GreaterOrEqual(t, avg, 2.0, "the hardened services are scored lower by at least 2.0 on average")
	phase("systemd-analyze scored the services")

	p := bootRoot(ctx, t, plain, "plain", probes, services)
	phase("plain boot: " + p.state)
	h := bootRoot(ctx, t, hardened, "hardened", probes, services)
	phase("hardened boot: " + h.state)

	// Every unit the plain boot ran runs hardened; nothing fails that did
	// not; every hardened service reaches its plain state. Every
	// difference is logged, so a failure names its unit even when only
	// the end of the output survives.
	for _, u := range changed(p.units, h.units) {
		t.Logf("differs: %-40s plain %-20q hardened %q", u, p.units[u], h.units[u])
	}
	var lost []string
	for u, s := range p.units {
		if slices.Contains(onDemand, u) && !slices.Contains(services, u) {
			continue
		}
		if strings.HasPrefix(s, "active/") && !strings.HasPrefix(h.units[u], "active/") {
			lost = append(lost, fmt.Sprintf("%s: %s → %s", u, s, h.units[u]))
		}
	}
	sort.Strings(lost)
	assert.Empty(t, lost, "units active in the plain boot and not in the hardened one")
	var newlyFailed []string
	for _, u := range h.failed {
		if !slices.Contains(p.failed, u) {
			newlyFailed = append(newlyFailed, u)
		}
	}
	assert.Empty(t, newlyFailed, "units failed only in the hardened boot (plain failed: %v)", p.failed)
	// No process is killed by a system call filter that was not in the
	// plain boot: a sandbox that kills a worker the service outlives shows
	// only here.
	var newKills []string
	for _, k := range h.kills {
		if !slices.Contains(p.kills, k) {
			newKills = append(newKills, k)
		}
	}
	assert.Empty(t, newKills, "processes killed by a system call filter only in the hardened boot (plain: %v)", p.kills)
	for _, s := range services {
		t.Logf("%-28s plain %-20s hardened %s", s, p.units[s], h.units[s])
		assert.Equal(t, p.units[s], h.units[s], "%s reaches the state it reached without hardening (entry %s)", s, entryOf[s])
		// A sandbox that kills the service where it did not run before
		// (a system call its filter denies) shows as restarts, even when
		// the service ends up running.
		if assert.Contains(t, h.restarts, s, "systemd counts %s's restarts", s) {
			assert.LessOrEqual(t, h.restarts[s], p.restarts[s], "%s is restarted no more often hardened than plain (entry %s)", s, entryOf[s])
		}
	}
	for _, pr := range probes {
		// A probe that fails plain would prove nothing hardened: the
		// container must give every service what it needs.
		if assert.True(t, p.probes[pr.name], "probe %q passes in the plain boot", pr.name) {
			assert.True(t, h.probes[pr.name], "probe %q passes hardened as it does plain", pr.name)
		}
	}
	t.Logf("plain: %s, %d units, failed %v; hardened: %s, %d units, failed %v", p.state, len(p.units), p.failed, h.state, len(h.units), h.failed)
}

// TestContainerInit checks that the container's init is told from
// nspawn's short-lived outer child: of unshare's children only the one in
// the new PID namespace counts, and a child in ours never does.
func TestContainerInit(t *testing.T) {
	testenv.Root(t, "creating a PID namespace")
	testenv.Tool(t, "unshare", "util-linux")
	cmd := exec.Command("unshare", "--pid", "--fork", "sleep", "60")
	require.NoError(t, cmd.Start())
	var init int
	t.Cleanup(func() {
		if init > 0 {
			_ = syscall.Kill(init, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	require.Eventually(t, func() bool { init = containerInit(cmd.Process.Pid); return init > 0 },
		10*time.Second, 10*time.Millisecond, "unshare's child in the new PID namespace is found")
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", init))
	require.NoError(t, err)
	assert.Contains(t, []string{"unshare", "sleep"}, strings.TrimSpace(string(comm)), "the child forked into the namespace")
	assert.Zero(t, containerInit(os.Getpid()), "unshare itself runs in our PID namespace and is not taken for an init")
}

// TestStopContainer: a "container" whose nspawn ignores SIGTERM is
// killed whole, its init too, not left running without its nspawn.
func TestStopContainer(t *testing.T) {
	testenv.Root(t, "creating a PID namespace")
	testenv.Tool(t, "unshare", "util-linux")
	// An ignored signal stays ignored across exec: unshare ignores
	// SIGTERM, as an nspawn that cannot halt its container would.
	cmd := exec.Command("sh", "-c", `trap "" TERM; exec unshare --pid --fork sleep 120`)
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var init int
	require.Eventually(t, func() bool { init = containerInit(cmd.Process.Pid); return init > 0 },
		10*time.Second, 10*time.Millisecond)
	done := make(chan struct{})
	go func() { stopContainer(cmd, exited, 200*time.Millisecond); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("stopContainer did not return")
	}
	assert.Eventually(t, func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", init))
		return os.IsNotExist(err)
	}, 5*time.Second, 20*time.Millisecond, "the container's init %d is gone", init)
	if t.Failed() {
		_ = syscall.Kill(init, syscall.SIGKILL)
	}
}
