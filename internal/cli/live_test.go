package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amilint/amilint/internal/host/cgroup/cgrouptest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type liveOut struct {
	Schema   string `json:"schema"`
	Findings []struct {
		RuleID   string `json:"rule_id"`
		Severity string `json:"severity"`
	} `json:"findings"`
	Live struct {
		Cgroups struct {
			Memory struct {
				Zombies int `json:"zombies"`
				Tracked int `json:"tracked"`
				Present int `json:"present"`
			} `json:"memory"`
		} `json:"cgroups"`
	} `json:"live"`
}

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	code := Run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

func liveJSON(t *testing.T, args ...string) (int, liveOut) {
	t.Helper()
	code, out, stderr := runCLI(t, append([]string{"live", "-o", "json", "--collect", "cgroup", "--sample", "50ms"}, args...)...)
	var doc liveOut
	require.NoError(t, json.Unmarshal([]byte(out), &doc), "stdout %q stderr %q", out, stderr)
	require.Equal(t, "amilint/v1", doc.Schema)
	return code, doc
}

// TestLiveCountsRealZombies makes real zombie memory cgroups and checks
// `amilint live` counts them and reports them above the threshold.
func TestLiveCountsRealZombies(t *testing.T) {
	cgrouptest.Exclusive(t) // the count is the machine's
	const n = 30
	code, before := liveJSON(t, "--zombie-threshold", "1000000")
	require.Equal(t, ExitOK, code)

	z := cgrouptest.MakeWithProcesses(t, n, 64<<10)
	threshold := before.Live.Cgroups.Memory.Zombies + n/2
	code, after := liveJSON(t, "--zombie-threshold", strconv.Itoa(threshold))
	grew := after.Live.Cgroups.Memory.Zombies - before.Live.Cgroups.Memory.Zombies
	t.Logf("amilint live: zombies %d -> %d", before.Live.Cgroups.Memory.Zombies, after.Live.Cgroups.Memory.Zombies)
	assert.GreaterOrEqual(t, grew, n-n/10)
	assert.LessOrEqual(t, grew, n+n/2)
	assert.Equal(t, ExitFindings, code)
	require.NotEmpty(t, after.Findings)
	assert.Equal(t, "live-memcg-zombies", after.Findings[0].RuleID)
	assert.Equal(t, "high", after.Findings[0].Severity)

	code, line, _ := runCLI(t, "live", "--npd", "--collect", "cgroup", "--sample", "10ms", "--zombie-threshold", strconv.Itoa(threshold))
	assert.Equal(t, 1, code, "npd: problem")
	assert.True(t, strings.HasPrefix(line, "live-memcg-zombies: "), line)
	assert.Equal(t, 1, strings.Count(line, "\n"))

	require.NoError(t, z.Drain(time.Minute))
	code, line, _ = runCLI(t, "live", "--npd", "--collect", "cgroup", "--sample", "10ms", "--zombie-threshold", "1000000")
	assert.Equal(t, 0, code, "npd: OK")
	assert.Equal(t, "amilint: no live problem\n", line)
}

func TestLiveText(t *testing.T) {
	// The exit code is the host's: a test run that keeps both cores busy
	// makes live-irq-core-saturated (high) fire, rightly, for the core
	// serving the NIC's interrupts. Only a critical finding, which this
	// host does not have, fails the run here.
	code, out, stderr := runCLI(t, "live", "--collect", "cgroup,cpu", "--sample", "50ms", "--zombie-threshold", "1000000", "--fail-on", "critical")
	assert.Equal(t, ExitOK, code, "%s\n%s", out, stderr)
	assert.Contains(t, out, "memcg")
	assert.Contains(t, out, "tracked")
	// This machine's own root is audited too: its findings are its own.
	assert.Regexp(t, `\n\d+ findings`, out)
}

// hostRoot is a host root for live tests: the vendor's ecs.service
// enabled with no /etc/ecs/ecs.config, and this machine's /proc and /sys
// linked in for the collectors.
func hostRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	ecs, err := os.ReadFile("../../fixtures/trees/dlami/root/lib/systemd/system/ecs.service")
	require.NoError(t, err)
	files := map[string]string{
		"etc/os-release":                       "ID=debian\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n",
		"etc/machine-id":                       "0123456789abcdef0123456789abcdef\n",
		"lib/systemd/system/default.target":    "[Unit]\nRequires=multi-user.target\n",
		"lib/systemd/system/multi-user.target": "[Unit]\nDescription=Multi-User\n",
		"lib/systemd/system/ecs.service":       string(ecs),
	}
	for name, body := range files {
		require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte(body), 0o644))
	}
	wants := filepath.Join(root, "etc/systemd/system/multi-user.target.wants")
	require.NoError(t, os.MkdirAll(wants, 0o755))
	require.NoError(t, os.Symlink("/lib/systemd/system/ecs.service", filepath.Join(wants, "ecs.service")))
	require.NoError(t, os.Symlink("/proc", filepath.Join(root, "proc")))
	require.NoError(t, os.Symlink("/sys", filepath.Join(root, "sys")))
	return root
}

// TestLiveStaticRulesApply audits a host root whose unit files enable
// ecs.service: the static rule fires on the live host under its own id,
// in every output format, with scan's exit codes.
func TestLiveStaticRulesApply(t *testing.T) {
	root := hostRoot(t)
	args := []string{"live", "--root", root, "--collect", "cgroup", "--sample", "20ms", "--zombie-threshold", "1000000"}

	code, out, stderr := runCLI(t, append(args, "-o", "json")...)
	require.Equal(t, ExitFindings, code, stderr)
	var doc struct {
		Target struct{ Name, Kind, OS string }
		liveOut
		Findings []struct {
			RuleID string `json:"rule_id"`
			Unit   string `json:"unit"`
			Chain  []struct{ From, To string }
		} `json:"findings"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	assert.Equal(t, "live", doc.Target.Kind)
	assert.Equal(t, "Debian GNU/Linux 12 (bookworm)", doc.Target.OS)
	var got []string
	for _, f := range doc.Findings {
		got = append(got, f.RuleID+" "+f.Unit)
		if f.RuleID == "ecs-agent-unconfigured" {
			require.NotEmpty(t, f.Chain)
			assert.Equal(t, "ecs.service", f.Chain[len(f.Chain)-1].To)
		}
	}
	assert.Contains(t, got, "ecs-agent-unconfigured ecs.service")
	assert.Contains(t, got, "crash-loop-restart ecs.service")
	assert.GreaterOrEqual(t, doc.Live.Cgroups.Memory.Tracked, 1)

	code, out, _ = runCLI(t, args...)
	assert.Equal(t, ExitFindings, code)
	assert.Contains(t, out, "HIGH     ecs-agent-unconfigured ecs.service")
	assert.Contains(t, out, "fix: systemctl disable ecs.service")

	code, out, _ = runCLI(t, append(args, "-o", "sarif")...)
	assert.Equal(t, ExitFindings, code)
	assert.Contains(t, out, `"ruleId": "ecs-agent-unconfigured"`)

	code, out, _ = runCLI(t, append(args, "-o", "markdown")...)
	assert.Equal(t, ExitFindings, code)
	assert.Contains(t, out, "ecs-agent-unconfigured")
	assert.Contains(t, out, "Live host")

	code, out, _ = runCLI(t, append(args, "--fail-on", "critical")...)
	assert.Equal(t, ExitOK, code, out)

	code, line, _ := runCLI(t, append(args, "--npd")...)
	assert.Equal(t, 1, code)
	assert.True(t, strings.HasPrefix(line, "ecs-agent-unconfigured: "), line)

	// Configured: the host is in a cluster, the rule holds its peace.
	require.NoError(t, os.MkdirAll(filepath.Join(root, "etc/ecs"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "etc/ecs/ecs.config"), []byte("ECS_CLUSTER=prod\n"), 0o644))
	code, out, _ = runCLI(t, append(args, "-o", "json")...)
	assert.NotContains(t, out, `"ecs-agent-unconfigured"`)
	assert.Equal(t, ExitOK, code, "crash-loop-restart is medium: %s", out)
}

func TestLiveErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad output", []string{"-o", "xml"}, "output"},
		{"bad collector", []string{"--collect", "gpu"}, `unknown collector "gpu"`},
		{"bad severity", []string{"--fail-on", "urgent"}, "severity"},
		{"missing root", []string{"--root", "/nonexistent/amilint"}, "no such host root"},
		{"NaN saturation", []string{"--saturation", "NaN"}, "saturation NaN: want a ratio"},
		{"negative zombie threshold", []string{"--zombie-threshold", "-1"}, "zombie threshold -1"},
		{"npd and serve", []string{"--npd", "--serve", "127.0.0.1:0"}, "--npd and --serve"},
		{"zero interval", []string{"--serve", "127.0.0.1:0", "--interval", "0s"}, "--interval 0s: want 100ms or more"},
		{"an interval that is a busy loop", []string{"--serve", "127.0.0.1:0", "--interval", "1ns"}, "--interval 1ns: want 100ms or more"},
		{"empty serve address", []string{"--serve", ""}, `--serve "": want an address`},
		{"negative interval", []string{"--serve", "127.0.0.1:0", "--interval", "-1s"}, "--interval -1s"},
		{"zero connections", []string{"--serve", "127.0.0.1:0", "--web.max-connections", "0"}, "--web.max-connections 0: want 1 or more"},
		{"negative connections", []string{"--serve", "127.0.0.1:0", "--web.max-connections", "-5"}, "--web.max-connections -5"},
		// A flag the mode would ignore is refused, not dropped.
		{"interval without serve", []string{"--interval", "30s"}, "--interval applies only with --serve"},
		{"web config without serve", []string{"--web.config.file", "/etc/amilint/web.yml"}, "--web.config.file applies only with --serve"},
		{"connections without serve", []string{"--npd", "--web.max-connections", "8"}, "--web.max-connections applies only with --serve"},
		{"output with serve", []string{"--serve", "127.0.0.1:0", "-o", "json"}, "-o applies to a report: --serve"},
		{"fail-on with serve", []string{"--serve", "127.0.0.1:0", "--fail-on", "high"}, "--fail-on applies to a report's exit code"},
		{"output with npd", []string{"--npd", "-o", "json"}, "-o applies to a report: --npd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, append([]string{"live"}, tt.args...)...)
			assert.Equal(t, ExitError, code)
			assert.Contains(t, stderr, tt.want)
		})
	}
	// A collector that cannot run is exit 2, and npd says unknown.
	code, _, stderr := runCLI(t, "live", "--collect", "systemd", "--bus", t.TempDir()+"/no-bus", "--sample", "10ms")
	assert.Equal(t, ExitError, code)
	assert.Contains(t, stderr, "systemd")
	code, line, _ := runCLI(t, "live", "--npd", "--collect", "systemd", "--bus", t.TempDir()+"/no-bus", "--sample", "10ms")
	assert.Equal(t, 2, code)
	assert.True(t, strings.HasPrefix(line, "amilint: systemd: "), line)
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLiveServe runs `amilint live --serve 127.0.0.1:0`, scrapes it and
// stops it through its context.
func TestLiveServe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"live", "--serve", "127.0.0.1:0", "--collect", "cgroup,cpu", "--sample", "50ms"}, &stdout, &stderr)
	}()
	addr := regexp.MustCompile(`on (127\.0\.0\.1:\d+)`)
	var base string
	require.Eventually(t, func() bool {
		m := addr.FindStringSubmatch(stderr.String())
		if m != nil {
			base = "http://" + m[1]
		}
		return m != nil
	}, 10*time.Second, 20*time.Millisecond)
	client := &http.Client{Timeout: 5 * time.Second}
	require.Eventually(t, func() bool {
		resp, err := client.Get(base + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 20*time.Second, 50*time.Millisecond)
	resp, err := client.Get(base + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Contains(t, string(body), "amilint_memcg_tracked ")
	assert.Contains(t, string(body), `amilint_core_busy_ratio{cpu="0",mode="system"}`)

	cancel()
	select {
	case code := <-done:
		assert.Equal(t, ExitOK, code)
	case <-time.After(10 * time.Second):
		t.Fatal("amilint live --serve did not stop with its context")
	}
}
