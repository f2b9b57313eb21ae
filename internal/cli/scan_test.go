package cli

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/image/ebs/ebstest"
	"github.com/amilint/amilint/internal/image/target"
	"github.com/amilint/amilint/internal/systemd/unit"
)

func materialize(t *testing.T, name string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	require.NoError(t, fixtures.Materialize(name, dir))
	return dir
}

// ruleFinding is the finding of rule id in rep, nil when it has none.
func ruleFinding(rep *finding.Report, id string) *finding.Finding {
	i := slices.IndexFunc(rep.Findings, func(f finding.Finding) bool { return f.RuleID == id })
	if i < 0 {
		return nil
	}
	return &rep.Findings[i]
}

func scanJSON(t *testing.T, args ...string) (int, *finding.Report, string) {
	t.Helper()
	code, out, stderr := runCLI(t, append([]string{"scan", "-o", "json"}, args...)...)
	if code == ExitError {
		return code, nil, stderr
	}
	rep, err := finding.Decode([]byte(out))
	require.NoError(t, err, "stdout is an amilint/v1 report:\n%s\nstderr: %s", out, stderr)
	return code, rep, stderr
}

func findingOf(rep *finding.Report, rule, unit string) *finding.Finding {
	for i, f := range rep.Findings {
		if f.RuleID == rule && f.Unit == unit {
			return &rep.Findings[i]
		}
	}
	return nil
}

func TestScanDefaultIsTheDLAMIFixture(t *testing.T) {
	code, rep, _ := scanJSON(t)
	assert.Equal(t, ExitFindings, code)
	assert.Equal(t, "fixture:dlami", rep.Target.Name)
	ecs := findingOf(rep, "ecs-agent-unconfigured", "ecs.service")
	require.NotNil(t, ecs, "the incident unit is found")
	assert.Equal(t, finding.High, ecs.Severity)
	assert.Equal(t, "disable", ecs.Remediation.Action)
	// The chain names how it starts: through the .wants link.
	last := ecs.Chain[len(ecs.Chain)-1]
	assert.Equal(t, "ecs.service", last.To)
	assert.Equal(t, "multi-user.target", last.From)
	assert.Equal(t, "/etc/systemd/system/multi-user.target.wants/ecs.service", last.Source)
	assert.Equal(t, "default.target", ecs.Chain[0].From)
	assert.NotNil(t, findingOf(rep, "crash-loop-restart", "ecs.service"), "the crash-loop pattern of the incident")
}

func TestScanDirectoryTargets(t *testing.T) {
	t.Run("dlami directory", func(t *testing.T) {
		code, rep, _ := scanJSON(t, materialize(t, "dlami"))
		assert.Equal(t, ExitFindings, code)
		assert.NotNil(t, findingOf(rep, "ecs-agent-unconfigured", "ecs.service"))
	})
	t.Run("ECS_CLUSTER set: the high finding is gone", func(t *testing.T) {
		_, rep, _ := scanJSON(t, materialize(t, "dlami-ecs-configured"))
		assert.Nil(t, findingOf(rep, "ecs-agent-unconfigured", "ecs.service"))
	})
	t.Run("hardened exits 0", func(t *testing.T) {
		code, rep, _ := scanJSON(t, materialize(t, "hardened"))
		assert.Equal(t, ExitOK, code, "%+v", rep.Findings)
	})
	t.Run("hardened has no findings but its services' exposure: fail-on medium exits 0", func(t *testing.T) {
		// Disabling what is not needed does not sandbox what runs: the
		// services it keeps are still exposed as systemd-analyze scores
		// them (service-exposure, low).
		code, rep, stderr := scanJSON(t, "fixture:hardened", "--fail-on", "medium")
		require.NotNil(t, rep, stderr)
		for _, f := range rep.Findings {
			assert.Equal(t, "service-exposure", f.RuleID, "%+v", f)
		}
		assert.NotEmpty(t, rep.Findings)
		assert.Equal(t, ExitOK, code)
	})
}

func TestScanUserPolicyDataAndWaivers(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "policy")
	require.NoError(t, os.MkdirAll(pol, 0o755))
	// A user policy: every unit named in data.user.forbidden that starts at
	// boot is a critical finding.
	require.NoError(t, os.WriteFile(filepath.Join(pol, "forbidden.rego"), []byte(`package amilint.rules.user_forbidden

import rego.v1

findings contains f if {
	some name in data.user.forbidden
	u := input.units[name]
	u.starts_at_boot
	f := {
		"rule_id": "user-forbidden",
		"severity": "critical",
		"unit": name,
		"message": sprintf("%s is forbidden on this fleet", [name]),
		"chain": u.chain,
		"remediation": {"action": "mask", "units": [name]},
	}
}
`), 0o644))
	data := filepath.Join(dir, "data.yaml")
	require.NoError(t, os.WriteFile(data, []byte("forbidden:\n  - cron.service\n"), 0o644))
	waivers := filepath.Join(dir, "waivers.yaml")
	require.NoError(t, os.WriteFile(waivers, []byte(`waivers:
  - rule_id: ecs-agent-unconfigured
    unit: ecs.service
    target: "fixture:*"
    reason: ECS cluster joins at first boot via user data (TICKET-1)
    expires: "2999-01-01"
  - rule_id: motd-news
    target: "*"
    reason: old exception
    expires: "2020-01-01"
`), 0o644))

	code, rep, stderr := scanJSON(t, "fixture:dlami", "--policy", pol, "--data", data, "--waivers", waivers)
	require.NotEqual(t, ExitError, code, stderr)
	cron := findingOf(rep, "user-forbidden", "cron.service")
	require.NotNil(t, cron, "the user policy ran with the user data")
	assert.Equal(t, finding.Critical, cron.Severity)
	ecs := findingOf(rep, "ecs-agent-unconfigured", "ecs.service")
	require.NotNil(t, ecs, "waived findings are shown, not dropped")
	assert.True(t, ecs.Waived)
	require.NotNil(t, ecs.Waiver)
	assert.Contains(t, ecs.Waiver.Reason, "TICKET-1")
	var expired bool
	for _, f := range rep.Findings {
		expired = expired || f.RuleID == "waiver-expired"
	}
	assert.True(t, expired, "an expired waiver is itself a finding")
	assert.Equal(t, ExitFindings, code, "the critical user finding fails the scan")
}

func TestScanErrorsExit2(t *testing.T) {
	corrupt := filepath.Join(t.TempDir(), "disk.img")
	require.NoError(t, os.WriteFile(corrupt, []byte("QFI\xfb garbage that claims to be a qcow2 image"), 0o644))
	badPolicy := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(badPolicy, "x.rego"), []byte("package x\nthis is not rego"), 0o644))
	for name, args := range map[string][]string{
		"missing target":   {"scan", "/nonexistent/root"},
		"empty directory":  {"scan", t.TempDir()},
		"corrupt image":    {"scan", corrupt},
		"bad flag":         {"scan", "--no-such-flag"},
		"bad fail-on":      {"scan", "--fail-on", "severe"},
		"bad format":       {"scan", "-o", "pdf"},
		"bad policy":       {"scan", "--policy", badPolicy},
		"unknown profile":  {"scan", "--profile", "no-such-profile"},
		"bad trait":        {"scan", "--trait", "Immutable Image"},
		"empty trait":      {"scan", "--trait", "immutable,"},
		"unknown trait":    {"scan", "--trait", "imutable"},
		"missing waivers":  {"scan", "--waivers", "/nonexistent/waivers.yaml"},
		"two targets":      {"scan", "a", "b"},
		"diff one target":  {"diff", "fixture:dlami"},
		"facts bad target": {"facts", "/nonexistent"},
		"report bad flag":  {"report", "--bogus"},
		"live bad flag":    {"live", "--bogus"},
		"version bad flag": {"version", "--bogus"},
		"version argument": {"version", "extra"},
		"policy bad flag":  {"policy", "test", "--bogus"},
		"units bad flag":   {"units", "--bogus"},
		"fix bad flag":     {"fix", "--bogus"},
		"diff bad flag":    {"diff", "--bogus"},
		"bad partition":    {"scan", "--partition", "-1"},
		"bad systemd ver":  {"facts", "--systemd-version", "25x"},
		"old systemd ver":  {"units", "--systemd-version", "219", "fixture:dlami"},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, stderr := runCLI(t, args...)
			assert.Equal(t, ExitError, code)
			assert.Empty(t, out)
			assert.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line naming the problem: %q", stderr)
		})
	}
}

// TestHelpPrintsUsage: -h prints the usage and the flags, and exits 0.
func TestHelpPrintsUsage(t *testing.T) {
	for _, args := range [][]string{{"scan"}, {"facts"}, {"diff"}, {"units"}, {"fix"}, {"live"}, {"report"}, {"policy", "test"}} {
		code, out, stderr := runCLI(t, append(args, "-h")...)
		assert.Equal(t, ExitOK, code, "%v", args)
		assert.Empty(t, out)
		assert.Contains(t, stderr, "usage: amilint "+strings.Join(args, " "), "%v", args)
		assert.Contains(t, stderr, "  -", "%v: the flags are listed", args)
	}
}

// TestScanTraits: auto-upgrades-immutable reports the apt timers only when
// the image is said to be immutable, by --trait or by the profile.
func TestScanTraits(t *testing.T) {
	units := func(args ...string) []string {
		code, out, stderr := runCLI(t, append([]string{"scan", "-o", "json", "--fail-on", "critical"}, args...)...)
		require.Equal(t, ExitOK, code, stderr)
		var rep finding.Report
		require.NoError(t, json.Unmarshal([]byte(out), &rep))
		var got []string
		for _, f := range rep.Findings {
			if f.RuleID == "auto-upgrades-immutable" {
				got = append(got, f.Unit)
			}
		}
		slices.Sort(got)
		return got
	}
	want := []string{"apt-daily-upgrade.timer", "apt-daily.timer", "unattended-upgrades.service"}
	assert.Empty(t, units())
	assert.Empty(t, units("--trait", "server"))
	assert.Equal(t, want, units("--trait", "immutable"))
	assert.Equal(t, want, units("--trait", "server,immutable"))
	assert.Equal(t, want, units("--profile", "k8s-gpu-node"))
}

func TestFactsIsThePolicyInput(t *testing.T) {
	code, out, _ := runCLI(t, "facts", "fixture:dlami")
	require.Equal(t, ExitOK, code)
	var doc struct {
		Schema string `json:"schema"`
		Units  map[string]struct {
			State        string `json:"state"`
			StartsAtBoot bool   `json:"starts_at_boot"`
			Restart      string `json:"restart"`
		} `json:"units"`
		ConfigFiles map[string]any `json:"config_files"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	assert.Equal(t, "amilint-facts/v1", doc.Schema)
	ecs := doc.Units["ecs.service"]
	assert.Equal(t, "enabled", ecs.State)
	assert.True(t, ecs.StartsAtBoot)
	assert.Equal(t, "on-failure", ecs.Restart)
	assert.Contains(t, doc.ConfigFiles, "/etc/ecs/ecs.config", "config files the rules name are in the facts")
}

// TestSystemdVersionFlag: the facts say which systemd version the model
// followed, and --systemd-version overrides the image's on every command
// that models units.
func TestSystemdVersionFlag(t *testing.T) {
	type sd struct {
		Version int    `json:"version"`
		Source  string `json:"source"`
	}
	facts := func(args ...string) sd {
		code, out, stderr := runCLI(t, append([]string{"facts", "fixture:dlami"}, args...)...)
		require.Equal(t, ExitOK, code, stderr)
		var doc struct {
			Systemd sd `json:"systemd"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &doc))
		return doc.Systemd
	}
	assert.Equal(t, sd{Version: 252, Source: "default"}, facts(), "the fixture names no systemd")
	assert.Equal(t, sd{Version: 257, Source: "override"}, facts("--systemd-version", "257"))
	for _, args := range [][]string{
		{"scan", "--systemd-version", "254", "fixture:dlami"},
		{"diff", "--systemd-version", "254", "fixture:dlami", "fixture:dlami"},
		{"units", "--systemd-version", "257", "-o", "json", "fixture:dlami"},
	} {
		code, _, stderr := runCLI(t, args...)
		assert.NotEqual(t, ExitError, code, "%v: %s", args, stderr)
	}
	for _, cmd := range []string{"scan", "facts", "diff", "units", "fix"} {
		_, _, stderr := runCLI(t, cmd, "-h")
		assert.Contains(t, stderr, "-systemd-version N", cmd)
	}
}

func TestDiffFixedAgainstOriginal(t *testing.T) {
	// The hardened fixture is the DLAMI image after the fixes a platform
	// team makes; DLAMI → hardened resolves findings, hardened → DLAMI adds
	// them back and fails.
	code, out, stderr := runCLI(t, "diff", "-o", "json", "fixture:dlami", "fixture:hardened")
	require.Equal(t, ExitOK, code, stderr)
	var d struct {
		Disabled []struct {
			Unit string `json:"unit"`
		} `json:"disabled"`
		Resolved []finding.Finding `json:"findings_resolved"`
		Added    []finding.Finding `json:"findings_added"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &d))
	assert.Empty(t, d.Added)
	assert.True(t, slices.ContainsFunc(d.Resolved, func(f finding.Finding) bool { return f.Unit == "ecs.service" }))

	code, out, _ = runCLI(t, "diff", "-o", "json", "fixture:hardened", "fixture:dlami")
	assert.Equal(t, ExitFindings, code, "NEW adds a high finding")
	require.NoError(t, json.Unmarshal([]byte(out), &d))
	assert.True(t, slices.ContainsFunc(d.Added, func(f finding.Finding) bool { return f.Unit == "ecs.service" }))
}

// TestEBSTarget serves an ext4 image of the DLAMI fixture as an EBS
// snapshot (and an AMI over it) from a loopback fake that checks SigV4
// signatures, and audits it through the standard AWS configuration chain.
func TestEBSTarget(t *testing.T) {
	mke2fs, err := exec.LookPath("mke2fs")
	if err != nil {
		mke2fs = "/usr/sbin/mke2fs"
	}
	root := materialize(t, "dlami")
	img := filepath.Join(t.TempDir(), "root.ext4")
	out, err := exec.Command(mke2fs, "-q", "-t", "ext4", "-d", root, img, "64M").CombinedOutput()
	require.NoError(t, err, string(out))
	data, err := os.ReadFile(img)
	require.NoError(t, err)

	srv := &ebstest.Server{
		Snapshots: map[string]ebstest.Snapshot{"snap-0123": {Data: data}},
		Images:    map[string]ebstest.Image{"ami-0dlami": {RootDevice: "/dev/sda1", SnapshotID: "snap-0123"}},
	}
	url := srv.Start()
	defer srv.Close()
	ebstest.UseEndpoint(t, url)
	code, want, stderr := runCLI(t, "units", root, "-o", "tsv")
	require.Equal(t, ExitOK, code, stderr)
	for _, spec := range []string{"ebs:snap-0123", "ami:ami-0dlami"} {
		code, got, stderr := runCLI(t, "units", spec, "-o", "tsv")
		require.Equal(t, ExitOK, code, stderr)
		assert.Equal(t, want, got, spec)
	}
	_, dirRep, _ := scanJSON(t, root)
	code, ebsRep, stderr := scanJSON(t, "ami:ami-0dlami")
	require.Equal(t, ExitFindings, code, stderr)
	assert.Equal(t, len(dirRep.Findings), len(ebsRep.Findings))
	for i := range dirRep.Findings {
		assert.Equal(t, dirRep.Findings[i].RuleID+" "+dirRep.Findings[i].Unit, ebsRep.Findings[i].RuleID+" "+ebsRep.Findings[i].Unit)
	}
	assert.Equal(t, "ami", ebsRep.Target.Kind)
	for _, spec := range []string{"ebs:snap-0123", "ami:ami-0dlami"} {
		im, err := target.Open(context.Background(), spec, target.Options{})
		require.NoError(t, err)
		assert.True(t, im.FS.IsRemote(), "%s: its readers keep many reads in flight", spec)
		require.NoError(t, im.Close())
		// Closing the image closed its snapshot: the reads ahead in
		// flight are cancelled and nothing more is fetched.
		_, err = im.FS.ReadFile("etc/ecs/ecs.config")
		require.ErrorIs(t, err, fs.ErrClosed, spec)
	}
	// The server's counters under its lock: its handlers of the reads
	// cancelled above may still be running.
	_, fetched, _ := srv.Counts()
	assert.Zero(t, srv.BadSignatures())
	assert.Less(t, fetched*ebstest.BlockSize, len(data), "reads only the blocks it needs")

	code, _, stderr = runCLI(t, "units", "ebs:snap-missing")
	assert.Equal(t, ExitError, code)
	assert.Contains(t, stderr, "snap-missing")
}

func TestUnitsJSONSaysWhatStartsAtBootAndWhy(t *testing.T) {
	code, out, stderr := runCLI(t, "units", "fixture:dlami", "-o", "json")
	require.Equal(t, ExitOK, code, stderr)
	var doc unitsDoc
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	byName := map[string]unitJSON{}
	for _, u := range doc.Units {
		byName[u.Name] = u
	}
	ecs := byName["ecs.service"]
	require.NotNil(t, ecs.StartsAtBoot)
	assert.True(t, *ecs.StartsAtBoot)
	require.NotEmpty(t, ecs.Chain)
	assert.Equal(t, "default.target", ecs.Chain[0].From)
	assert.Equal(t, unit.Edge{From: "multi-user.target", To: "ecs.service", Kind: ".wants",
		Source: "/etc/systemd/system/multi-user.target.wants/ecs.service"}, ecs.Chain[len(ecs.Chain)-1])

	// A timer's service does not start at boot: the started timer activates it.
	apt := byName["apt-daily.service"]
	require.NotNil(t, apt.StartsAtBoot)
	assert.False(t, *apt.StartsAtBoot)
	assert.Equal(t, []string{"apt-daily.timer"}, apt.ActivatedBy)
	assert.Equal(t, "timer", apt.Chain[len(apt.Chain)-1].Kind)
}

func TestDiffAgainstTheFixedCopy(t *testing.T) {
	old := materialize(t, "dlami")
	fixed := materialize(t, "dlami")
	code, out, stderr := runCLI(t, "fix", fixed)
	require.Equal(t, ExitOK, code, "fix then nothing at or above high remains:\n%s\n%s", out, stderr)

	type change struct {
		Unit string `json:"unit"`
	}
	var d struct {
		Disabled        []change          `json:"disabled"`
		NewlyEnabled    []change          `json:"newly_enabled"`
		NoLongerStarted []change          `json:"no_longer_started_at_boot"`
		NewlyStarted    []change          `json:"newly_started_at_boot"`
		Resolved        []finding.Finding `json:"findings_resolved"`
		Added           []finding.Finding `json:"findings_added"`
	}
	units := func(cs []change) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Unit)
		}
		return out
	}
	code, out, stderr = runCLI(t, "diff", "-o", "json", old, fixed)
	require.Equal(t, ExitOK, code, stderr)
	require.NoError(t, json.Unmarshal([]byte(out), &d))
	assert.Contains(t, units(d.Disabled), "ecs.service")
	assert.Contains(t, units(d.NoLongerStarted), "ecs.service")
	assert.Empty(t, d.NewlyEnabled)
	assert.Empty(t, d.Added)
	assert.True(t, slices.ContainsFunc(d.Resolved, func(f finding.Finding) bool { return f.RuleID == "ecs-agent-unconfigured" }))

	code, out, _ = runCLI(t, "diff", "-o", "json", fixed, old)
	assert.Equal(t, ExitFindings, code, "going back re-adds the high finding")
	d.Disabled, d.NewlyEnabled, d.NewlyStarted, d.Added = nil, nil, nil, nil
	require.NoError(t, json.Unmarshal([]byte(out), &d))
	assert.Contains(t, units(d.NewlyEnabled), "ecs.service")
	assert.Contains(t, units(d.NewlyStarted), "ecs.service")
	assert.True(t, slices.ContainsFunc(d.Added, func(f finding.Finding) bool { return f.RuleID == "ecs-agent-unconfigured" }))

	for _, format := range []string{"text", "markdown", "html"} {
		code, out, _ = runCLI(t, "diff", "-o", format, fixed, old)
		assert.Equal(t, ExitFindings, code)
		assert.Contains(t, out, "ecs.service", format)
	}
}

// TestScanOrderingCycle: a service with default dependencies ordered
// Before=sysinit.target closes an ordering cycle systemd breaks by deleting
// a job it picks at random: a high finding naming the candidates, and the
// facts list the cycle and the units that may not start.
func TestScanOrderingCycle(t *testing.T) {
	dir := materialize(t, "dlami")
	sys := filepath.Join(dir, "etc/systemd/system")
	require.NoError(t, os.WriteFile(filepath.Join(sys, "early.service"), []byte("[Unit]\nBefore=sysinit.target\n[Service]\nExecStart=/bin/true\n"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(sys, "multi-user.target.wants"), 0o755))
	require.NoError(t, os.Symlink("/etc/systemd/system/early.service", filepath.Join(sys, "multi-user.target.wants/early.service")))

	code, rep, stderr := scanJSON(t, dir)
	require.Equal(t, ExitFindings, code, stderr)
	f := ruleFinding(rep, "boot-ordering-cycle")
	require.NotNil(t, f, "findings: %v", rep.Findings)
	assert.Equal(t, finding.High, f.Severity)
	assert.Contains(t, f.Message, "early.service")
	assert.Contains(t, f.Message, "differently from boot to boot")

	code, out, stderr := runCLI(t, "facts", dir)
	require.Equal(t, ExitOK, code, stderr)
	var doc struct {
		Boot struct {
			OrderingCycles []struct{ Units, Deletable []string } `json:"ordering_cycles"`
			MayNotStart    []string                              `json:"may_not_start"`
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	require.Len(t, doc.Boot.OrderingCycles, 1)
	assert.Contains(t, doc.Boot.OrderingCycles[0].Units, "sysinit.target")
	assert.Contains(t, doc.Boot.OrderingCycles[0].Deletable, "early.service")
	assert.Contains(t, doc.Boot.MayNotStart, "early.service")
}

// TestScanBootTransactionFails: a masked or missing unit that
// default.target requires is a critical finding naming the chain, and
// scan exits 1, never 2; facts carries systemd's reason.
func TestScanBootTransactionFails(t *testing.T) {
	dir := materialize(t, "dlami")
	req := filepath.Join(dir, "etc/systemd/system/multi-user.target.requires")
	require.NoError(t, os.MkdirAll(req, 0o755))
	require.NoError(t, os.Symlink("/opt/gone/agent.service", filepath.Join(req, "agent.service")))

	code, rep, stderr := scanJSON(t, dir)
	require.Equal(t, ExitFindings, code, stderr)
	f := findingOf(rep, "boot-transaction-fails", "agent.service")
	require.NotNil(t, f, "findings: %v", rep.Findings)
	assert.Equal(t, finding.Critical, f.Severity)
	assert.Contains(t, f.Message, "Failed to isolate default target: Unit agent.service not found.")
	require.NotEmpty(t, f.Chain)
	assert.Equal(t, "default.target", f.Chain[0].From)
	assert.Equal(t, unit.Edge{From: "multi-user.target", To: "agent.service", Kind: ".requires",
		Source: "/etc/systemd/system/multi-user.target.requires/agent.service"}, f.Chain[len(f.Chain)-1])

	code, out, stderr := runCLI(t, "facts", dir)
	require.Equal(t, ExitOK, code, stderr)
	var doc struct {
		Boot struct {
			Target     string `json:"target"`
			Failed     string `json:"failed"`
			FailedUnit string `json:"failed_unit"`
		} `json:"boot"`
		Units map[string]struct {
			StartsAtBoot bool `json:"starts_at_boot"`
		} `json:"units"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	assert.Equal(t, "graphical.target", doc.Boot.Target, "the DLAMI boots to graphical.target, which requires multi-user.target")
	assert.Equal(t, "Failed to isolate default target: Unit agent.service not found.", doc.Boot.Failed)
	assert.Equal(t, "agent.service", doc.Boot.FailedUnit)
	for name, u := range doc.Units {
		assert.False(t, u.StartsAtBoot, "%s starts though nothing can", name)
	}

	// The DLAMI ships its units under /lib/systemd/system on a split /usr:
	// systemd 257 (no split-usr) finds no default.target and no
	// rescue.target there.
	code, rep, stderr = scanJSON(t, "--systemd-version", "257", "fixture:dlami")
	require.Equal(t, ExitFindings, code, stderr)
	require.NotNil(t, findingOf(rep, "boot-transaction-fails", "rescue.target"), "findings: %v", rep.Findings)
	require.NotNil(t, findingOf(rep, "boot-rescue-fallback", "default.target"))
}

// TestScanRuntimeFiles: units an image ships under /run/systemd are a low
// finding, and do not start at boot.
func TestScanRuntimeFiles(t *testing.T) {
	dir := materialize(t, "hardened")
	run := filepath.Join(dir, "run/systemd/system")
	require.NoError(t, os.MkdirAll(filepath.Join(run, "multi-user.target.wants"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(run, "runtime-agent.service"), []byte("[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n"), 0o644))
	require.NoError(t, os.Symlink("../runtime-agent.service", filepath.Join(run, "multi-user.target.wants/runtime-agent.service")))

	code, rep, stderr := scanJSON(t, "--fail-on", "critical", dir)
	require.Equal(t, ExitOK, code, stderr)
	f := findingOf(rep, "runtime-files-shipped", "")
	require.NotNil(t, f, "findings: %v", rep.Findings)
	assert.Equal(t, finding.Low, f.Severity)
	assert.Contains(t, f.Message, "/run/systemd/system/multi-user.target.wants/runtime-agent.service")

	code, out, stderr := runCLI(t, "units", "-o", "tsv", dir)
	require.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, out, "runtime-agent.service\tenabled-runtime\n", "units keeps systemctl's spelling")
	code, out, stderr = runCLI(t, "units", "-o", "json", dir)
	require.Equal(t, ExitOK, code, stderr)
	var doc struct {
		Units []struct {
			Name         string `json:"name"`
			StartsAtBoot *bool  `json:"starts_at_boot"`
		} `json:"units"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	for _, u := range doc.Units {
		if u.Name == "runtime-agent.service" {
			require.NotNil(t, u.StartsAtBoot)
			assert.False(t, *u.StartsAtBoot)
		}
	}
}

// TestScanConditions: a unit that starts at boot but whose
// ConditionKernelCommandLine= fails on the command line the image's GRUB
// passes never runs, so the missing-executable finding about it is
// softened to info and says why; --assume decides it the other way.
func TestScanConditions(t *testing.T) {
	dir := materialize(t, "dlami")
	write := func(p, s string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644))
	}
	write("boot/grub/grub.cfg", "menuentry 'Ubuntu' {\n\tlinux /boot/vmlinuz-5.15.0-1051-aws root=LABEL=cloudimg-rootfs ro console=tty1 console=ttyS0 nvme_core.io_timeout=4294967295\n}\n")
	write("lib/systemd/system/recovery-agent.service",
		"[Unit]\nConditionKernelCommandLine=snapd_recovery_mode\n[Service]\nExecStart=/usr/lib/vendor/recovery-agent listen\n[Install]\nWantedBy=multi-user.target\n")
	require.NoError(t, os.Symlink("/lib/systemd/system/recovery-agent.service",
		filepath.Join(dir, "etc/systemd/system/multi-user.target.wants/recovery-agent.service")))
	const name = "recovery-agent.service"

	code, rep, stderr := scanJSON(t, "--fail-on", "critical", dir)
	require.NotEqual(t, ExitError, code, stderr)
	f := findingOf(rep, "exec-missing", name)
	require.NotNil(t, f, "findings: %v", rep.Findings)
	assert.Equal(t, finding.Info, f.Severity)
	assert.Contains(t, f.Message, "never runs: its conditions fail in the image (ConditionKernelCommandLine=snapd_recovery_mode: snapd_recovery_mode is not on the kernel command line the image boots with (/boot/grub/grub.cfg))")

	code, out, stderr := runCLI(t, "facts", dir)
	require.Equal(t, ExitOK, code, stderr)
	var doc struct {
		Image struct {
			Machine struct {
				CmdLines []struct {
					Value, Source string
				} `json:"kernel_command_lines"`
				Architecture string `json:"architecture"`
			} `json:"machine"`
		} `json:"image"`
		Units map[string]struct {
			StartsAtBoot  bool   `json:"starts_at_boot"`
			ConditionsMet string `json:"conditions_met"`
			WouldRun      string `json:"would_run"`
			Conditions    []struct {
				Setting, Value, Verdict, Reason string
			} `json:"conditions"`
		} `json:"units"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	require.Len(t, doc.Image.Machine.CmdLines, 1)
	assert.Equal(t, "/boot/grub/grub.cfg", doc.Image.Machine.CmdLines[0].Source)
	u := doc.Units[name]
	assert.True(t, u.StartsAtBoot, "systemd still queues its start job")
	assert.Equal(t, "false", u.ConditionsMet)
	assert.Equal(t, "false", u.WouldRun)
	require.Len(t, u.Conditions, 1)
	assert.Equal(t, "ConditionKernelCommandLine", u.Conditions[0].Setting)
	assert.Equal(t, "false", u.Conditions[0].Verdict)
	assert.Equal(t, "true", doc.Units["ecs.service"].WouldRun)

	code, rep, stderr = scanJSON(t, "--fail-on", "critical", "--assume", "kernel-command-line=ro snapd_recovery_mode=install", dir)
	require.NotEqual(t, ExitError, code, stderr)
	f = findingOf(rep, "exec-missing", name)
	require.NotNil(t, f)
	assert.Equal(t, finding.Medium, f.Severity, "assumed on the command line, the unit runs")

	code, _, stderr = runCLI(t, "scan", "--assume", "virtualisation=kvm", dir)
	assert.Equal(t, ExitError, code)
	assert.Contains(t, stderr, "unknown key")
}

// TestAuditorErrorsComeFirst: scan and facts build the auditor while the
// image is opened and modelled, yet a flag the auditor refuses is reported
// before a target that cannot be opened or modelled, as when they were one
// after the other.
func TestAuditorErrorsComeFirst(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-image")
	empty := t.TempDir() // opens, but is no image root
	for _, cmd := range []string{"scan", "facts"} {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"--rules", missing, missing}, "load rules"},
			{[]string{"--profile", "nope", missing}, `no profile "nope"`},
			{[]string{"--profile", "nope", empty}, `no profile "nope"`},
			{[]string{"--fail-on", "nope", missing}, "--fail-on"},
			{[]string{missing}, "no-such-image"},
		} {
			code, _, stderr := runCLI(t, append([]string{cmd}, c.args...)...)
			assert.Equal(t, ExitError, code, "%s %v", cmd, c.args)
			assert.Contains(t, stderr, c.want, "%s %v", cmd, c.args)
			assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		}
	}
}

// TestUserFilesBounded: every file a user names is read up to 64 MiB and
// no further. A device that never ends stands for a huge or hostile file:
// each command exits 2 at once naming it, where it read until the kernel
// killed it.
func TestUserFilesBounded(t *testing.T) {
	dir := t.TempDir()
	pols := filepath.Join(dir, "policies")
	require.NoError(t, os.Mkdir(pols, 0o755))
	require.NoError(t, os.Symlink("/dev/zero", filepath.Join(pols, "endless.rego")))
	report := filepath.Join(dir, "good.json")
	code, out, stderr := runCLI(t, "scan", "fixture:dlami", "-o", "json")
	require.Equal(t, ExitFindings, code, stderr)
	require.NoError(t, os.WriteFile(report, []byte(out), 0o644))
	for name, args := range map[string][]string{
		"waivers":         {"scan", "--waivers", "/dev/zero"},
		"data":            {"scan", "--data", "/dev/zero"},
		"policy dir":      {"scan", "--policy", pols},
		"policy test":     {"policy", "test", pols},
		"report":          {"report", report, "/dev/zero"},
		"security policy": {"security", "fixture:dlami", "--security-policy", "/dev/zero"},
	} {
		t.Run(name, func(t *testing.T) {
			code, out, stderr := runCLI(t, args...)
			assert.Equal(t, ExitError, code, stderr)
			assert.Empty(t, out)
			assert.Contains(t, stderr, "file too large: over 64MiB")
			assert.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line naming the problem: %q", stderr)
		})
	}
}

// TestOutputFileIsWholeOrUnchanged: --output writes beside the file and
// renames into place once the report is whole. A run that fails or is
// killed while writing leaves the previous report as it was, where it used
// to leave half a report for a CI gate to read; a link is followed, as a
// shell's redirection follows it, and the file keeps its mode.
func TestOutputFileIsWholeOrUnchanged(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.json")
	require.NoError(t, os.WriteFile(path, []byte("the previous report"), 0o640))
	e := &env{stdout: io.Discard}

	// Killed, or failed, in the middle of the report.
	for _, end := range []func(o *reportOut){func(o *reportOut) {}, func(o *reportOut) { o.Discard() }} {
		o, err := output(e, path)
		require.NoError(t, err)
		_, err = o.Write([]byte(`{"schema":"amilint/v1","findi`))
		require.NoError(t, err)
		end(o)
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, "the previous report", string(b))
	}

	link := filepath.Join(dir, "latest.json")
	require.NoError(t, os.Symlink("report.json", link))
	code, _, stderr := runCLI(t, "scan", "fixture:dlami", "-o", "json", "--output", link)
	require.Equal(t, ExitFindings, code, stderr)
	fi, err := os.Lstat(link)
	require.NoError(t, err)
	assert.Equal(t, fs.ModeSymlink, fi.Mode().Type(), "the link stays a link")
	fi, err = os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o640), fi.Mode().Perm())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	_, err = finding.Decode(b)
	require.NoError(t, err, "a whole report")

	// The killed run's file is the only thing left beside it.
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, d := range ents {
		names = append(names, d.Name())
	}
	assert.Len(t, names, 3, "report, link and the killed run's partial file: %v", names)

	// A directory where no new file may be made (a log directory whose
	// file the user may write): the report is written in place, as
	// before.
	createTemp = func(string, string) (*os.File, error) { return nil, fs.ErrPermission }
	defer func() { createTemp = os.CreateTemp }()
	require.NoError(t, os.WriteFile(path, []byte("the previous report"), 0o640))
	code, _, stderr = runCLI(t, "scan", "fixture:dlami", "-o", "json", "--output", path)
	require.Equal(t, ExitFindings, code, stderr)
	b, err = os.ReadFile(path)
	require.NoError(t, err)
	_, err = finding.Decode(b)
	require.NoError(t, err, "a whole report, written in place")
	createTemp = os.CreateTemp

	// Not a regular file: written as it is.
	code, _, stderr = runCLI(t, "scan", "fixture:dlami", "-o", "json", "--output", "/dev/null")
	require.Equal(t, ExitFindings, code, stderr)
	fi, err = os.Stat("/dev/null")
	require.NoError(t, err)
	assert.Equal(t, fs.ModeDevice|fs.ModeCharDevice, fi.Mode().Type(), "/dev/null is still /dev/null")
}

// TestErrorLineIsPrintable: what an error quotes of a hostile policy file
// (OPA quotes the offending line) or of a unit name given reaches stderr
// as one line without terminal escapes.
func TestErrorLineIsPrintable(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x.rego"),
		[]byte("package amilint.rules.x\nimport rego.v1\nfindings contains f if { f := \"\x1b]0;PWNED\a\x1b[2J\" +++ }\n"), 0o644))
	for name, args := range map[string][]string{
		"policy parse error": {"scan", "--policy", dir},
		"security unit name": {"security", "fixture:dlami", "x\x1b[2J\ny.service"},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, stderr := runCLI(t, args...)
			assert.Equal(t, ExitError, code)
			assert.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %q", stderr)
			assert.NotContains(t, stderr, "\x1b")
			assert.NotContains(t, stderr, "\a")
			assert.Contains(t, stderr, "\uFFFD")
		})
	}
}

// TestScanMountInstanceDevice: a mount unit installed RequiredBy=
// local-fs.target for /dev/xvdf, a second disk by its kernel name, is a
// high finding with the chain through local-fs.target; the same unit
// WantedBy= (what nofail does for an fstab entry) is none.
func TestScanMountInstanceDevice(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		want bool
	}{{"local-fs.target.requires", true}, {"local-fs.target.wants", false}} {
		t.Run(tc.dir, func(t *testing.T) {
			dir := materialize(t, "dlami")
			sys := filepath.Join(dir, "etc/systemd/system")
			require.NoError(t, os.WriteFile(filepath.Join(sys, "data.mount"), []byte("[Mount]\nWhat=/dev/xvdf\nWhere=/data\nType=ext4\n"), 0o644))
			require.NoError(t, os.MkdirAll(filepath.Join(sys, tc.dir), 0o755))
			require.NoError(t, os.Symlink("/etc/systemd/system/data.mount", filepath.Join(sys, tc.dir, "data.mount")))

			code, rep, stderr := scanJSON(t, dir)
			require.Equal(t, ExitFindings, code, stderr)
			f := ruleFinding(rep, "boot-mount-instance-device")
			if !tc.want {
				assert.Nil(t, f, "findings: %v", rep.Findings)
				return
			}
			require.NotNil(t, f, "findings: %v", rep.Findings)
			assert.Equal(t, finding.High, f.Severity)
			assert.Equal(t, "data.mount", f.Unit)
			assert.Contains(t, f.Message, "data.mount mounts /dev/xvdf, a second disk by its kernel name")
			assert.Contains(t, f.Message, "through /etc/systemd/system/local-fs.target.requires/data.mount")
			require.NotEmpty(t, f.Chain)
			assert.Equal(t, "local-fs.target", f.Chain[len(f.Chain)-1].From)
		})
	}
}

// TestScanOfflineUpdate: an image with /system-update and
// systemd-system-update-generator boots into system-update.target; scan
// says so (medium), naming the generator's link, and without the flag
// says nothing.
func TestScanOfflineUpdate(t *testing.T) {
	for _, flag := range []bool{true, false} {
		t.Run(strconv.FormatBool(flag), func(t *testing.T) {
			dir := materialize(t, "dlami")
			lib := filepath.Join(dir, "lib/systemd")
			files := map[string]string{
				"system/system-update.target":                       "[Unit]\nRequires=sysinit.target\nAfter=sysinit.target\nAllowIsolate=yes\nWants=system-update-pre.target system-update-cleanup.service\n",
				"system/system-update-pre.target":                   "[Unit]\nBefore=system-update.target\n",
				"system/system-update-cleanup.service":              "[Unit]\nDefaultDependencies=no\nAfter=system-update.target\nSuccessAction=reboot\n[Service]\nType=oneshot\nExecStart=rm -fv /system-update\n",
				"system-generators/systemd-system-update-generator": "\x7fELF",
			}
			for name, data := range files {
				require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(lib, name)), 0o755))
				require.NoError(t, os.WriteFile(filepath.Join(lib, name), []byte(data), 0o755))
			}
			if flag {
				require.NoError(t, os.Symlink("/var/lib/PackageKit", filepath.Join(dir, "system-update")))
			}
			code, rep, stderr := scanJSON(t, dir)
			require.Contains(t, []int{ExitOK, ExitFindings}, code, stderr)
			f := ruleFinding(rep, "boot-offline-update")
			if !flag {
				assert.Nil(t, f, "findings: %v", rep.Findings)
				return
			}
			require.NotNil(t, f, "findings: %v", rep.Findings)
			assert.Equal(t, finding.Medium, f.Severity)
			assert.Equal(t, "system-update.target", f.Unit)
			assert.Contains(t, f.Message, "the image ships the offline-update flag")
			assert.Equal(t, "/run/systemd/generator.early/default.target", f.Evidence["source"])
			// The image's services do not start in the offline-update boot.
			assert.Nil(t, ruleFinding(rep, "ecs-agent-unconfigured"))
		})
	}
}

// TestScanFstabInstanceDevice: the DLAMI fixture with an Ubuntu cloud
// image's /etc/fstab, a data volume by its kernel name and a scratch
// volume with nofail, and systemd-fstab-generator: only the data volume's
// mount is a finding, named as an fstab entry; the image's own partitions
// (LABEL=) and the nofail entry are none.
func TestScanFstabInstanceDevice(t *testing.T) {
	dir := materialize(t, "dlami")
	gen := filepath.Join(dir, "lib/systemd/system-generators/systemd-fstab-generator")
	require.NoError(t, os.MkdirAll(filepath.Dir(gen), 0o755))
	require.NoError(t, os.WriteFile(gen, []byte("\x7fELF"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/fstab"), []byte(
		"LABEL=cloudimg-rootfs\t/\t ext4\tdiscard,errors=remount-ro\t0 1\n"+
			"LABEL=UEFI\t/boot/efi\tvfat\tumask=0077\t0 1\n"+
			"/dev/xvdf /data ext4 defaults 0 2\n"+
			"/dev/nvme2n1 /scratch xfs defaults,nofail 0 2\n"), 0o644))

	code, rep, stderr := scanJSON(t, dir)
	require.Equal(t, ExitFindings, code, stderr)
	var got []finding.Finding
	for _, f := range rep.Findings {
		if f.RuleID == "boot-mount-instance-device" {
			got = append(got, f)
		}
	}
	require.Len(t, got, 1, "findings: %v", rep.Findings)
	f := got[0]
	assert.Equal(t, "data.mount", f.Unit)
	assert.Contains(t, f.Message, "data.mount mounts /dev/xvdf, a second disk by its kernel name")
	assert.Contains(t, f.Message, "(an /etc/fstab entry without nofail)")
	assert.Equal(t, "/run/systemd/generator/local-fs.target.requires/data.mount", f.Evidence["required_by"])
	assert.Equal(t, "/data", f.Evidence["where"])
}

// debugShellUnit is systemd's debug-shell.service (252 and 257 alike in
// what the model reads).
const debugShellUnit = `[Unit]
Description=Early root shell on /dev/tty9 FOR DEBUGGING ONLY
Documentation=man:systemd-debug-generator(8)
DefaultDependencies=no
IgnoreOnIsolate=yes
ConditionPathExists=/dev/tty9

[Service]
Environment=TERM=linux
ExecStart=/bin/bash
Restart=always
RestartSec=0
StandardInput=tty
TTYPath=/dev/tty9
TTYReset=yes
TTYVHangup=yes
KillMode=process
IgnoreSIGPIPE=no
KillSignal=SIGHUP

[Install]
WantedBy=sysinit.target
`

// TestScanDebugShell: the DLAMI fixture with systemd's debug-shell.service
// installed is no finding; enabled (as `systemctl enable debug-shell`
// leaves it) it is a high debug-shell finding on the unit, which fix
// masks, after which a scan finds it no more.
func TestScanDebugShell(t *testing.T) {
	dir := materialize(t, "dlami")
	unitPath := filepath.Join(dir, "lib/systemd/system/debug-shell.service")
	require.NoError(t, os.WriteFile(unitPath, []byte(debugShellUnit), 0o644))
	code, rep, stderr := scanJSON(t, dir)
	require.Contains(t, []int{ExitOK, ExitFindings}, code, stderr)
	assert.Nil(t, ruleFinding(rep, "debug-shell"), "installed, not enabled")

	wants := filepath.Join(dir, "etc/systemd/system/sysinit.target.wants")
	require.NoError(t, os.MkdirAll(wants, 0o755))
	require.NoError(t, os.Symlink("/lib/systemd/system/debug-shell.service", filepath.Join(wants, "debug-shell.service")))
	code, rep, stderr = scanJSON(t, dir)
	require.Equal(t, ExitFindings, code, stderr)
	f := ruleFinding(rep, "debug-shell")
	require.NotNil(t, f, "findings: %v", rep.Findings)
	assert.Equal(t, finding.High, f.Severity)
	assert.Equal(t, "debug-shell.service", f.Unit)
	assert.Contains(t, f.Message, "debug-shell.service starts at boot")
	assert.Contains(t, f.Message, "sysinit.target")

	code, out, stderr := runCLI(t, "fix", dir)
	require.Equal(t, ExitOK, code, "%s\n%s", out, stderr)
	target, err := os.Readlink(filepath.Join(dir, "etc/systemd/system/debug-shell.service"))
	require.NoError(t, err, "fix masks debug-shell.service:\n%s", out)
	assert.Equal(t, "/dev/null", target)
	_, rep, stderr = scanJSON(t, dir)
	require.NotNil(t, rep, stderr)
	assert.Nil(t, ruleFinding(rep, "debug-shell"), "masked")
}

// TestScanDebugShellFromCmdline: systemd.debug_shell on the boot loader's
// kernel command line starts debug-shell.service through
// systemd-debug-generator's link, a high finding whose chain starts at
// default.target; --assume kernel-command-line= without it has none, and
// fix's mask stops it.
func TestScanDebugShellFromCmdline(t *testing.T) {
	dir := materialize(t, "dlami")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "lib/systemd/system/debug-shell.service"), []byte(debugShellUnit), 0o644))
	gen := filepath.Join(dir, "lib/systemd/system-generators/systemd-debug-generator")
	require.NoError(t, os.MkdirAll(filepath.Dir(gen), 0o755))
	require.NoError(t, os.WriteFile(gen, []byte("\x7fELF\x00/dev/tty9\x00/dev/null\x00"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "etc/kernel"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/kernel/cmdline"), []byte("ro quiet systemd.debug_shell\n"), 0o644))
	code, rep, stderr := scanJSON(t, dir)
	require.Equal(t, ExitFindings, code, stderr)
	f := ruleFinding(rep, "debug-shell")
	require.NotNil(t, f, "findings: %v", rep.Findings)
	assert.Equal(t, finding.High, f.Severity)
	assert.Equal(t, "debug-shell.service", f.Unit)

	_, rep, stderr = scanJSON(t, "--assume", "kernel-command-line=ro quiet", dir)
	require.NotNil(t, rep, stderr)
	assert.Nil(t, ruleFinding(rep, "debug-shell"), "not on the assumed command line")

	code, out, stderr := runCLI(t, "fix", dir)
	require.Equal(t, ExitOK, code, "%s\n%s", out, stderr)
	_, rep, stderr = scanJSON(t, dir)
	require.NotNil(t, rep, stderr)
	assert.Nil(t, ruleFinding(rep, "debug-shell"), "masked")
}

// TestScanBootUnitFromCmdline: a systemd.unit= or runlevel word on the
// image's kernel command line is the unit PID 1 starts in default.target's
// place: chains start there, what only default.target pulls in does not
// start, and a name that cannot be loaded falls back to rescue.target.
func TestScanBootUnitFromCmdline(t *testing.T) {
	dir := materialize(t, "dlami")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "etc/kernel"), 0o755))
	cmdline := func(s string) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/kernel/cmdline"), []byte(s+"\n"), 0o644))
	}

	cmdline("ro quiet 3")
	_, rep, stderr := scanJSON(t, dir)
	require.NotNil(t, rep, stderr)
	f := ruleFinding(rep, "ecs-agent-unconfigured")
	require.NotNil(t, f, "findings: %v", rep.Findings)
	require.NotEmpty(t, f.Chain)
	assert.Equal(t, "multi-user.target", f.Chain[0].From, "the chain starts at the runlevel's target")

	code, out, stderr := runCLI(t, "facts", dir)
	require.Equal(t, ExitOK, code, stderr)
	var doc struct {
		Boot struct {
			Target          string `json:"target"`
			DefaultTarget   string `json:"default_target"`
			CommandLineUnit string `json:"command_line_unit"`
		} `json:"boot"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	assert.Equal(t, "multi-user.target", doc.Boot.Target)
	assert.Equal(t, "multi-user.target", doc.Boot.CommandLineUnit)
	assert.Equal(t, "graphical.target", doc.Boot.DefaultTarget)

	cmdline("ro systemd.unit=nothere.target")
	code, rep, stderr = scanJSON(t, dir)
	require.Equal(t, ExitFindings, code, stderr)
	f = ruleFinding(rep, "boot-rescue-fallback")
	require.NotNil(t, f, "findings: %v", rep.Findings)
	assert.Equal(t, "nothere.target", f.Unit)
	assert.Contains(t, f.Message, "which the kernel command line names in default.target's place")
	assert.Nil(t, ruleFinding(rep, "ecs-agent-unconfigured"), "rescue.target does not start ecs.service")

	_, rep, stderr = scanJSON(t, "--assume", "kernel-command-line=ro quiet", dir)
	require.NotNil(t, rep, stderr)
	assert.Nil(t, ruleFinding(rep, "boot-rescue-fallback"), "the assumed command line names no unit")
	f = ruleFinding(rep, "ecs-agent-unconfigured")
	require.NotNil(t, f, "findings: %v", rep.Findings)
	assert.Equal(t, "default.target", f.Chain[0].From)
}
