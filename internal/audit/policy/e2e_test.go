package policy

import (
	"context"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
	"github.com/amilint/amilint/rules"
)

// catalog returns the shipped rule catalog and profiles as a policy Config.
func catalog(t *testing.T) ([]rules.Rule, Config) {
	t.Helper()
	rs, err := rules.Load()
	require.NoError(t, err)
	rd, err := rules.Data(rs)
	require.NoError(t, err)
	ps, err := rules.LoadProfiles()
	require.NoError(t, err)
	pd, err := rules.ProfilesData(ps)
	require.NoError(t, err)
	return rs, Config{Rules: rd, Profiles: pd}
}

func configRequests(rs []rules.Rule) []facts.ConfigRequest {
	var out []facts.ConfigRequest
	for _, r := range rules.ConfigRequests(rs) {
		out = append(out, facts.ConfigRequest{Path: r.Path, Format: r.Format})
	}
	return out
}

// bootUnit describes a unit the test says starts at boot (or not).
type bootUnit struct {
	name  string
	state string
	boot  bool
	chain []unit.Edge
}

// unitInputs reads each unit's fragment from the tree, as the systemd
// model would hand it to facts.Build.
func unitInputs(t *testing.T, fsys *rootfs.FS, us []bootUnit) []facts.UnitInput {
	t.Helper()
	var out []facts.UnitInput
	for _, u := range us {
		in := facts.UnitInput{Name: u.name, State: u.state, StartsAtBoot: u.boot, Chain: u.chain}
		for _, dir := range unit.SearchPath {
			b, err := fsys.ReadFile(dir + "/" + u.name)
			if err != nil {
				continue
			}
			opts, err := unit.ParseConfig(b)
			require.NoError(t, err)
			in.Options, in.Fragment, in.Path = opts, "/"+dir+"/"+u.name, "/"+dir+"/"+u.name
			break
		}
		out = append(out, in)
	}
	return out
}

func wantsChain(target, name string) []unit.Edge {
	return []unit.Edge{
		{From: "default.target", To: target, Kind: "Wants"},
		{From: target, To: name, Kind: ".wants", Source: "/etc/systemd/system/" + target + ".wants/" + name},
	}
}

// engines caches one engine per profile: the catalog config is otherwise
// the same in every test, and compiling is the slow part.
var engines sync.Map

func evaluate(t *testing.T, cfg Config, doc *facts.Document) []finding.Finding {
	t.Helper()
	require.Empty(t, cfg.PolicyDirs, "evaluate caches engines of the catalog config only")
	require.Empty(t, cfg.DataFiles, "evaluate caches engines of the catalog config only")
	var e *Engine
	key := cfg.Profile + "|" + strings.Join(cfg.Traits, ",")
	if v, ok := engines.Load(key); ok {
		e = v.(*Engine)
	} else {
		var err error
		e, err = New(context.Background(), cfg)
		require.NoError(t, err)
		engines.Store(key, e)
	}
	fs, err := e.Evaluate(context.Background(), doc)
	require.NoError(t, err)
	return fs
}

func byRule(fs []finding.Finding) map[string][]finding.Finding {
	m := map[string][]finding.Finding{}
	for _, f := range fs {
		m[f.RuleID] = append(m[f.RuleID], f)
	}
	return m
}

// TestIncidentFixtures evaluates the real policies and catalog over the
// DLAMI-like fixture's ecs.service: the incident's findings, and the ECS one
// gone once ECS_CLUSTER is set.
func TestIncidentFixtures(t *testing.T) {
	rs, cfg := catalog(t)
	ecsChain := wantsChain("multi-user.target", "ecs.service")
	units := []bootUnit{
		{name: "ecs.service", state: "enabled", boot: true, chain: ecsChain},
		{name: "docker.service", state: "enabled", boot: true, chain: wantsChain("multi-user.target", "docker.service")},
	}
	tests := []struct {
		fixture string
		ecs     bool
	}{
		{"dlami", true},
		{"dlami-ecs-configured", false},
	}
	for _, tt := range tests {
		t.Run(tt.fixture, func(t *testing.T) {
			src, err := fixtures.Source(tt.fixture)
			require.NoError(t, err)
			fsys := rootfs.New(src)
			doc, err := facts.Build(fsys, unitInputs(t, fsys, units), facts.Options{ConfigFiles: configRequests(rs)})
			require.NoError(t, err)
			got := byRule(evaluate(t, cfg, doc))

			if tt.ecs {
				require.Len(t, got["ecs-agent-unconfigured"], 1)
				f := got["ecs-agent-unconfigured"][0]
				assert.Equal(t, finding.High, f.Severity)
				assert.Equal(t, "ecs.service", f.Unit)
				assert.Equal(t, ecsChain, f.Chain)
				assert.Contains(t, f.Message, "ECS_CLUSTER")
				assert.Contains(t, f.Message, "default.target → multi-user.target → ecs.service")
				assert.Equal(t, "disable", f.Remediation.Action)
				assert.Contains(t, f.Remediation.Units, "ecs.service")
			} else {
				assert.Empty(t, got["ecs-agent-unconfigured"])
				assert.Equal(t, "prod-cluster", doc.ConfigFiles["/etc/ecs/ecs.config"].Keys["ECS_CLUSTER"])
			}
			// The unit's restart policy is crash-loop-prone either way:
			// RestartSec=10s × default burst 5 = 50s > 10s.
			require.Len(t, got["crash-loop-restart"], 1)
			cl := got["crash-loop-restart"][0]
			assert.Equal(t, "ecs.service", cl.Unit)
			assert.Contains(t, cl.Message, "5 restarts take 50s, longer than StartLimitIntervalSec=10s")
			require.Len(t, got["container-per-restart"], 1)
			assert.Equal(t, "ecs.service", got["container-per-restart"][0].Unit)
		})
	}
}

// TestCatalogUnitRules checks every shipped unit rule end to end: a listed
// unit started at boot is reported; the same unit not started at boot is
// not; and where the rule has a needed_when, an image that satisfies it is
// not reported.
func TestCatalogUnitRules(t *testing.T) {
	rs, cfg := catalog(t)
	n := 0
	for _, r := range rs {
		if r.Kind != "unit" {
			continue
		}
		n++
		name := ""
		for _, u := range r.Units {
			if !strings.ContainsAny(u, "*?[") {
				name = u
				break
			}
		}
		require.NotEmpty(t, name, "rule %s names no plain unit", r.ID)
		t.Run(r.ID, func(t *testing.T) {
			c := cfg
			if len(r.Profiles) > 0 {
				c.Profile = r.Profiles[0]
			}
			if len(r.Traits) > 0 {
				// Without the rule's traits it does not apply at all.
				doc, err := facts.Build(rootfs.New(fstest.MapFS{}), []facts.UnitInput{{
					Name: name, State: "enabled", StartsAtBoot: true,
					Chain:   wantsChain("multi-user.target", name),
					Options: mustParse(t, "[Unit]\nDescription=x\n"),
				}}, facts.Options{ConfigFiles: configRequests(rs)})
				require.NoError(t, err)
				assert.Empty(t, byRule(evaluate(t, c, doc))[r.ID], "without traits %v", r.Traits)
				c.Traits = r.Traits
			}
			run := func(m fstest.MapFS, boot bool) []finding.Finding {
				doc, err := facts.Build(rootfs.New(m), []facts.UnitInput{{
					Name: name, State: "enabled", StartsAtBoot: boot,
					Chain:   wantsChain("multi-user.target", name),
					Options: mustParse(t, "[Unit]\nDescription=x\n"),
				}}, facts.Options{ConfigFiles: configRequests(rs)})
				require.NoError(t, err)
				return byRule(evaluate(t, c, doc))[r.ID]
			}
			got := run(fstest.MapFS{}, true)
			require.Len(t, got, 1, "positive case")
			assert.Equal(t, r.Level(), got[0].Severity)
			assert.Equal(t, name, got[0].Unit)
			assert.Equal(t, r.Remediation.Action, got[0].Remediation.Action)
			assert.Empty(t, run(fstest.MapFS{}, false), "not at boot")
			if r.NeededWhen != nil {
				assert.Empty(t, run(satisfy(*r.NeededWhen), true), "needed")
			}
		})
	}
	assert.Positive(t, n)
}

// satisfy builds a tree in which condition c holds.
func satisfy(c rules.Condition) fstest.MapFS {
	m := fstest.MapFS{}
	leaf := func(c rules.Condition) {
		switch {
		case c.ConfigKey != nil:
			m[rootfs.Clean(c.ConfigKey.File)] = &fstest.MapFile{Data: []byte(c.ConfigKey.Key + "=value\n")}
		case c.FileExists != "":
			m[rootfs.Clean(c.FileExists)] = &fstest.MapFile{Data: []byte("x")}
		case c.ConfigValid != "" && c.Format == "dir":
			m[rootfs.Clean(c.ConfigValid)+"/a.json"] = &fstest.MapFile{Data: []byte("{}")}
		case c.ConfigValid != "" && c.Format == "json":
			m[rootfs.Clean(c.ConfigValid)] = &fstest.MapFile{Data: []byte(`{"agent": {}}`)}
		case c.ConfigValid != "":
			m[rootfs.Clean(c.ConfigValid)] = &fstest.MapFile{Data: []byte("A=1\n")}
		}
	}
	switch {
	case len(c.Any) > 0:
		leaf(c.Any[0])
	case len(c.All) > 0:
		for _, s := range c.All {
			leaf(s)
		}
	default:
		leaf(c)
	}
	return m
}

func mustParse(t *testing.T, s string) []*unit.Option {
	t.Helper()
	o, err := unit.ParseConfig([]byte(s))
	require.NoError(t, err)
	return o
}

// TestGenericRulesEndToEnd builds facts from small trees and checks each
// generic rule's positive and negative case through the real catalog.
func TestGenericRulesEndToEnd(t *testing.T) {
	_, cfg := catalog(t)
	exe := &fstest.MapFile{Data: []byte("#!/bin/sh\n"), Mode: 0o755}
	tests := []struct {
		name    string
		m       fstest.MapFS
		unit    string
		text    string
		state   string
		boot    bool
		profile string
		rule    string
		want    bool
	}{
		{"exec missing", fstest.MapFS{}, "gone.service", "[Service]\nExecStart=/opt/gone/bin/agent\n", "enabled", true, "", "exec-missing", true},
		{"exec present", fstest.MapFS{"opt/gone/bin/agent": exe}, "gone.service", "[Service]\nExecStart=/opt/gone/bin/agent\n", "enabled", true, "", "exec-missing", false},
		{"crash loop off limit", fstest.MapFS{}, "a.service", "[Unit]\nStartLimitIntervalSec=0\n[Service]\nExecStart=/bin/a\nRestart=always\n", "enabled", true, "", "crash-loop-restart", true},
		{"crash loop default restart", fstest.MapFS{}, "a.service", "[Service]\nExecStart=/bin/a\nRestart=always\n", "enabled", true, "", "crash-loop-restart", false},
		{"crash loop drop-in limit", fstest.MapFS{}, "a.service", "[Service]\nExecStart=/bin/a\nRestart=on-failure\nRestartSec=10s\n[Unit]\nStartLimitIntervalSec=5min\n", "enabled", true, "", "crash-loop-restart", false},
		{"system.conf default burst", fstest.MapFS{"etc/systemd/system.conf": {Data: []byte("[Manager]\nDefaultStartLimitBurst=1\n")}}, "a.service", "[Service]\nExecStart=/bin/a\nRestart=on-failure\nRestartSec=10s\n", "enabled", true, "", "crash-loop-restart", false},
		{"container per restart", fstest.MapFS{}, "c.service", "[Service]\nExecStart=/usr/bin/docker run --rm img\nRestart=always\nRestartSec=1\n", "enabled", true, "", "container-per-restart", true},
		{"container once", fstest.MapFS{}, "c.service", "[Service]\nExecStart=/usr/bin/docker run --rm img\n", "enabled", true, "", "container-per-restart", false},
		{"first boot preset", fstest.MapFS{"etc/machine-id": {Data: []byte("uninitialized\n")}}, "p.service", "[Service]\nExecStart=/bin/p\n", "disabled", false, "", "first-boot-presets", true},
		{"no first boot", fstest.MapFS{"etc/machine-id": {Data: []byte("0123\n")}}, "p.service", "[Service]\nExecStart=/bin/p\n", "disabled", false, "", "first-boot-presets", false},
		{"profile denies", fstest.MapFS{}, "telnet.socket", "[Socket]\nListenStream=23\n", "enabled", true, "k8s-gpu-node", "profile-allowlist", true},
		{"profile allows", fstest.MapFS{}, "kubelet.service", "[Service]\nExecStart=/bin/kubelet\n", "enabled", true, "k8s-gpu-node", "profile-allowlist", false},
		{"no profile", fstest.MapFS{}, "telnet.socket", "[Socket]\nListenStream=23\n", "enabled", true, "", "profile-allowlist", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := facts.UnitInput{Name: tt.unit, State: tt.state, StartsAtBoot: tt.boot,
				Chain: wantsChain("multi-user.target", tt.unit), Options: mustParse(t, tt.text), Preset: "enable"}
			if !tt.boot {
				in.Chain = nil
			}
			doc, err := facts.Build(rootfs.New(tt.m), []facts.UnitInput{in}, facts.Options{})
			require.NoError(t, err)
			c := cfg
			c.Profile = tt.profile
			got := byRule(evaluate(t, c, doc))[tt.rule]
			if tt.want {
				require.Len(t, got, 1)
				assert.Equal(t, tt.unit, got[0].Unit)
			} else {
				assert.Empty(t, got)
			}
		})
	}
}

// dlamiFacts builds facts for every unit file of the dlami fixture, each
// marked as started at boot (the most work for the policies).
func dlamiFacts(tb testing.TB, rs []rules.Rule) *facts.Document {
	src, err := fixtures.Source("dlami")
	require.NoError(tb, err)
	fsys := rootfs.New(src)
	var us []bootUnit
	seen := map[string]bool{}
	for _, dir := range []string{"etc/systemd/system", "lib/systemd/system", "usr/lib/systemd/system"} {
		ents, err := fsys.ReadDir(dir)
		require.NoError(tb, err)
		for _, e := range ents {
			n := e.Name()
			if unit.Type(n) == "" || unit.IsTemplate(n) || seen[n] {
				continue
			}
			seen[n] = true
			us = append(us, bootUnit{name: n, state: "enabled", boot: true, chain: wantsChain("multi-user.target", n)})
		}
	}
	var ins []facts.UnitInput
	for _, u := range us {
		in := facts.UnitInput{Name: u.name, State: u.state, StartsAtBoot: u.boot, Chain: u.chain}
		for _, dir := range unit.SearchPath {
			b, err := fsys.ReadFile(dir + "/" + u.name)
			if err != nil {
				continue
			}
			if opts, err := unit.ParseConfig(b); err == nil {
				in.Options = opts
			}
			break
		}
		ins = append(ins, in)
	}
	doc, err := facts.Build(fsys, ins, facts.Options{ConfigFiles: configRequests(rs)})
	require.NoError(tb, err)
	return doc
}

func BenchmarkNew(b *testing.B) {
	rs, err := rules.Load()
	require.NoError(b, err)
	rd, err := rules.Data(rs)
	require.NoError(b, err)
	start := cpuTime()
	for b.Loop() {
		_, err := New(context.Background(), Config{Rules: rd})
		require.NoError(b, err)
	}
	b.ReportMetric(float64((cpuTime()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

func BenchmarkEvaluateDLAMI(b *testing.B) {
	rs, err := rules.Load()
	require.NoError(b, err)
	rd, err := rules.Data(rs)
	require.NoError(b, err)
	ps, err := rules.LoadProfiles()
	require.NoError(b, err)
	pd, err := rules.ProfilesData(ps)
	require.NoError(b, err)
	e, err := New(context.Background(), Config{Rules: rd, Profiles: pd, Profile: "k8s-gpu-node"})
	require.NoError(b, err)
	doc := dlamiFacts(b, rs)
	b.ReportMetric(float64(len(doc.Units)), "units")
	start := cpuTime()
	for b.Loop() {
		fs, err := e.Evaluate(context.Background(), doc)
		require.NoError(b, err)
		if len(fs) == 0 {
			b.Fatal("no findings")
		}
	}
	// CPU time per evaluation, steadier than wall time on a shared machine.
	b.ReportMetric(float64((cpuTime()-start).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestCatalogAndPoliciesAgree checks that every generic rule of the catalog
// has a policy package that declares it (METADATA custom.rule_id), and
// every such package's rule is in the catalog: a generic rule without
// logic, or logic without a rule, fails here.
func TestCatalogAndPoliciesAgree(t *testing.T) {
	rs, err := rules.Load()
	require.NoError(t, err)
	catalogIDs := map[string]bool{}
	for _, r := range rs {
		if r.Kind == "generic" {
			catalogIDs[r.ID] = true
		}
	}
	mods, err := DefaultModules(false)
	require.NoError(t, err)
	parsed, err := ParseModules(mods)
	require.NoError(t, err)
	policyIDs := map[string]bool{}
	unitFamily := false
	for _, m := range parsed {
		for _, a := range m.Annotations {
			if a.Scope != "package" {
				continue
			}
			if id, ok := a.Custom["rule_id"].(string); ok {
				policyIDs[id] = true
			}
			// A family deciding several rules lists them (the live family).
			if ids, ok := a.Custom["rule_ids"].([]any); ok {
				for _, id := range ids {
					if s, ok := id.(string); ok {
						policyIDs[s] = true
					}
				}
			}
			if a.Custom["kind"] == "unit" {
				unitFamily = true
			}
		}
	}
	assert.Equal(t, catalogIDs, policyIDs)
	assert.True(t, unitFamily, "a package decides the catalog's unit rules")
}
