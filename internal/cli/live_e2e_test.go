//go:build e2e

package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/finding"
	"github.com/amilint/amilint/internal/live"
	"github.com/amilint/amilint/internal/sdbus"
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

// childOf finds the process whose parent is ppid (the container's init).
func childOf(ppid int) int {
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
		if len(f) > 1 && f[1] == strconv.Itoa(ppid) {
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
// host through the container's bus socket.
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

	console, err := os.Create(filepath.Join(tmp, "console.log"))
	require.NoError(t, err)
	defer console.Close()
	nspawn := exec.Command("systemd-nspawn", "-D", merged, "-b", "--register=no", "--keep-unit",
		"--volatile=overlay", "--console=pipe")
	nspawn.Stdout, nspawn.Stderr = console, console
	nspawn.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	require.NoError(t, nspawn.Start())
	exited := make(chan error, 1)
	go func() { exited <- nspawn.Wait() }()
	t.Cleanup(func() {
		// SIGTERM asks nspawn to halt the container; SIGKILL if it will not.
		_ = nspawn.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = nspawn.Process.Kill()
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(console.Name())
			t.Logf("container console (tail):\n%s", tail(string(b), 3000))
		}
	})

	var initPID int
	require.Eventually(t, func() bool { initPID = childOf(nspawn.Process.Pid); return initPID > 0 },
		30*time.Second, 100*time.Millisecond, "the container's init appears")
	// is-system-running --wait answers "offline" until the bus is up.
	var state string
	require.Eventually(t, func() bool {
		out, _ := run(ctx, 90*time.Second, "nsenter", "-t", strconv.Itoa(initPID), "-a",
			"systemctl", "is-system-running", "--wait")
		state = strings.TrimSpace(out)
		return state == "running" || state == "degraded"
	}, 240*time.Second, 500*time.Millisecond, "systemd finishes booting")
	phase("booted: " + state)

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
	code := 0
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
		i := slices.IndexFunc(f.Systemd.Units, func(u sdbus.Unit) bool { return u.Name == "crashloop.service" })
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

	// fix --live, inside the container, against its real PID 1.
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
	unitState := func(unit string) (string, string) {
		_, enabled := inside("systemctl", "is-enabled", unit)
		_, active := inside("systemctl", "is-active", unit)
		return strings.TrimSpace(enabled), strings.TrimSpace(active)
	}
	code, out := inside("/usr/local/bin/amilint", "fix", "--live", "--dry-run", "--collect", "systemd", "--sample", "1s")
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
	assert.Contains(t, out, "reminder: a reboot is what purges the zombie memory cgroups already leaked")
	en, act = unitState("ecs.service")
	assert.Equal(t, "disabled", en, "systemctl is-enabled inside")
	assert.Equal(t, "inactive", act, "systemctl is-active inside")
	en, act = unitState("crashloop.service")
	assert.Equal(t, "disabled", en, "live-unit-crashloop is high: disabled too")
	assert.Equal(t, "inactive", act)
	phase("fix --live")

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
