package rules_test

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/boot"
	"github.com/amilint/amilint/internal/facts"
	"github.com/amilint/amilint/internal/finding"
	"github.com/amilint/amilint/internal/install"
	"github.com/amilint/amilint/internal/policy"
	"github.com/amilint/amilint/internal/rootfs"
	"github.com/amilint/amilint/rules"
)

// audit runs the catalog over a fixture through the real pipeline: unit
// states (install), the boot transaction (boot), the facts document and the
// default Rego policies. It is the catalog's own check that what its
// rationales claim about the fixtures holds.
func audit(t *testing.T, fixture, profile string) []finding.Finding {
	t.Helper()
	ctx := context.Background()
	src, err := fixtures.Source(fixture)
	require.NoError(t, err)
	fsys := rootfs.New(src)
	files, err := install.List(fsys)
	require.NoError(t, err)
	presets, err := install.Preset(fsys)
	require.NoError(t, err)
	g, err := boot.Load(fsys)
	require.NoError(t, err)
	b := g.Boot()

	inputs := map[string]facts.UnitInput{}
	add := func(name string, in facts.UnitInput) {
		u := g.Unit(name)
		if u != nil {
			in.Options = u.Options
			if in.DropIns == nil {
				in.DropIns = u.DropIns
			}
		}
		in.Name = name
		in.Chain, in.StartsAtBoot = b.Start[name]
		if !in.StartsAtBoot {
			in.Chain = b.Activated[name]
		}
		in.ActivatedBy = b.ActivatedBy[name]
		in.Preset = string(presets[name])
		inputs[name] = in
	}
	for _, f := range files {
		add(f.Name, facts.UnitInput{State: string(f.State), Path: f.Path, Fragment: f.Fragment, DropIns: f.DropIns, Aliases: f.Aliases})
	}
	// Instances (getty@tty1.service) start at boot without a unit file of
	// their own name.
	for _, m := range []map[string][]finding.Edge{b.Start, b.Activated} {
		for name := range m {
			if _, ok := inputs[name]; !ok {
				add(name, facts.UnitInput{})
			}
		}
	}
	var list []facts.UnitInput
	for _, in := range inputs {
		list = append(list, in)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })

	rs, err := rules.Load()
	require.NoError(t, err)
	var reqs []facts.ConfigRequest
	for _, c := range rules.ConfigRequests(rs) {
		reqs = append(reqs, facts.ConfigRequest{Path: c.Path, Format: c.Format})
	}
	doc, err := facts.Build(fsys, list, facts.Options{ConfigFiles: reqs})
	require.NoError(t, err)

	data, err := rules.Data(rs)
	require.NoError(t, err)
	ps, err := rules.LoadProfiles()
	require.NoError(t, err)
	pdata, err := rules.ProfilesData(ps)
	require.NoError(t, err)
	eng, err := policy.New(ctx, policy.Config{Rules: data, Profiles: pdata, Profile: profile, Target: "fixture:" + fixture})
	require.NoError(t, err)
	raw, err := json.Marshal(doc)
	require.NoError(t, err)
	var input any
	require.NoError(t, json.Unmarshal(raw, &input))
	fs, err := eng.Evaluate(ctx, input)
	require.NoError(t, err)
	return fs
}

func find(fs []finding.Finding, rule, unit string) *finding.Finding {
	i := slices.IndexFunc(fs, func(f finding.Finding) bool { return f.RuleID == rule && f.Unit == unit })
	if i < 0 {
		return nil
	}
	return &fs[i]
}

func describe(fs []finding.Finding) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString(f.Severity.String() + " " + f.RuleID + " " + f.Unit + "\n")
	}
	return b.String()
}

func TestCatalogOnDLAMI(t *testing.T) {
	fs := audit(t, "dlami", "")
	ecs := find(fs, "ecs-agent-unconfigured", "ecs.service")
	require.NotNil(t, ecs, describe(fs))
	assert.Equal(t, finding.High, ecs.Severity)
	var chain []string
	for _, e := range ecs.Chain {
		chain = append(chain, e.From+">"+e.To)
	}
	assert.Contains(t, chain, "multi-user.target>ecs.service", "the chain names the .wants link")
	assert.NotNil(t, find(fs, rules.CrashLoop, "ecs.service"), "ecs.service's restart pattern\n%s", describe(fs))
	assert.NotNil(t, find(fs, rules.ExecMissing, "amazon-cloudwatch-agent.service"), describe(fs))
	for _, want := range [][2]string{
		{"cloudwatch-agent-unconfigured", "amazon-cloudwatch-agent.service"},
		{"ssm-agent-unconfigured", "amazon-ssm-agent.service"},
		{"snapd-on-server", "snapd.service"},
		{"auto-upgrades-immutable", "apt-daily.timer"},
		{"motd-news", "motd-news.timer"},
		{"modemmanager", "ModemManager.service"},
		{"avahi", "avahi-daemon.service"},
		{"multipathd", "multipathd.service"},
		{"fwupd-refresh", "fwupd-refresh.timer"},
		{"ubuntu-advantage-timers", "ua-timer.timer"},
		{"apport", "apport-forward.socket"},
	} {
		assert.NotNil(t, find(fs, want[0], want[1]), "%s on %s\n%s", want[0], want[1], describe(fs))
	}
}

func TestCatalogECSConfigured(t *testing.T) {
	fs := audit(t, "dlami-ecs-configured", "")
	assert.Nil(t, find(fs, "ecs-agent-unconfigured", "ecs.service"), "a configured cluster means the agent is needed")
	assert.NotNil(t, find(fs, rules.CrashLoop, "ecs.service"), "the restart pattern is still there")
}

func TestCatalogOnHardenedHasNothingMediumOrAbove(t *testing.T) {
	fs := audit(t, "hardened", "")
	var bad []finding.Finding
	for _, f := range fs {
		if f.Severity >= finding.Medium {
			bad = append(bad, f)
		}
	}
	assert.Empty(t, bad, describe(bad))
}

func TestK8sGPUProfileOnHardened(t *testing.T) {
	fs := audit(t, "hardened", "k8s-gpu-node")
	var denied []string
	for _, f := range fs {
		if f.RuleID == rules.ProfileAllowlist {
			denied = append(denied, f.Unit)
		}
	}
	// The catalog has no rule about atd; the default-deny profile still
	// reports it, which is what profiles are for.
	assert.Equal(t, []string{"atd.service"}, denied)

	fs = audit(t, "dlami", "k8s-gpu-node")
	f := find(fs, rules.ProfileAllowlist, "ecs.service")
	require.NotNil(t, f, describe(fs))
	assert.NotEmpty(t, f.Chain)
}

func TestCatalogFirstBootUndoesDisable(t *testing.T) {
	fs := audit(t, "hardened-firstboot", "")
	for _, u := range []string{"ecs.service", "amazon-ssm-agent.service", "apt-daily.timer"} {
		f := find(fs, rules.FirstBootPresets, u)
		if assert.NotNil(t, f, "%s comes back at first boot\n%s", u, describe(fs)) {
			assert.Equal(t, finding.Medium, f.Severity)
		}
	}
	assert.Nil(t, find(fs, rules.FirstBootPresets, "snapd.service"), "a masked unit stays masked")
}
