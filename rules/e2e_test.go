package rules_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/rules"
)

// runAudit runs the catalog over a fixture through the real pipeline
// (internal/audit: unit states, the boot transaction, the facts document and
// the default Rego policies). It is the catalog's own check that what its
// rationales claim about the fixtures holds.
func runAudit(t *testing.T, fixture, profile string) []finding.Finding {
	t.Helper()
	return runAuditConfig(t, fixture, audit.Config{Profile: profile})
}

func runAuditConfig(t *testing.T, fixture string, cfg audit.Config) []finding.Finding {
	t.Helper()
	src, err := fixtures.Source(fixture)
	require.NoError(t, err)
	a, err := audit.New(cfg)
	require.NoError(t, err)
	res, err := a.Audit(context.Background(), rootfs.New(src), finding.Target{Name: "fixture:" + fixture, Kind: "fixture"})
	require.NoError(t, err)
	return res.Report.Findings
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
	fs := runAudit(t, "dlami", "")
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

// TestCatalogTraits: unattended upgrades are drift only on an immutable
// image; the k8s-gpu-node profile says its images are, as --trait does.
func TestCatalogTraits(t *testing.T) {
	assert.Nil(t, find(runAudit(t, "dlami", ""), "auto-upgrades-immutable", "apt-daily.timer"), "no trait, no finding")
	for _, c := range []audit.Config{{Traits: []string{"immutable"}}, {Profile: "k8s-gpu-node"}} {
		fs := runAuditConfig(t, "dlami", c)
		for _, u := range []string{"apt-daily.timer", "apt-daily-upgrade.timer"} {
			assert.NotNil(t, find(fs, "auto-upgrades-immutable", u), "%+v: %s\n%s", c, u, describe(fs))
		}
	}
	_, err := audit.New(audit.Config{Traits: []string{"Not A Slug"}})
	assert.ErrorContains(t, err, `trait "Not A Slug"`)
	_, err = audit.New(audit.Config{Traits: []string{"imutable"}})
	assert.ErrorContains(t, err, `trait "imutable": no rule or profile uses it (known: immutable, server)`)
}

func TestCatalogECSConfigured(t *testing.T) {
	fs := runAudit(t, "dlami-ecs-configured", "")
	assert.Nil(t, find(fs, "ecs-agent-unconfigured", "ecs.service"), "a configured cluster means the agent is needed")
	assert.NotNil(t, find(fs, rules.CrashLoop, "ecs.service"), "the restart pattern is still there")
}

func TestCatalogOnHardenedHasNothingMediumOrAbove(t *testing.T) {
	fs := runAudit(t, "hardened", "")
	var bad []finding.Finding
	for _, f := range fs {
		if f.Severity >= finding.Medium {
			bad = append(bad, f)
		}
	}
	assert.Empty(t, bad, describe(bad))
}

func TestK8sGPUProfileOnHardened(t *testing.T) {
	fs := runAudit(t, "hardened", "k8s-gpu-node")
	var denied []string
	for _, f := range fs {
		if f.RuleID == rules.ProfileAllowlist {
			denied = append(denied, f.Unit)
		}
	}
	// The catalog has no rule about atd; the default-deny profile still
	// reports it, which is what profiles are for.
	assert.Equal(t, []string{"atd.service"}, denied)

	fs = runAudit(t, "dlami", "k8s-gpu-node")
	f := find(fs, rules.ProfileAllowlist, "ecs.service")
	require.NotNil(t, f, describe(fs))
	assert.NotEmpty(t, f.Chain)
}

func TestCatalogFirstBootUndoesDisable(t *testing.T) {
	fs := runAudit(t, "hardened-firstboot", "")
	for _, u := range []string{"ecs.service", "amazon-ssm-agent.service", "apt-daily.timer"} {
		f := find(fs, rules.FirstBootPresets, u)
		if assert.NotNil(t, f, "%s comes back at first boot\n%s", u, describe(fs)) {
			assert.Equal(t, finding.Medium, f.Severity)
		}
	}
	assert.Nil(t, find(fs, rules.FirstBootPresets, "snapd.service"), "a masked unit stays masked")
}
