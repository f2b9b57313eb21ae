package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/amilint/amilint/deploy"
	"github.com/amilint/amilint/internal/audit/bytesize"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/host/cgroup"
	"github.com/amilint/amilint/internal/host/cpu"
	"github.com/amilint/amilint/internal/host/live"
	"github.com/amilint/amilint/internal/host/metrics"
	"github.com/amilint/amilint/internal/systemd/bus"
)

// scheme knows every kind the manifests hold: the core and apps API
// groups, and the Prometheus Operator's monitoring.coreos.com/v1.
func scheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, appsv1.AddToScheme, monitoringv1.AddToScheme} {
		require.NoError(t, add(s))
	}
	return s
}

// decodeStrict decodes every YAML document of data into its Kubernetes
// API type as the API server does with strict field validation: an
// unknown or duplicated field, a wrong type or an unknown kind is an
// error.
func decodeStrict(s *runtime.Scheme, data []byte) ([]runtime.Object, error) {
	dec := serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []runtime.Object
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		obj, _, err := dec.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		out = append(out, obj)
	}
}

// objects strictly decodes every manifest of deploy/.
func objects(t *testing.T) []runtime.Object {
	t.Helper()
	names, err := fs.Glob(deploy.Manifests, "*.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	s := scheme(t)
	var out []runtime.Object
	for _, n := range names {
		b, err := fs.ReadFile(deploy.Manifests, n)
		require.NoError(t, err)
		objs, err := decodeStrict(s, b)
		require.NoError(t, err, n)
		require.NotEmpty(t, objs, n)
		out = append(out, objs...)
	}
	return out
}

// only returns the one object of type T among objs.
func only[T runtime.Object](t *testing.T, objs []runtime.Object) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	require.Len(t, found, 1, "%T", *new(T))
	return found[0]
}

// TestManifestsDecodeStrictly is the check itself, with its negative
// controls: a manifest with a misspelled field, a duplicated field or a
// value of the wrong type does not decode.
func TestManifestsDecodeStrictly(t *testing.T) {
	objs := objects(t)
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, fmt.Sprintf("%T", o))
	}
	assert.ElementsMatch(t, []string{"*v1.Namespace", "*v1.ServiceAccount", "*v1.DaemonSet", "*v1.Service",
		"*v1.ServiceMonitor", "*v1.PrometheusRule", "*v1.ConfigMap"}, kinds)

	ds, err := fs.ReadFile(deploy.Manifests, "daemonset.yaml")
	require.NoError(t, err)
	for _, tc := range []struct{ name, from, to, want string }{
		{"unknown field", "hostPID: true", "hostPid: true", `unknown field "spec.template.spec.hostPid"`},
		{"misplaced field", "          imagePullPolicy: IfNotPresent", "          imagePullPolicy: IfNotPresent\n          runAsUser: 0", `unknown field "spec.template.spec.containers[0].runAsUser"`},
		{"duplicate field", "hostPID: true", "hostPID: true\n      hostPID: false", `key "hostPID" already set`},
		{"wrong type", "containerPort: 9847", "containerPort: metrics", "containerPort"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := strings.Replace(string(ds), tc.from, tc.to, 1)
			require.NotEqual(t, string(ds), bad, "the manifest has %q", tc.from)
			_, err := decodeStrict(scheme(t), []byte(bad))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err = decodeStrict(scheme(t), []byte("apiVersion: v1\nkind: Pod2\nmetadata: {name: x}\n"))
	assert.Error(t, err, "an unknown kind")
}

func TestDaemonSet(t *testing.T) {
	ds := only[*appsv1.DaemonSet](t, objects(t))
	spec := ds.Spec.Template.Spec
	assert.True(t, spec.HostPID)
	require.NotNil(t, spec.SecurityContext)
	assert.Equal(t, ptr(true), spec.SecurityContext.RunAsNonRoot)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, spec.SecurityContext.SeccompProfile.Type)
	assert.Equal(t, ptr(false), spec.AutomountServiceAccountToken)
	assert.Equal(t, ds.Spec.Selector.MatchLabels, labels(ds.Spec.Template.Labels, ds.Spec.Selector.MatchLabels), "the selector selects the pods")

	require.Len(t, spec.Containers, 1)
	c := spec.Containers[0]
	sc := c.SecurityContext
	require.NotNil(t, sc)
	assert.Equal(t, ptr(true), sc.RunAsNonRoot)
	assert.Equal(t, ptr(false), sc.AllowPrivilegeEscalation)
	assert.Equal(t, ptr(true), sc.ReadOnlyRootFilesystem)
	assert.Equal(t, ptr(false), sc.Privileged)
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	assert.Empty(t, sc.Capabilities.Add)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, sc.SeccompProfile.Type)
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		limit, request := c.Resources.Limits[r], c.Resources.Requests[r]
		assert.False(t, limit.IsZero(), "limit %s", r)
		assert.False(t, request.IsZero(), "request %s", r)
		assert.LessOrEqual(t, request.Cmp(limit), 0, "request %s within its limit", r)
	}

	require.NotEmpty(t, c.Args)
	assert.Equal(t, "live", c.Args[0])
	// The exporter binds the pod's address, from the downward API, not
	// every interface.
	assert.Contains(t, c.Args, "--serve=$(POD_IP):9847")
	// A policy's memory budget well inside the container's limit: a
	// policy that runs away is stopped and counted, the pod not killed.
	budget := slices.IndexFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--policy-memory=") })
	require.GreaterOrEqual(t, budget, 0, "the DaemonSet sets --policy-memory")
	n, err := bytesize.Parse(strings.TrimPrefix(c.Args[budget], "--policy-memory="))
	require.NoError(t, err)
	limit := c.Resources.Limits[corev1.ResourceMemory]
	assert.Positive(t, n)
	// A runaway policy is stopped with the heap at up to three times its
	// budget, on top of the audit's own peak (about 60 MiB on a node of
	// 1,200 units; 64 MiB assumed); one stuck in a call that doubles a
	// buffer (a Go template writing) is given up at up to seven (the
	// budget, then a buffer of two, then one of four: measured 210 to
	// 241 MiB under 32Mi, OOM-killed at 192Mi).
	assert.LessOrEqual(t, 7*int64(n)+64<<20, limit.Value(), "seven --policy-memory over the audit's 64 MiB fit the memory limit")
	require.Len(t, c.Env, 1)
	assert.Equal(t, "POD_IP", c.Env[0].Name)
	require.NotNil(t, c.Env[0].ValueFrom)
	assert.Equal(t, "status.podIP", c.Env[0].ValueFrom.FieldRef.FieldPath)

	// Liveness asks whether audits run, readiness also whether every
	// collector works: both paths the exporter serves (internal/host/metrics),
	// on the port the container declares.
	assert.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	assert.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		assert.True(t, slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.HTTPGet.Port.String() }),
			"probe port %s is a declared container port", p.HTTPGet.Port.String())
	}

	// Every host path is mounted read-only, and those the auditor reads are
	// there: the collectors' three and the root the static rules read.
	hostPaths := map[string]string{}
	for _, v := range spec.Volumes {
		require.NotNil(t, v.HostPath, "volume %s is a hostPath", v.Name)
		hostPaths[v.Name] = v.HostPath.Path
	}
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		require.Contains(t, hostPaths, m.Name)
		assert.True(t, m.ReadOnly, "mount %s is read-only", m.Name)
		assert.Equal(t, "/host"+hostPaths[m.Name], m.MountPath, "host %s is mounted under /host", hostPaths[m.Name])
		mounted[hostPaths[m.Name]] = true
	}
	for _, p := range []string{"/proc", "/sys/fs/cgroup", "/run/dbus/system_bus_socket", "/etc", "/usr", "/lib"} {
		assert.True(t, mounted[p], "host %s is mounted", p)
	}
}

// TestDaemonSetRunsTheReleasedImage checks the DaemonSet names the image
// the release builds: the Makefile's IMAGE at its VERSION.
func TestDaemonSetRunsTheReleasedImage(t *testing.T) {
	ds := only[*appsv1.DaemonSet](t, objects(t))
	mk, err := os.ReadFile("../Makefile")
	require.NoError(t, err)
	variable := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + ` \?= (\S+)$`).FindSubmatch(mk)
		require.NotNil(t, m, "the Makefile sets %s", name)
		return string(m[1])
	}
	version := strings.ReplaceAll(variable("VERSION"), "$(PLUGIN_VERSION)", variable("PLUGIN_VERSION"))
	assert.Equal(t, variable("IMAGE")+":"+version, ds.Spec.Template.Spec.Containers[0].Image)
}

func ptr[T any](v T) *T { return &v }

// labels returns the entries of have that want names.
func labels(have, want map[string]string) map[string]string {
	out := map[string]string{}
	for k := range want {
		if v, ok := have[k]; ok {
			out[k] = v
		}
	}
	return out
}

// TestPrometheusRule checks the alerts exist and that every metric their
// expressions use is one the exporter really emits.
func TestPrometheusRule(t *testing.T) {
	rule := only[*monitoringv1.PrometheusRule](t, objects(t))
	var alerts []string
	var exprs []string
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			alerts = append(alerts, r.Alert)
			exprs = append(exprs, r.Expr.String())
			assert.NotEmpty(t, r.Annotations["summary"])
			assert.NotEmpty(t, r.Labels["severity"])
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

// npdConfig is node-problem-detector's custom plugin monitor
// configuration (its CustomPluginConfig, pkg/custompluginmonitor/types),
// decoded strictly: NPD ignores a misspelled key, so this test does not.
type npdConfig struct {
	Plugin       string `json:"plugin"`
	PluginConfig struct {
		InvokeInterval                          string `json:"invoke_interval"`
		Timeout                                 string `json:"timeout"`
		MaxOutputLength                         int    `json:"max_output_length"`
		Concurrency                             int    `json:"concurrency"`
		EnableMessageChangeBasedConditionUpdate *bool  `json:"enable_message_change_based_condition_update"`
		SkipInitialStatus                       *bool  `json:"skip_initial_status"`
	} `json:"pluginConfig"`
	Source           string `json:"source"`
	MetricsReporting *bool  `json:"metricsReporting"`
	Conditions       []struct {
		Type    string `json:"type"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
	} `json:"conditions"`
	Rules []struct {
		Type      string   `json:"type"`
		Condition string   `json:"condition"`
		Reason    string   `json:"reason"`
		Path      string   `json:"path"`
		Args      []string `json:"args"`
		Timeout   string   `json:"timeout"`
	} `json:"rules"`
}

func TestServiceAndPlugin(t *testing.T) {
	objs := objects(t)
	svc := only[*corev1.Service](t, objs)
	ds := only[*appsv1.DaemonSet](t, objs)
	assert.Equal(t, svc.Spec.Selector, labels(ds.Spec.Template.Labels, svc.Spec.Selector), "the Service selects the DaemonSet's pods")
	require.Len(t, svc.Spec.Ports, 1)
	assert.Equal(t, ds.Spec.Template.Spec.Containers[0].Ports[0].Name, svc.Spec.Ports[0].TargetPort.String())
	mon := only[*monitoringv1.ServiceMonitor](t, objs)
	assert.Equal(t, svc.Labels, labels(svc.Labels, mon.Spec.Selector.MatchLabels))
	require.Len(t, mon.Spec.Endpoints, 1)
	assert.Equal(t, svc.Spec.Ports[0].Name, mon.Spec.Endpoints[0].Port)

	cm := only[*corev1.ConfigMap](t, objs)
	dec := json.NewDecoder(strings.NewReader(cm.Data["amilint-plugin-monitor.json"]))
	dec.DisallowUnknownFields()
	var npd npdConfig
	require.NoError(t, dec.Decode(&npd))
	assert.Equal(t, "custom", npd.Plugin)
	require.Len(t, npd.Rules, 1)
	assert.Equal(t, npd.Conditions[0].Type, npd.Rules[0].Condition)
	assert.Equal(t, "/usr/local/bin/amilint", npd.Rules[0].Path)
	assert.Equal(t, "live", npd.Rules[0].Args[0])
	assert.Contains(t, npd.Rules[0].Args, "--npd")
}
