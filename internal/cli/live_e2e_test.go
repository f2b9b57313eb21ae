//go:build e2e

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/host/cgroup"
	"github.com/amilint/amilint/internal/host/live"
	"github.com/amilint/amilint/internal/systemd/bus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// e2eReport is the part of `amilint live -o json` the end-to-end test reads.
type e2eReport struct {
	Schema   string `json:"schema"`
	Findings []struct {
		RuleID string `json:"rule_id"`
		Unit   string `json:"unit"`
	} `json:"findings"`
	Live struct {
		Cgroups *struct {
			Memory struct {
				Version int `json:"version"`
				Tracked int `json:"tracked"`
				Present int `json:"present"`
				Zombies int `json:"zombies"`
			} `json:"memory"`
			Growth *struct {
				Zombies int `json:"zombies"`
			} `json:"growth"`
			Suspect string `json:"suspect"`
			Why     string `json:"why"`
		} `json:"cgroups"`
		Systemd struct {
			Units []struct {
				Name      string `json:"name"`
				FileState string `json:"file_state"`
				NRestarts uint32 `json:"n_restarts"`
			} `json:"units"`
			CrashLooping        []string `json:"crash_looping"`
			ContainerPerRestart []string `json:"container_per_restart"`
		} `json:"systemd"`
	} `json:"live"`
}

const crashloopUnit = `[Unit]
Description=A unit that fails at once and is restarted forever
StartLimitIntervalSec=0

[Service]
Restart=on-failure
RestartSec=1
ExecStart=/bin/false

[Install]
WantedBy=multi-user.target
`

// gaveupUnit crash-loops until systemd gives up: four failed starts
// within a minute hit its start limit and leave it failed (with
// Result=exit-code, the first failure's, in systemd 252).
const gaveupUnit = `[Unit]
Description=A unit that fails at once until its start limit is hit
StartLimitIntervalSec=60
StartLimitBurst=3

[Service]
Restart=always
RestartSec=200ms
ExecStart=/bin/false

[Install]
WantedBy=multi-user.target
`

// leakUnit is the incident in small: every start writes page cache (to
// the container's tmpfs) and fails, so every restart's memory cgroup is
// removed by systemd with pages still charged to it, a zombie memcg. While
// /run/leak.pause exists it waits instead, neither restarting nor leaking,
// so its restarts and the zombie growth can be made to move together.
// ("$$$$" is "$$" to the shell: systemd unescapes "$$".)
const leakUnit = `[Unit]
Description=Writes page cache and fails at once, restarted forever
StartLimitIntervalSec=0

[Service]
Restart=always
RestartSec=200ms
ExecStart=/bin/sh -c 'while [ -e /run/leak.pause ]; do sleep 0.1; done; head -c 256K /dev/zero > /var/tmp/leak.$$$$; exit 1'
`

// dockerStub satisfies ecs.service's Requires=docker.service without a Docker engine.
const dockerStub = `[Unit]
Description=Stand-in for the Docker engine

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/true
`

// ecsInit behaves as amazon-ecs-init does on a host that is no ECS
// cluster member: pre-start succeeds, start exits 1 (as in
// aws/amazon-ecs-agent#1309).
const ecsInit = `#!/bin/sh
case "$1" in
start) echo "Agent exited with code 1" >&2; exit 1 ;;
*) exit 0 ;;
esac
`

func writeFile(t *testing.T, name, data string, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(name), 0o755))
	require.NoError(t, os.WriteFile(name, []byte(data), mode))
}

// run runs a command bounded by timeout and returns its combined output.
func run(ctx context.Context, timeout time.Duration, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// stopContainer stops the container nspawn booted: SIGTERM asks nspawn to
// halt it, and one still there after grace is killed, its init first.
// Killing the init of a PID namespace kills every process in it, where
// killing nspawn alone would leave the container running, owned by no
// one, for the rest of the run.
func stopContainer(nspawn *exec.Cmd, exited <-chan error, grace time.Duration) {
	_ = nspawn.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		return
	case <-time.After(grace):
	}
	if pid := containerInit(nspawn.Process.Pid); pid > 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = nspawn.Process.Kill()
	<-exited
}

// containerInit finds the container's init among the children of the
// systemd-nspawn process ppid: the child in a PID namespace other than
// ours. nspawn first forks an outer child in our namespace, which sets up
// the mounts, clones the init and exits within milliseconds; entering
// that child's namespaces instead would fail once it is gone.
func containerInit(ppid int) int {
	self, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return 0
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parens.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(ppid) {
			continue
		}
		if ns, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err == nil && ns != self {
			return pid
		}
	}
	return 0
}

func restarts(ctx context.Context, initPID int, unit string) int {
	out, err := run(ctx, 10*time.Second, "nsenter", "-t", strconv.Itoa(initPID), "-a",
		"systemctl", "show", "-p", "NRestarts", "--value", unit)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return -1
	}
	return n
}

func checkReport(t *testing.T, how string, code int, out []byte) {
	t.Helper()
	var rep e2eReport
	require.NoError(t, json.Unmarshal(out, &rep), "%s: %s", how, out)
	assert.Equal(t, ExitFindings, code, how)
	s := rep.Live.Systemd
	assert.Greater(t, len(s.Units), 50, "%s: a booted Debian has many units", how)
	assert.Contains(t, s.CrashLooping, "crashloop.service", how)
	assert.Contains(t, s.CrashLooping, "ecs.service", how)
	assert.Equal(t, []string{"ecs.service"}, s.ContainerPerRestart, how)
	i := slices.IndexFunc(s.Units, func(u struct {
		Name      string `json:"name"`
		FileState string `json:"file_state"`
		NRestarts uint32 `json:"n_restarts"`
	}) bool {
		return u.Name == "ecs.service"
	})
	require.GreaterOrEqual(t, i, 0, how)
	assert.Equal(t, "enabled", s.Units[i].FileState, how)
	var got []string
	for _, f := range rep.Findings {
		got = append(got, f.RuleID+" "+f.Unit)
	}
	for _, want := range []string{"live-unit-crashloop crashloop.service", "live-unit-crashloop ecs.service", "live-unit-crashloop gaveup.service", "live-container-per-restart ecs.service",
		// The static rules, over the container's root, under their own ids.
		"ecs-agent-unconfigured ecs.service", "crash-loop-restart crashloop.service"} {
		assert.Contains(t, got, want, how)
	}
}

// TestE2ELive boots a real systemd in systemd-nspawn with a crash-looping
// unit and the vendor's enabled ecs.service, and audits it with
// `amilint live` both from inside the container (nsenter) and from the
// host through the container's bus socket. Then the incident itself: a
// unit whose every restart leaves a zombie memory cgroup, counted on the
// host's real cgroup v1 memory hierarchy and attributed to that unit, not
// to the crash-looping ecs.service, by one-shot audits and by the
// exporter's repeated ones; fix --live stops it and the zombies drain
// once its page cache is gone.
func TestE2ELive(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the end-to-end test needs root (overlayfs, systemd-nspawn, nsenter)")
	}
	began := time.Now()
	phase := func(name string) { t.Logf("%6.1fs %s", time.Since(began).Seconds(), name) }
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	repo, err := filepath.Abs("../..")
	require.NoError(t, err)
	root := os.Getenv("AMILINT_E2E_ROOT")
	if root == "" {
		root = filepath.Join(repo, ".cache", "live-root")
	}
	if _, err := os.Stat(filepath.Join(root, "lib/systemd/systemd")); err != nil {
		t.Fatalf("no Debian root with systemd at %s (make e2e-live debootstraps one): %v", root, err)
	}

	tmp := t.TempDir()
	upper, work, merged := filepath.Join(tmp, "upper"), filepath.Join(tmp, "work"), filepath.Join(tmp, "merged")
	for _, d := range []string{upper, work, merged} {
		require.NoError(t, os.MkdirAll(d, 0o755))
	}
	sys := filepath.Join(upper, "etc/systemd/system")
	ecs, err := os.ReadFile(filepath.Join(repo, "fixtures/trees/dlami/root/lib/systemd/system/ecs.service"))
	require.NoError(t, err)
	// usr/lib, not lib: on merged-/usr Debian, /lib is a symlink a directory
	// in the upper layer would hide.
	writeFile(t, filepath.Join(upper, "usr/lib/systemd/system/ecs.service"), string(ecs), 0o644)
	writeFile(t, filepath.Join(sys, "crashloop.service"), crashloopUnit, 0o644)
	writeFile(t, filepath.Join(sys, "gaveup.service"), gaveupUnit, 0o644)
	writeFile(t, filepath.Join(sys, "docker.service"), dockerStub, 0o644)
	writeFile(t, filepath.Join(sys, "leak.service"), leakUnit, 0o644)
	writeFile(t, filepath.Join(upper, "usr/libexec/amazon-ecs-init"), ecsInit, 0o755)
	wants := filepath.Join(sys, "multi-user.target.wants")
	require.NoError(t, os.MkdirAll(wants, 0o755))
	require.NoError(t, os.Symlink("/lib/systemd/system/ecs.service", filepath.Join(wants, "ecs.service")))
	require.NoError(t, os.Symlink("/etc/systemd/system/crashloop.service", filepath.Join(wants, "crashloop.service")))
	require.NoError(t, os.Symlink("/etc/systemd/system/gaveup.service", filepath.Join(wants, "gaveup.service")))

	// The binary run inside the container: AMILINT_E2E_BIN (make e2e-live
	// passes bin/amilint), or one built now.
	bin := filepath.Join(upper, "usr/local/bin/amilint")
	if src := os.Getenv("AMILINT_E2E_BIN"); src != "" {
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		writeFile(t, bin, string(b), 0o755)
	} else {
		build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/amilint")
		build.Dir = repo
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := build.CombinedOutput()
		require.NoError(t, err, "build a static amilint: %s", out)
	}
	phase("static amilint in place")

	require.NoError(t, unix.Mount("overlay", merged, "overlay", 0,
		fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", root, upper, work)))
	t.Cleanup(func() {
		if err := unix.Unmount(merged, 0); err != nil {
			_ = unix.Unmount(merged, unix.MNT_DETACH)
		}
	})

	// The container runs in cgroups of its own, removed afterwards: in the
	// memory hierarchy its systemd's cgroups (a cgroup namespace rooted
	// there), in the unified and name=systemd ones nspawn's payload and
	// supervisor cgroups.
	require.FileExists(t, "/sys/fs/cgroup/memory/cgroup.procs", "the test needs the cgroup v1 memory hierarchy")
	baseline := hostMemcg(t)
	cgName := fmt.Sprintf("amilint-e2e-%d", os.Getpid())
	memDir := filepath.Join("/sys/fs/cgroup/memory", cgName)
	var cgDirs []string
	for _, h := range []string{"/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd"} {
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err != nil {
			continue
		}
		d := filepath.Join(h, cgName)
		require.NoError(t, os.Mkdir(d, 0o755))
		cgDirs = append(cgDirs, d)
	}
	// Runs after the container is stopped (cleanups run last first).
	t.Cleanup(func() { removeCgroups(t, cgDirs, baseline) })

	console, err := os.Create(filepath.Join(tmp, "console.log"))
	require.NoError(t, err)
	defer console.Close()
	nspawn := exec.Command("sh", "-c", `for d in $AMILINT_E2E_CGROUPS; do echo $$ > "$d/cgroup.procs" || exit 1; done; exec "$@"`, "sh",
		"systemd-nspawn", "-D", merged, "-b", "--register=no", "--keep-unit", "--volatile=overlay", "--console=pipe")
	nspawn.Env = append(os.Environ(), "AMILINT_E2E_CGROUPS="+strings.Join(cgDirs, " "))
	nspawn.Stdout, nspawn.Stderr = console, console
	nspawn.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	require.NoError(t, nspawn.Start())
	exited := make(chan error, 1)
	go func() { exited <- nspawn.Wait() }()
	t.Cleanup(func() {
		stopContainer(nspawn, exited, 30*time.Second)
		if t.Failed() {
			b, _ := os.ReadFile(console.Name())
			t.Logf("container console (tail):\n%s", tail(string(b), 3000))
		}
	})

	var initPID int
	require.Eventually(t, func() bool { initPID = containerInit(nspawn.Process.Pid); return initPID > 0 },
		30*time.Second, 100*time.Millisecond, "the container's init appears")
	// is-system-running --wait answers "offline" until the bus is up.
	// The last answer; the condition may still run when Eventually gives up.
	var last atomic.Value
	last.Store("")
	if !assert.Eventually(t, func() bool {
		out, _ := run(ctx, 90*time.Second, "nsenter", "-t", strconv.Itoa(initPID), "-a",
			"systemctl", "is-system-running", "--wait")
		state := strings.TrimSpace(out)
		last.Store(state)
		return state == "running" || state == "degraded"
	}, 240*time.Second, 500*time.Millisecond, "systemd finishes booting") {
		// What the boot waits on: the console shows little once journald
		// runs, so ask the container's systemd.
		for _, args := range [][]string{
			{"systemctl", "list-jobs", "--no-pager"},
			{"systemctl", "--failed", "--no-pager"},
			{"journalctl", "-b", "--no-pager", "-n", "80"},
		} {
			out, err := run(ctx, 20*time.Second, "nsenter", append([]string{"-t", strconv.Itoa(initPID), "-a"}, args...)...)
			t.Logf("in the container (last state %q), %s (%v):\n%s", last.Load(), strings.Join(args, " "), err, tail(out, 6000))
		}
		t.FailNow()
	}
	state := last.Load().(string)
	phase("booted: " + state)

	inside := func(args ...string) (int, string) {
		out, err := run(ctx, 2*time.Minute, "nsenter", append([]string{"-t", strconv.Itoa(initPID), "-a"}, args...)...)
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			require.NoError(t, err, out)
		}
		return code, out
	}
	// nspawn mounts the cgroup v1 controller hierarchies read-only, and
	// systemd uses only the controllers it can write when it starts: make
	// the memory hierarchy writable and re-execute systemd, which then
	// gives every unit a memory cgroup, as on a host (DefaultMemoryAccounting
	// is on in systemd 252).
	code, out := inside("mount", "-o", "remount,bind,rw", "/sys/fs/cgroup/memory")
	require.Zero(t, code, out)
	code, out = inside("systemctl", "daemon-reexec")
	require.Zero(t, code, out)
	require.Eventually(t, func() bool {
		out, _ := run(ctx, 90*time.Second, "nsenter", "-t", strconv.Itoa(initPID), "-a",
			"systemctl", "is-system-running", "--wait")
		state = strings.TrimSpace(out)
		return state == "running" || state == "degraded"
	}, 120*time.Second, 500*time.Millisecond, "systemd is back after daemon-reexec")
	require.DirExists(t, filepath.Join(memDir, "system.slice", "systemd-journald.service"), "the container's services have memory cgroups")
	phase("systemd re-executed with the memory controller: " + state)

	// Wait, bounded, until both units have been restarted at least as often
	// as the default crash-loop threshold, so the audit does not depend on
	// the instant it samples them.
	require.Eventually(t, func() bool {
		return restarts(ctx, initPID, "crashloop.service") >= 3 && restarts(ctx, initPID, "ecs.service") >= 3
	}, 90*time.Second, 500*time.Millisecond, "both units crash-loop")
	if !assert.Eventually(t, func() bool {
		out, err := run(ctx, 10*time.Second, "nsenter", "-t", strconv.Itoa(initPID), "-a",
			"systemctl", "show", "-p", "ActiveState", "--value", "gaveup.service")
		return err == nil && strings.TrimSpace(out) == "failed"
	}, 30*time.Second, 500*time.Millisecond, "gaveup.service hits its start limit") {
		out, _ := run(ctx, 10*time.Second, "nsenter", "-t", strconv.Itoa(initPID), "-a",
			"systemctl", "status", "--no-pager", "gaveup.service")
		t.Fatalf("systemctl status gaveup.service:\n%s", out)
	}
	phase("both units restarted 3 times, gaveup.service hit its start limit")

	// Inside the container: the static binary talks to the real PID 1 over
	// the system bus.
	cmd := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(initPID), "-a",
		"/usr/local/bin/amilint", "live", "-o", "json", "--collect", "systemd", "--sample", "2s")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code = 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	require.NotEqual(t, ExitError, code, "stderr: %s", stderr.String())
	checkReport(t, "inside via nsenter", code, stdout.Bytes())
	phase("audited from inside (nsenter)")

	// From the host: through the container's bus socket.
	socket := fmt.Sprintf("/proc/%d/root/run/dbus/system_bus_socket", initPID)
	var hout, herr bytes.Buffer
	c0, w0 := cpuTime(), time.Now()
	croot := fmt.Sprintf("/proc/%d/root", initPID)
	code = Run(ctx, []string{"live", "-o", "json", "--collect", "systemd", "--bus", socket, "--root", croot, "--sample", "2s"}, &hout, &herr)
	t.Logf("host-side audit of the systemd collector (2 s sample, two snapshots): wall %s, CPU %s",
		time.Since(w0).Round(time.Millisecond), (cpuTime() - c0).Round(time.Millisecond))
	require.NotEqual(t, ExitError, code, "stderr: %s", herr.String())
	checkReport(t, "host via the bus socket", code, hout.Bytes())
	phase("audited from the host (bus socket)")

	// The exporter's steady cost for systemd: one snapshot per audit on a
	// kept connection.
	c0 = cpuTime()
	time.Sleep(5 * time.Second)
	idle := (cpuTime() - c0) * 3
	t.Logf("idle (no connection): CPU %s per 15 s", idle.Round(time.Millisecond))
	aud, err := live.NewAuditor(live.Options{Bus: socket, Sample: time.Second, Collect: []string{live.CollectSystemd}})
	require.NoError(t, err)
	_, err = aud.Audit(ctx)
	require.NoError(t, err)
	const steady = 5
	c0, w0 = cpuTime(), time.Now()
	for range steady {
		f, err := aud.Audit(ctx)
		require.NoError(t, err)
		assert.Contains(t, f.Systemd.CrashLooping, "crashloop.service")
	}
	perAudit := (cpuTime() - c0) / steady
	t.Logf("steady systemd audit (kept connection, one snapshot): wall %s, CPU %s per audit = %.2f%% of a core at 15 s",
		(time.Since(w0) / steady).Round(time.Millisecond), perAudit.Round(time.Millisecond), 100*perAudit.Seconds()/15)
	// The kept connection caches service properties until a signal says a
	// unit changed: the crash loop's NRestarts growth must still show
	// between two snapshots.
	grew := false
	for range 60 {
		f, err := aud.Audit(ctx)
		require.NoError(t, err)
		i := slices.IndexFunc(f.Systemd.Units, func(u bus.Unit) bool { return u.Name == "crashloop.service" })
		if grew = i >= 0 && f.Systemd.Units[i].CrashLoop != nil && f.Systemd.Units[i].CrashLoop.Growth > 0; grew {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	assert.True(t, grew, "NRestarts growth of crashloop.service between snapshots of a kept connection")
	// Between audits the kept connection handles the manager's signals (two
	// units crash-loop here, a restart a second each).
	c0 = cpuTime()
	time.Sleep(5 * time.Second)
	t.Logf("between audits (kept connection, signals of 2 crash-looping units): CPU %s per 15 s",
		((cpuTime() - c0) * 3).Round(time.Millisecond))
	aud.Close()

	// The same through the policies: static facts of the container's root
	// (cached), one snapshot, the overlay and the policy evaluation.
	host, err := live.NewHost(ctx, live.Options{Bus: socket, Root: fmt.Sprintf("/proc/%d/root", initPID), Sample: time.Second,
		Collect: []string{live.CollectSystemd}}, audit.Config{}, "container")
	require.NoError(t, err)
	c0, w0 = cpuTime(), time.Now()
	_, _, err = host.Audit(ctx)
	require.NoError(t, err)
	t.Logf("first policy audit (static facts of the root, two snapshots 1 s apart, policies): wall %s, CPU %s",
		time.Since(w0).Round(time.Millisecond), (cpuTime() - c0).Round(time.Millisecond))
	c0, w0 = cpuTime(), time.Now()
	for range steady {
		_, fs, err := host.Audit(ctx)
		require.NoError(t, err)
		assert.True(t, slices.ContainsFunc(fs, func(f finding.Finding) bool {
			return f.RuleID == live.RuleUnitCrashLoop && f.Unit == "crashloop.service"
		}))
	}
	perAudit = (cpuTime() - c0) / steady
	t.Logf("steady policy audit (static facts cached, one snapshot, policies): wall %s, CPU %s per audit = %.2f%% of a core at 15 s",
		(time.Since(w0) / steady).Round(time.Millisecond), perAudit.Round(time.Millisecond), 100*perAudit.Seconds()/15)
	host.Close()

	var text bytes.Buffer
	Run(ctx, []string{"live", "--collect", "systemd", "--bus", socket, "--root", croot, "--sample", "1s"}, &text, &herr)
	t.Logf("amilint live (text):\n%s", text.String())

	zombies := checkZombies(ctx, t, initPID, socket, croot, phase)

	// fix --live, inside the container, against its real PID 1.
	unitState := func(unit string) (string, string) {
		_, enabled := inside("systemctl", "is-enabled", unit)
		_, active := inside("systemctl", "is-active", unit)
		return strings.TrimSpace(enabled), strings.TrimSpace(active)
	}
	code, out = inside("/usr/local/bin/amilint", "fix", "--live", "--dry-run", "--collect", "systemd", "--sample", "1s")
	t.Logf("amilint fix --live --dry-run (exit %d):\n%s", code, out)
	require.NotEqual(t, ExitError, code, out)
	assert.Contains(t, out, "would change (dry run)")
	assert.Contains(t, out, "disable ecs.service")
	assert.Contains(t, out, "stop ecs.service")
	en, act := unitState("ecs.service")
	assert.Equal(t, "enabled", en, "a dry run changes nothing")
	assert.NotEqual(t, "inactive", act, "a dry run changes nothing")
	phase("fix --live --dry-run")

	code, out = inside("/usr/local/bin/amilint", "fix", "--live", "--collect", "systemd", "--sample", "1s")
	t.Logf("amilint fix --live (exit %d):\n%s", code, out)
	require.NotEqual(t, ExitError, code, out)
	assert.Contains(t, out, "disable ecs.service: removed /etc/systemd/system/multi-user.target.wants/ecs.service")
	assert.Contains(t, out, "stop ecs.service: stopped")
	// A unit systemd gave up on is not running, so not stopped: it is
	// disabled and its failed state reset, as after systemctl reset-failed.
	assert.Contains(t, out, "disable gaveup.service: removed /etc/systemd/system/multi-user.target.wants/gaveup.service")
	assert.Contains(t, out, "reset-failed gaveup.service: cleared its failed state")
	assert.NotContains(t, out, "stop gaveup.service")
	assert.Contains(t, out, "stop leak.service: stopped", "the leaking unit crash-loops: stopped too")
	assert.Contains(t, out, "reminder: a reboot is what purges the zombie memory cgroups already leaked")
	en, act = unitState("ecs.service")
	assert.Equal(t, "disabled", en, "systemctl is-enabled inside")
	assert.Equal(t, "inactive", act, "systemctl is-active inside")
	en, act = unitState("crashloop.service")
	assert.Equal(t, "disabled", en, "live-unit-crashloop is high: disabled too")
	assert.Equal(t, "inactive", act)
	phase("fix --live")
	checkDrain(ctx, t, initPID, zombies)
	phase("the leaked zombies drained")

	// A re-audit, from inside, no longer reports ecs.service.
	cmd = exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(initPID), "-a",
		"/usr/local/bin/amilint", "live", "-o", "json", "--collect", "systemd", "--sample", "2s")
	stdout.Reset()
	stderr.Reset()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if !errors.As(err, &ee) {
		require.NoError(t, err)
	}
	var again e2eReport
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &again), "stderr: %s", stderr.String())
	for _, f := range again.Findings {
		assert.NotEqual(t, "ecs.service", f.Unit, "re-audit still reports %s", f.RuleID)
		assert.NotEqual(t, "crashloop.service", f.Unit, "re-audit still reports %s", f.RuleID)
		assert.NotEqual(t, "gaveup.service", f.Unit, "re-audit still reports %s", f.RuleID)
		assert.NotEqual(t, "leak.service", f.Unit, "re-audit still reports %s", f.RuleID)
	}
	assert.NotContains(t, again.Live.Systemd.CrashLooping, "ecs.service")
	phase("re-audit after fix --live")
}

// cpuTime is this process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// hostMemcg is the host's memory cgroup count, read as `amilint live`
// reads it.
func hostMemcg(t *testing.T) cgroup.Memory {
	t.Helper()
	h, err := cgroup.NewReader("/").Read()
	require.NoError(t, err)
	require.NotNil(t, h.Memory, "no memory controller")
	return *h.Memory
}

// amilintInside runs amilint in the container and returns its exit code,
// stdout and stderr.
func amilintInside(ctx context.Context, t *testing.T, initPID int, args ...string) (int, []byte, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"-t", strconv.Itoa(initPID), "-a", "/usr/local/bin/amilint"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), stdout.Bytes(), stderr.String()
	}
	require.NoError(t, err)
	return 0, stdout.Bytes(), stderr.String()
}

// checkLeakReport checks that a one-shot `amilint live -o json` counted
// the zombie memory cgroups leak.service leaves and named it.
func checkLeakReport(t *testing.T, how string, code int, out []byte, threshold int) {
	t.Helper()
	var rep e2eReport
	require.NoError(t, json.Unmarshal(out, &rep), "%s: %s", how, out)
	assert.Equal(t, ExitFindings, code, how)
	c := rep.Live.Cgroups
	require.NotNil(t, c, "%s: no cgroups section", how)
	require.NotNil(t, c.Growth, how)
	t.Logf("%s: memcg v%d tracked %d, present %d, zombies %d (%+d over the sample); suspect %s: %s",
		how, c.Memory.Version, c.Memory.Tracked, c.Memory.Present, c.Memory.Zombies, c.Growth.Zombies, c.Suspect, c.Why)
	assert.Equal(t, 1, c.Memory.Version, how)
	assert.Positive(t, c.Growth.Zombies, "%s: the zombies grow during the sample", how)
	assert.GreaterOrEqual(t, c.Memory.Zombies, threshold, how)
	assert.Equal(t, "leak.service", c.Suspect, "%s: %s", how, c.Why)
	var got []string
	for _, f := range rep.Findings {
		got = append(got, f.RuleID+" "+f.Unit)
	}
	assert.Contains(t, got, "live-memcg-zombies leak.service", how)
}

// checkZombies starts leak.service and proves that amilint live counts
// the zombie memory cgroups its restarts leave and names it: one-shot
// audits from inside the container and from the host through its bus,
// then the exporter's repeated audits (attribution by correlation) and a
// scrape of a real `live --serve`. It returns the host's zombie count
// before the leak.
func checkZombies(ctx context.Context, t *testing.T, initPID int, socket, croot string, phase func(string)) int {
	before := hostMemcg(t)
	out, err := run(ctx, 30*time.Second, "nsenter", "-t", strconv.Itoa(initPID), "-a", "systemctl", "start", "--no-block", "leak.service")
	require.NoError(t, err, out)
	// Bounded wait for a clear leak, counted on the host.
	require.Eventually(t, func() bool { return hostMemcg(t).Zombies >= before.Zombies+12 }, 60*time.Second, 500*time.Millisecond,
		"leak.service's restarts leave zombie memory cgroups (host zombies were %d)", before.Zombies)
	now := hostMemcg(t)
	t.Logf("host memcg: tracked %d, present %d, zombies %d before leak.service; now tracked %d, present %d, zombies %d after %d restarts",
		before.Tracked, before.Present, before.Zombies, now.Tracked, now.Present, now.Zombies, restarts(ctx, initPID, "leak.service"))
	phase("leak.service leaks zombie memory cgroups")
	// The container sees every memory cgroup the kernel tracks but only its
	// own directories, so it counts at least the host's zombies.
	threshold := before.Zombies + 8
	live1 := []string{"live", "-o", "json", "--collect", "cgroup,systemd", "--sample", "2s", "--zombie-threshold", strconv.Itoa(threshold)}

	code, stdout, stderr := amilintInside(ctx, t, initPID, live1...)
	require.NotEqual(t, ExitError, code, "stderr: %s", stderr)
	checkLeakReport(t, "inside via nsenter", code, stdout, threshold)
	phase("zombies counted and attributed from inside (nsenter)")

	fromHost := []string{"--bus", socket, "--root", croot, "--mountinfo", "proc/1/mountinfo"}
	var hout, herr bytes.Buffer
	code = Run(ctx, append(live1, fromHost...), &hout, &herr)
	require.NotEqual(t, ExitError, code, "stderr: %s", herr.String())
	checkLeakReport(t, "host via the bus socket", code, hout.Bytes(), threshold)
	phase("zombies counted and attributed from the host (bus socket)")

	// A real exporter, `live --serve` on loopback, audits every second
	// while the Host below audits every two: both see the leak paused and
	// resumed.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	sctx, stop := context.WithCancel(ctx)
	served := make(chan int, 1)
	var sout, serr bytes.Buffer
	go func() {
		served <- Run(sctx, append([]string{"live", "--serve", addr, "--interval", "1s", "--collect", "cgroup,systemd", "--sample", "1s",
			"--zombie-threshold", strconv.Itoa(threshold)}, fromHost...), &sout, &serr)
	}()
	defer func() {
		stop()
		select {
		case code := <-served:
			assert.Equal(t, ExitOK, code, "live --serve: %s", serr.String())
		case <-time.After(10 * time.Second):
			t.Error("live --serve did not stop")
		}
	}()
	// The exporter audits again and again on one Host: pausing the leak in
	// every other interval makes its restarts and the zombie growth move
	// together, and the attribution is by correlation.
	host, err := live.NewHost(ctx, live.Options{Bus: socket, Root: croot, MountInfo: "proc/1/mountinfo", Sample: time.Second,
		Collect: []string{live.CollectCgroup, live.CollectSystemd}, ZombieThreshold: threshold}, audit.Config{}, "container")
	require.NoError(t, err)
	defer host.Close()
	pause := filepath.Join(croot, "run/leak.pause")
	defer os.Remove(pause)
	const audits = 6
	var doc *live.Document
	var fs []finding.Finding
	for i := range audits {
		if i > 0 {
			if i%2 == 1 {
				require.NoError(t, os.WriteFile(pause, nil, 0o644))
			} else {
				require.NoError(t, os.Remove(pause))
			}
			require.NoError(t, sleepCtx(ctx, 2*time.Second))
		}
		doc, fs, err = host.Audit(ctx)
		require.NoError(t, err)
		c := doc.Live.Cgroups
		require.NotNil(t, c.Growth)
		grew := uint32(0)
		if j := slices.IndexFunc(doc.Live.Systemd.Units, func(u bus.Unit) bool { return u.Name == "leak.service" }); j >= 0 && doc.Live.Systemd.Units[j].CrashLoop != nil {
			grew = doc.Live.Systemd.Units[j].CrashLoop.Growth
		}
		t.Logf("exporter audit %d (leak paused: %v): zombies %d (%+d), leak.service restarted %d times; suspect %s: %s",
			i, i%2 == 1, c.Memory.Zombies, c.Growth.Zombies, grew, c.Suspect, c.Why)
	}
	require.NoError(t, os.Remove(pause))
	c := doc.Live.Cgroups
	assert.Equal(t, "leak.service", c.Suspect, c.Why)
	assert.Contains(t, c.Why, fmt.Sprintf("its restarts track the zombie growth over the last %d audits", audits))
	assert.True(t, slices.ContainsFunc(fs, func(f finding.Finding) bool {
		return f.RuleID == "live-memcg-zombies" && f.Unit == "leak.service" && strings.Contains(f.Message, "track the zombie growth")
	}), "the exporter's live-memcg-zombies finding names leak.service by correlation")
	phase("exporter audits attribute the zombies by correlation")

	// The exporter's attribution is statistical over its own one-second
	// audits, whose phase against the pauses above drifts on a loaded
	// machine: the suspect it exports must become the leaking unit while
	// the leak runs, within 30 s (the last scrape is what is checked).
	var families map[string]*dto.MetricFamily
	require.Eventually(t, func() bool {
		families = scrape(ctx, "http://"+addr+"/metrics")
		if families["amilint_findings"] == nil || families["amilint_memcg_zombies"] == nil || families["amilint_memcg_leak_suspect"] == nil {
			return false
		}
		return slices.Equal(leakSuspects(families), []string{"leak.service"})
	}, 30*time.Second, 500*time.Millisecond, "live --serve exports an audit: %s", serr.String())
	z := families["amilint_memcg_zombies"].GetMetric()[0].GetGauge().GetValue()
	t.Logf("scraped amilint_memcg_zombies %v", z)
	assert.GreaterOrEqual(t, z, float64(threshold))
	found := false
	for _, m := range families["amilint_findings"].GetMetric() {
		for _, l := range m.GetLabel() {
			found = found || (l.GetName() == "rule_id" && l.GetValue() == "live-memcg-zombies")
		}
	}
	assert.True(t, found, "amilint_findings{rule_id=\"live-memcg-zombies\"} is exported")
	assert.Equal(t, []string{"leak.service"}, leakSuspects(families), "amilint_memcg_leak_suspect names the leaking unit")
	phase("live --serve scraped")
	return before.Zombies
}

// leakSuspects returns the units amilint_memcg_leak_suspect names.
func leakSuspects(families map[string]*dto.MetricFamily) []string {
	var suspects []string
	for _, m := range families["amilint_memcg_leak_suspect"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "unit" {
				suspects = append(suspects, l.GetValue())
			}
		}
	}
	return suspects
}

// scrape fetches and parses a Prometheus text exposition; nil on any error.
func scrape(ctx context.Context, url string) map[string]*dto.MetricFamily {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil
	}
	return fams
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// checkDrain deletes the files leak.service left and checks that its
// zombie memory cgroups drain: nothing but those pages held them.
func checkDrain(ctx context.Context, t *testing.T, initPID int, beforeLeak int) {
	files, err := filepath.Glob(fmt.Sprintf("/proc/%d/root/var/tmp/leak.*", initPID))
	require.NoError(t, err)
	leaked := hostMemcg(t).Zombies
	for _, f := range files {
		require.NoError(t, os.Remove(f))
	}
	var now int
	ok := assert.Eventually(t, func() bool {
		now = hostMemcg(t).Zombies
		return now-beforeLeak <= (leaked-beforeLeak)/5
	}, 15*time.Second, 200*time.Millisecond, "the zombies drain once the leaked files are gone")
	t.Logf("host zombies: %d before the leak, %d with %d leaked files, %d after deleting them (drained: %v)",
		beforeLeak, leaked, len(files), now, ok)
}

// removeCgroups removes the test's cgroups, deepest first, once the
// container is gone: in the memory hierarchy each is emptied of charged
// pages first (memory.force_empty), so none lingers as a zombie. It
// drops the page cache if the container's memory cgroups still do not
// drain (pages of the root's files read by its services).
func removeCgroups(t *testing.T, dirs []string, baseline cgroup.Memory) {
	for _, top := range dirs {
		var all []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				all = append(all, p)
			}
			return nil
		})
		for i := len(all) - 1; i >= 0; i-- {
			_ = os.WriteFile(filepath.Join(all[i], "memory.force_empty"), []byte("0"), 0)
			var err error
			for range 50 {
				if err = os.Remove(all[i]); err == nil || errors.Is(err, os.ErrNotExist) {
					err = nil
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			assert.NoError(t, err, "remove cgroup %s", all[i])
		}
	}
	drained := func() bool { return hostMemcg(t).Tracked <= baseline.Tracked }
	how := "force_empty"
	if !waitFor(5*time.Second, drained) {
		how = "drop_caches"
		unix.Sync()
		_ = os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0)
		waitFor(5*time.Second, drained)
	}
	m := hostMemcg(t)
	t.Logf("after the container: host memcg tracked %d, present %d, zombies %d (before it: tracked %d, zombies %d; drained by %s)",
		m.Tracked, m.Present, m.Zombies, baseline.Tracked, baseline.Zombies, how)
}

func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}
