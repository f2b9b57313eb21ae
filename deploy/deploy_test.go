package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/amilint/amilint/deploy"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/host/cgroup"
	"github.com/amilint/amilint/internal/host/cpu"
	"github.com/amilint/amilint/internal/host/live"
	"github.com/amilint/amilint/internal/host/metrics"
	"github.com/amilint/amilint/internal/systemd/bus"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// docs decodes every YAML document of every manifest.
func docs(t *testing.T) map[string][]map[string]any {
	t.Helper()
	names, err := fs.Glob(deploy.Manifests, "*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	out := map[string][]map[string]any{}
	for _, n := range names {
		f, err := deploy.Manifests.Open(n)
		require.NoError(t, err)
		dec := yaml.NewDecoder(f)
		for {
			var d map[string]any
			err := dec.Decode(&d)
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, n)
			require.NotEmpty(t, d["apiVersion"], n)
			kind, _ := d["kind"].(string)
			require.NotEmpty(t, kind, n)
			out[kind] = append(out[kind], d)
		}
		f.Close()
	}
	return out
}

// get walks a decoded document by keys and indexes.
func get(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			require.True(t, ok, "at %q: not a map", k)
			v = m[k]
		case int:
			s, ok := v.([]any)
			require.True(t, ok && k < len(s), "at [%d]: not a list that long", k)
			v = s[k]
		}
	}
	return v
}

func TestDaemonSet(t *testing.T) {
	ds := docs(t)["DaemonSet"]
	require.Len(t, ds, 1)
	spec := get(t, ds[0], "spec", "template", "spec")
	assert.Equal(t, true, get(t, spec, "hostPID"))
	assert.Equal(t, true, get(t, spec, "securityContext", "runAsNonRoot"))
	assert.Equal(t, "RuntimeDefault", get(t, spec, "securityContext", "seccompProfile", "type"))
	assert.Equal(t, false, get(t, spec, "automountServiceAccountToken"))

	c := get(t, spec, "containers", 0)
	sc := get(t, c, "securityContext")
	assert.Equal(t, true, get(t, sc, "runAsNonRoot"))
	assert.Equal(t, false, get(t, sc, "allowPrivilegeEscalation"))
	assert.Equal(t, true, get(t, sc, "readOnlyRootFilesystem"))
	assert.Equal(t, false, get(t, sc, "privileged"))
	assert.Equal(t, []any{"ALL"}, get(t, sc, "capabilities", "drop"))
	assert.Nil(t, get(t, sc, "capabilities", "add"))
	assert.Equal(t, "RuntimeDefault", get(t, sc, "seccompProfile", "type"))
	for _, r := range []string{"cpu", "memory"} {
		assert.NotEmpty(t, get(t, c, "resources", "limits", r), "limit %s", r)
		assert.NotEmpty(t, get(t, c, "resources", "requests", r), "request %s", r)
	}

	args := get(t, c, "args").([]any)
	assert.Equal(t, "live", args[0])
	var hasServe bool
	for _, a := range args {
		hasServe = hasServe || strings.HasPrefix(a.(string), "--serve=")
	}
	assert.True(t, hasServe)

	// Liveness asks whether audits run, readiness also whether every
	// collector works: both paths the exporter serves (internal/host/metrics).
	assert.Equal(t, "/healthz", get(t, c, "livenessProbe", "httpGet", "path"))
	assert.Equal(t, "/readyz", get(t, c, "readinessProbe", "httpGet", "path"))

	// Every host path is mounted read-only, and those the auditor reads are
	// there: the collectors' three and the root the static rules read.
	hostPaths := map[string]string{}
	for _, v := range get(t, spec, "volumes").([]any) {
		hostPaths[get(t, v, "name").(string)] = get(t, v, "hostPath", "path").(string)
	}
	mounted := map[string]bool{}
	for _, m := range get(t, c, "volumeMounts").([]any) {
		name := get(t, m, "name").(string)
		require.Contains(t, hostPaths, name)
		assert.Equal(t, true, get(t, m, "readOnly"), "mount %s is read-only", name)
		mounted[hostPaths[name]] = true
	}
	for _, p := range []string{"/proc", "/sys/fs/cgroup", "/run/dbus/system_bus_socket", "/etc", "/usr", "/lib"} {
		assert.True(t, mounted[p], "host %s is mounted", p)
	}
}

// TestPrometheusRule checks the alerts exist and that every metric their
// expressions use is one the exporter really emits.
func TestPrometheusRule(t *testing.T) {
	rules := docs(t)["PrometheusRule"]
	require.Len(t, rules, 1)
	var alerts []string
	var exprs []string
	for _, g := range get(t, rules[0], "spec", "groups").([]any) {
		for _, r := range get(t, g, "rules").([]any) {
			alerts = append(alerts, get(t, r, "alert").(string))
			exprs = append(exprs, get(t, r, "expr").(string))
			assert.NotEmpty(t, get(t, r, "annotations", "summary"))
			assert.NotEmpty(t, get(t, r, "labels", "severity"))
		}
	}
	for _, want := range []string{"AmilintZombieMemcgs", "AmilintMemcgLeakSuspect", "AmilintUnitCrashLooping", "AmilintIRQCoreSaturated"} {
		assert.Contains(t, alerts, want)
	}

	// The exporter over the facts of an incident-like host.
	snap := &bus.Snapshot{Units: []bus.Unit{{Name: "ecs.service", Loaded: true, LoadState: "loaded", SubState: "auto-restart", NRestarts: 9}}}
	facts := &live.Facts{
		Collectors: live.AllCollectors,
		Cgroups:    &live.Cgroups{Memory: &cgroup.Memory{Version: 1, Tracked: 68680, Present: 240, Zombies: 68440}, Suspect: "ecs.service"},
		CPU:        &cpu.Report{Cores: []cpu.Core{{CPU: 39, System: 1}}, NICs: []cpu.NIC{{Name: "eth0", Cores: []int{39}}}},
		Systemd:    &live.Systemd{Units: snap.Units, CrashLooping: bus.Detect(nil, snap, 3)},
	}
	e := metrics.New(func(context.Context) (*live.Facts, []finding.Finding, error) { return facts, nil, nil }, 0, nil)
	e.Refresh(context.Background())
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(e))
	fams, err := reg.Gather()
	require.NoError(t, err)
	var names []string
	for _, f := range fams {
		names = append(names, f.GetName())
	}
	metric := regexp.MustCompile(`\bamilint_[a-z_]+`)
	for _, x := range exprs {
		for _, m := range metric.FindAllString(x, -1) {
			assert.True(t, slices.Contains(names, m), "alert expression uses %s, which the exporter does not emit (%v)", m, names)
		}
	}
}

func TestServiceAndPlugin(t *testing.T) {
	d := docs(t)
	require.Len(t, d["Service"], 1)
	require.Len(t, d["ServiceMonitor"], 1)
	cm := d["ConfigMap"]
	require.Len(t, cm, 1)
	cfg := get(t, cm[0], "data", "amilint-plugin-monitor.json").(string)
	var mon struct {
		Plugin string
		Rules  []struct {
			Path string
			Args []string
		}
	}
	require.NoError(t, json.Unmarshal([]byte(cfg), &mon))
	assert.Equal(t, "custom", mon.Plugin)
	require.Len(t, mon.Rules, 1)
	assert.Contains(t, mon.Rules[0].Args, "--npd")
}
