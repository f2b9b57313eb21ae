package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/amilint/amilint/internal/cgroup/cgrouptest"
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
	cgrouptest.Hierarchy(t)
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
	code, out, _ := runCLI(t, "live", "--collect", "cgroup,cpu", "--sample", "50ms", "--zombie-threshold", "1000000")
	assert.Equal(t, ExitOK, code)
	assert.Contains(t, out, "memcg")
	assert.Contains(t, out, "tracked")
	assert.Contains(t, out, "0 findings")
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
