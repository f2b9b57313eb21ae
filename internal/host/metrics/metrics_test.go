package metrics_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/host/cgroup"
	"github.com/amilint/amilint/internal/host/cpu"
	"github.com/amilint/amilint/internal/host/live"
	"github.com/amilint/amilint/internal/host/metrics"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/bus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serve starts the exporter on 127.0.0.1:0 and returns its base URL; the
// server stops by itself when the test ends.
func serve(t *testing.T, e *metrics.Exporter) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	done := make(chan error, 1)
	go func() { done <- e.Serve(ctx, ln, metrics.ServeOptions{}) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return "http://" + ln.Addr().String()
}

func get(t *testing.T, url string) (int, []byte) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, b
}

// waitHealthy polls /healthz until the first audit is in, bounded.
func waitHealthy(t *testing.T, base string) {
	t.Helper()
	require.Eventually(t, func() bool {
		code, _ := get(t, base+"/healthz")
		return code == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond)
}

func scrape(t *testing.T, base string) (map[string]*dto.MetricFamily, []byte) {
	t.Helper()
	code, body := get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, code)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	require.NoError(t, err)
	problems, err := promlint.New(bytes.NewReader(body)).Lint()
	require.NoError(t, err)
	assert.Empty(t, problems, "promlint")
	return fams, body
}

func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	fam, ok := fams[name]
	require.True(t, ok, "metric %s missing", name)
metrics:
	for _, m := range fam.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if got[k] != v {
				continue metrics
			}
		}
		switch {
		case m.Gauge != nil:
			return m.GetGauge().GetValue()
		case m.Counter != nil:
			return m.GetCounter().GetValue()
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return 0
}

// TestServeRealHost exports a real audit of this machine (cgroups and CPU;
// it has no systemd) and checks the exposition parses and lints clean.
func TestServeRealHost(t *testing.T) {
	opts := live.Options{Sample: 100 * time.Millisecond, Collect: []string{live.CollectCgroup, live.CollectCPU}}
	host, err := live.NewHost(context.Background(), opts, audit.Config{}, "host")
	require.NoError(t, err)
	defer host.Close()
	e := metrics.New(host.AuditLive, time.Hour, nil)
	base := serve(t, e)
	waitHealthy(t, base)

	fams, _ := scrape(t, base)
	tracked := value(t, fams, "amilint_memcg_tracked", nil)
	present := value(t, fams, "amilint_memcg_present", nil)
	assert.GreaterOrEqual(t, tracked, 1.0)
	assert.GreaterOrEqual(t, present, 1.0)
	assert.GreaterOrEqual(t, value(t, fams, "amilint_memcg_zombies", nil), 0.0)
	assert.Equal(t, 1.0, value(t, fams, "amilint_collector_up", map[string]string{"collector": "cgroup"}))
	assert.Len(t, fams["amilint_collector_up"].GetMetric(), 2, "systemd was not collected")
	sys := value(t, fams, "amilint_core_busy_ratio", map[string]string{"cpu": "0", "mode": "system"})
	assert.GreaterOrEqual(t, sys, 0.0)
	assert.LessOrEqual(t, sys, 1.0)
	assert.Greater(t, value(t, fams, "amilint_scrape_duration_seconds", nil), 0.0)

	code, _ := get(t, base+"/nope")
	assert.Equal(t, http.StatusNotFound, code)
}

// TestServeIncident exports the facts of a host like the incident's and
// checks every metric family and label the alerts in deploy/ rely on.
func TestServeIncident(t *testing.T) {
	facts := &live.Facts{
		Cgroups: &live.Cgroups{Memory: &cgroup.Memory{Version: 1, Hierarchy: "/sys/fs/cgroup/memory", Tracked: 68680, Present: 240, Zombies: 68440},
			Unified: &cgroup.Unified{Mount: "/sys/fs/cgroup/unified", Dying: 3, Subtrees: []cgroup.Subtree{{Path: "system.slice", Dying: 3}}},
			Suspect: "ecs.service", Why: "it crash-loops and creates a new container, hence a new memory cgroup, on every restart"},
		CPU: &cpu.Report{Busy: 0.02, Cores: []cpu.Core{{CPU: 39, System: 1, NICs: []string{"eth0"}}, {CPU: 40, User: 0.01, Idle: 0.99}},
			NICs: []cpu.NIC{{Name: "eth0", IRQs: []int{25}, Cores: []int{39}}}},
	}
	snap := &bus.Snapshot{Time: time.Now(), Units: []bus.Unit{
		{Name: "ecs.service", Loaded: true, LoadState: "loaded", ActiveState: "activating", SubState: "auto-restart", NRestarts: 4242, ContainerPerRestart: true, FileState: "enabled"},
		{Name: "ssh.service", Loaded: true, LoadState: "loaded", ActiveState: "active", SubState: "running"},
		{Name: "ssh.socket", Loaded: true, LoadState: "loaded"},
	}}
	looping := bus.Detect(nil, snap, 0)
	facts.Systemd = &live.Systemd{Units: snap.Units, CrashLooping: looping, ContainerPerRestart: []string{"ecs.service"}}
	facts.Thresholds = live.Thresholds{Zombies: 1000, Restarts: 3, Saturation: 0.95}
	fs := policyFindings(t, facts)

	e := metrics.New(func(ctx context.Context) (*live.Facts, []finding.Finding, error) { return facts, fs, nil }, time.Hour, nil)
	base := serve(t, e)
	waitHealthy(t, base)
	fams, body := scrape(t, base)

	assert.Equal(t, 68440.0, value(t, fams, "amilint_memcg_zombies", nil))
	assert.Equal(t, 1.0, value(t, fams, "amilint_memcg_leak_suspect", map[string]string{"unit": "ecs.service"}))
	assert.Equal(t, 68680.0, value(t, fams, "amilint_memcg_tracked", nil))
	assert.Equal(t, 240.0, value(t, fams, "amilint_memcg_present", nil))
	assert.Equal(t, 4242.0, value(t, fams, "amilint_unit_restarts_total", map[string]string{"unit": "ecs.service"}))
	assert.Equal(t, dto.MetricType_COUNTER, fams["amilint_unit_restarts_total"].GetType())
	assert.Equal(t, 1.0, value(t, fams, "amilint_unit_crashlooping", map[string]string{"unit": "ecs.service"}))
	assert.Equal(t, 0.0, value(t, fams, "amilint_unit_crashlooping", map[string]string{"unit": "ssh.service"}))
	assert.NotContains(t, string(body), `unit="ssh.socket"`, "only services have restarts")
	assert.Equal(t, 1.0, value(t, fams, "amilint_core_busy_ratio", map[string]string{"cpu": "39", "mode": "system"}))
	assert.Equal(t, 1.0, value(t, fams, "amilint_nic_irq_core", map[string]string{"nic": "eth0", "cpu": "39"}))
	assert.Equal(t, 3.0, value(t, fams, "amilint_cgroup_dying_descendants", map[string]string{"path": "system.slice"}))
	assert.Equal(t, 1.0, value(t, fams, "amilint_findings", map[string]string{"rule_id": "live-memcg-zombies", "severity": "high"}))
	assert.Equal(t, 1.0, value(t, fams, "amilint_findings", map[string]string{"rule_id": "live-unit-crashloop", "severity": "high"}))
	assert.Equal(t, 1.0, value(t, fams, "amilint_findings", map[string]string{"rule_id": "live-container-per-restart", "severity": "high"}))
}

func TestHealthzBeforeFirstAudit(t *testing.T) {
	release := make(chan struct{})
	e := metrics.New(func(ctx context.Context) (*live.Facts, []finding.Finding, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return &live.Facts{}, nil, nil
	}, time.Hour, nil)
	base := serve(t, e)
	code, body := get(t, base+"/healthz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, string(body), "no audit yet")
	close(release)
	waitHealthy(t, base)
}

// policyFindings are the findings the shipped policies decide over the
// live facts, on a host root with no unit files.
func policyFindings(t *testing.T, f *live.Facts) []finding.Finding {
	t.Helper()
	ctx := context.Background()
	static, err := facts.Build(rootfs.New(fstest.MapFS{}), nil, facts.Options{})
	require.NoError(t, err)
	a, err := audit.New(audit.Config{})
	require.NoError(t, err)
	eng, err := a.Engine(ctx, "host")
	require.NoError(t, err)
	fs, err := eng.Evaluate(ctx, live.NewDocument(static, f))
	require.NoError(t, err)
	return fs
}

// TestReadyzNamesAFailingCollector: with the systemd collector failing
// (no bus socket), the exporter is alive (/healthz 200: a restart would not
// help) but not ready (/readyz 503 naming the collector), and
// amilint_collector_up says 0 for it.
func TestReadyzNamesAFailingCollector(t *testing.T) {
	failing := true
	var mu sync.Mutex
	e := metrics.New(func(ctx context.Context) (*live.Facts, []finding.Finding, error) {
		mu.Lock()
		defer mu.Unlock()
		f := &live.Facts{Collectors: []string{live.CollectCgroup, live.CollectSystemd}, Errors: map[string]string{}}
		if failing {
			f.Errors[live.CollectSystemd] = "dial unix /host/run/dbus/system_bus_socket: no such file or directory"
		}
		return f, nil, nil
	}, 20*time.Millisecond, nil)
	base := serve(t, e)
	waitHealthy(t, base)
	code, body := get(t, base+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, string(body), "collectors failing: systemd: dial unix")
	code, _ = get(t, base+"/healthz")
	assert.Equal(t, http.StatusOK, code)
	fams, _ := scrape(t, base)
	assert.Equal(t, 0.0, value(t, fams, "amilint_collector_up", map[string]string{"collector": "systemd"}))
	assert.Equal(t, 1.0, value(t, fams, "amilint_collector_up", map[string]string{"collector": "cgroup"}))

	mu.Lock()
	failing = false
	mu.Unlock()
	require.Eventually(t, func() bool {
		code, _ := get(t, base+"/readyz")
		return code == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "ready once the collector works")
}

// TestLabelsFromHostileNames: cgroup and network device names are bytes,
// not text (a user may mkdir any name in a delegated subtree). A label
// value that is not valid UTF-8, or two that read the same once made
// valid, must not fail the whole scrape.
func TestLabelsFromHostileNames(t *testing.T) {
	facts := &live.Facts{
		Cgroups: &live.Cgroups{Unified: &cgroup.Unified{Mount: "/sys/fs/cgroup", Dying: 9, Subtrees: []cgroup.Subtree{
			{Path: "user.slice/a\xff", Dying: 5}, {Path: "user.slice/a\xfe", Dying: 4}, {Path: "system.slice", Dying: 2}}},
			Suspect: "a\xff.service"},
		CPU: &cpu.Report{Cores: []cpu.Core{{CPU: 0}}, NICs: []cpu.NIC{{Name: "eth\xff", Cores: []int{0}}, {Name: "eth\xfe", Cores: []int{0}}}},
	}
	e := metrics.New(func(ctx context.Context) (*live.Facts, []finding.Finding, error) { return facts, nil, nil }, time.Hour, nil)
	base := serve(t, e)
	waitHealthy(t, base)
	fams, _ := scrape(t, base)
	assert.Equal(t, 5.0, value(t, fams, "amilint_cgroup_dying_descendants", map[string]string{"path": "user.slice/a\uFFFD"}), "the first, most dying, is kept")
	assert.Equal(t, 2.0, value(t, fams, "amilint_cgroup_dying_descendants", map[string]string{"path": "system.slice"}))
	assert.Equal(t, 1.0, value(t, fams, "amilint_memcg_leak_suspect", map[string]string{"unit": "a\uFFFD.service"}))
	assert.Equal(t, 1.0, value(t, fams, "amilint_nic_irq_core", map[string]string{"nic": "eth\uFFFD", "cpu": "0"}))
}
