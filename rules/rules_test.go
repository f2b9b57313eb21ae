package rules

import (
	"encoding/json"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/image/rootfs"
)

var update = flag.Bool("update", false, "rewrite rules/docs and compiled.go from the catalog")

// TestShippedCatalogLoads fails when any shipped rule file does not decode
// strictly or does not validate, and checks the file set and the loaded
// set are the same.
func TestShippedCatalogLoads(t *testing.T) {
	rs, err := Load()
	require.NoError(t, err)
	files, err := fs.Glob(yamlCatalog, "*.yaml")
	require.NoError(t, err)
	require.Len(t, rs, len(files), "every shipped file is one rule")
	for _, r := range rs {
		assert.Equal(t, "embedded:"+r.ID+".yaml", r.Source)
		assert.NoError(t, r.Validate(), r.ID)
	}
	assert.True(t, slices.IsSortedFunc(rs, func(a, b Rule) int { return strings.Compare(a.ID, b.ID) }))
}

func TestRequiredRules(t *testing.T) {
	rs, err := Load()
	require.NoError(t, err)
	byID := map[string]Rule{}
	for _, r := range rs {
		byID[r.ID] = r
	}
	for _, tc := range []struct {
		id, kind string
		sev      finding.Severity
		unit     string // a unit the rule must match
	}{
		{"ecs-agent-unconfigured", "unit", finding.High, "ecs.service"},
		{"ssm-agent-unconfigured", "unit", finding.Low, "amazon-ssm-agent.service"},
		{"cloudwatch-agent-unconfigured", "unit", finding.Medium, "amazon-cloudwatch-agent.service"},
		{"snapd-on-server", "unit", finding.Medium, "snapd.service"},
		{"auto-upgrades-immutable", "unit", finding.Medium, "apt-daily.timer"},
		{"auto-upgrades-immutable", "unit", finding.Medium, "unattended-upgrades.service"},
		{"motd-news", "unit", finding.Low, "motd-news.timer"},
		{"apport", "unit", finding.Low, "apport.service"},
		{"modemmanager", "unit", finding.Low, "ModemManager.service"},
		{"cups", "unit", finding.Low, "cups.service"},
		{"avahi", "unit", finding.Medium, "avahi-daemon.service"},
		{"multipathd", "unit", finding.Low, "multipathd.service"},
		{"fwupd-refresh", "unit", finding.Low, "fwupd-refresh.timer"},
		{"ubuntu-advantage-timers", "unit", finding.Low, "ua-timer.timer"},
		{CrashLoop, "generic", finding.Medium, ""},
		{ContainerPerRestart, "generic", finding.Medium, ""},
		{ExecMissing, "generic", finding.Medium, ""},
		{FirstBootPresets, "generic", finding.Medium, ""},
		{ProfileAllowlist, "generic", finding.Medium, ""},
	} {
		t.Run(tc.id+"/"+tc.unit, func(t *testing.T) {
			r, ok := byID[tc.id]
			require.True(t, ok, "rule missing")
			assert.Equal(t, tc.kind, r.Kind)
			assert.Equal(t, tc.sev, r.Level())
			if tc.unit != "" {
				assert.Contains(t, r.Units, tc.unit)
			}
		})
	}
	ecs := byID["ecs-agent-unconfigured"]
	require.NotNil(t, ecs.NeededWhen)
	assert.Equal(t, &ConfigKey{File: "/etc/ecs/ecs.config", Key: "ECS_CLUSTER"}, ecs.NeededWhen.ConfigKey)
	assert.Subset(t, ecs.Remediation.Units, []string{"ecs.service", "amazon-ecs-volume-plugin.socket"})
	assert.Contains(t, ecs.Units, "amazon-ecs.service")
}

// TestRemediationUnitsExistInDLAMI checks the catalog against the image it
// was written for: every unit a remediation acts on, for a rule whose units
// the DLAMI-like fixture has, is a unit file there, so fixing that image
// never names a unit systemctl does not know.
func TestRemediationUnitsExistInDLAMI(t *testing.T) {
	rs, err := Load()
	require.NoError(t, err)
	src, err := fixtures.Source("dlami")
	require.NoError(t, err)
	view := rootfs.New(src)
	has := func(u string) bool {
		for _, d := range []string{"etc/systemd/system", "lib/systemd/system", "usr/lib/systemd/system"} {
			if _, err := view.Lstat(d + "/" + u); err == nil {
				return true
			}
		}
		return false
	}
	checked := 0
	for _, r := range rs {
		if r.Kind != "unit" || !slices.ContainsFunc(r.Units, has) {
			continue
		}
		checked++
		for _, u := range r.Remediation.Units {
			assert.True(t, has(u), "%s: remediation unit %s is not in the dlami fixture", r.ID, u)
		}
	}
	assert.GreaterOrEqual(t, checked, 12, "the dlami fixture carries most catalog units")
}

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	return dir
}

const goodRule = `id: %s
kind: unit
title: A test rule
severity: low
rationale: Because.
units: [foo.service]
remediation:
  action: disable
  text: Disable it.
`

func rule(id string) string { return strings.ReplaceAll(goodRule, "%s", id) }

func TestLoadDirRejectsBadRulesNamingEveryProblem(t *testing.T) {
	dir := writeFiles(t, map[string]string{
		"good.yaml":     rule("good"),
		"unknown.yaml":  rule("unknown") + "colour: red\n",
		"nested.yaml":   rule("nested") + "needed_when:\n  config_key: {file: /etc/x, key: K, bogus: 1}\n",
		"severity.yaml": strings.Replace(rule("severity"), "severity: low", "severity: urgent", 1),
		"dup.yaml":      rule("dup"),
		"dup.yml":       rule("dup"),
		"many.yaml": `id: Many_Problems
kind: service
severity: ""
references: [not-a-url, "ftp://x/y"]
units: ["bad name", "snap*"]
needed_when: {file_exists: relative/path, config_valid: /etc/x}
remediation: {action: reboot, units: [nope]}
profiles: [Bad]
`,
		"wrongname.yaml": rule("other-name"),
		"twodocs.yaml":   rule("twodocs") + "---\n" + rule("twodocs"),
		"notes.txt":      "not a rule",
	})
	_, err := LoadDir(dir)
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{
		`unknown.yaml: decode: yaml: unmarshal errors:`,
		`field colour not found in type rules.Rule`,
		`nested.yaml: decode:`,
		`field bogus not found in type rules.ConfigKey`,
		`severity.yaml: severity "urgent": want one of info, low, medium, high, critical`,
		`dup.yml: duplicate id "dup" (also in`,
		`many.yaml: id "Many_Problems" does not match the file name many.yaml`,
		`many.yaml: id "Many_Problems": want a lowercase slug`,
		`kind "service": want one of unit, generic`,
		`many.yaml: title: missing`,
		`severity "": want one of`,
		`rationale: missing`,
		`reference "not-a-url": want an http(s) URL`,
		`reference "ftp://x/y": want an http(s) URL`,
		`unit "bad name": not a unit name or glob`,
		`unit "snap*": not a unit name or glob`,
		`needed_when: file_exists "relative/path": want an absolute, clean image path`,
		`needed_when: want exactly one of config_key, file_exists, config_valid, any, all (got 2)`,
		`remediation.action "reboot": want one of disable, mask, configure`,
		`many.yaml: remediation.text: missing`,
		`remediation unit "nope": not a unit name`,
		`profile "Bad": want a slug`,
		`wrongname.yaml: id "other-name" does not match the file name wrongname.yaml`,
		`twodocs.yaml: decode: want exactly one YAML document`,
	} {
		assert.Contains(t, msg, want)
	}
	assert.NotContains(t, msg, "good.yaml")
	assert.NotContains(t, msg, "notes.txt")
}

func TestConditionValidation(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"config key", "config_key: {file: /etc/ecs/ecs.config, key: ECS_CLUSTER}", ""},
		{"any", "any: [{file_exists: /a}, {config_valid: /b.json, format: json}]", ""},
		{"all", "all: [{file_exists: /a}, {file_exists: /b}]", ""},
		{"empty", "{}", "want exactly one of"},
		{"empty any", "any: []", "any: empty"},
		{"nested", "any: [{all: [{file_exists: /a}]}]", "any[0]: all: conditions nest one level only"},
		{"bad key", "config_key: {file: /etc/x, key: 'A-B'}", `config_key.key "A-B"`},
		{"unclean path", "file_exists: /etc/../etc/x", "want an absolute, clean image path"},
		{"root", "file_exists: /", "want an absolute, clean image path"},
		{"bad format", "config_valid: /x\nformat: toml", `format "toml"`},
		{"format on group", "any: [{file_exists: /a}]\nformat: json", "format: belongs on a leaf"},
		{"env only for keys", "config_key: {file: /x, key: K}\nformat: json", `format "json": config_key reads env files`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Parse([]byte(rule("x") + "needed_when:\n" + indent(tc.yaml)))
			require.NoError(t, err)
			err = r.Validate()
			if tc.want == "" {
				assert.NoError(t, err)
			} else {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.want)
			}
		})
	}
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ") + "\n"
}

func TestParseRejects(t *testing.T) {
	for name, body := range map[string]string{
		"empty":      "",
		"wrong type": rule("x") + "units: foo.service\n",
		"not a map":  "- a\n- b\n",
		"tab indent": "id: x\n\tkind: unit\n",
	} {
		_, err := Parse([]byte(body))
		assert.Error(t, err, name)
	}
}

func TestLoadAllUserRulesOverride(t *testing.T) {
	base, err := Load()
	require.NoError(t, err)
	override := strings.Replace(rule("ecs-agent-unconfigured"), "severity: low", "severity: critical", 1)
	dir := writeFiles(t, map[string]string{
		"ecs-agent-unconfigured.yaml": override,
		"my-agent.yaml":               rule("my-agent"),
	})
	rs, err := LoadAll(dir)
	require.NoError(t, err)
	assert.Len(t, rs, len(base)+1)
	i := slices.IndexFunc(rs, func(r Rule) bool { return r.ID == "ecs-agent-unconfigured" })
	require.GreaterOrEqual(t, i, 0)
	assert.Equal(t, "critical", rs[i].Severity)
	assert.Equal(t, filepath.Join(dir, "ecs-agent-unconfigured.yaml"), rs[i].Source)
	assert.True(t, slices.ContainsFunc(rs, func(r Rule) bool { return r.ID == "my-agent" }))

	_, err = LoadAll(filepath.Join(dir, "missing"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = LoadDir(filepath.Join(dir, "my-agent.yaml"))
	assert.ErrorContains(t, err, "not a directory")
}

func TestConfigRequests(t *testing.T) {
	rs, err := Load()
	require.NoError(t, err)
	got := map[string]string{}
	for _, c := range ConfigRequests(rs) {
		_, dup := got[c.Path]
		assert.False(t, dup, c.Path)
		got[c.Path] = c.Format
	}
	assert.Equal(t, "env", got["/etc/ecs/ecs.config"])
	assert.Equal(t, "json", got["/etc/amazon/ssm/amazon-ssm-agent.json"])
	assert.Equal(t, "file", got["/var/lib/amazon/ssm/registration"])
	assert.Equal(t, "dir", got["/var/lib/snapd/snaps"])
	assert.Equal(t, "dir", got["/opt/aws/amazon-cloudwatch-agent/etc/amazon-cloudwatch-agent.d"])

	two := []Rule{
		{NeededWhen: &Condition{FileExists: "/x"}},
		{NeededWhen: &Condition{ConfigValid: "/x", Format: "json"}},
		{NeededWhen: &Condition{FileExists: "/x"}},
	}
	assert.Equal(t, []ConfigRequest{{Path: "/x", Format: "json"}}, ConfigRequests(two), "a parsing request wins over presence only")
}

// TestDataShape pins the JSON the policies read as data.rules.
func TestDataShape(t *testing.T) {
	rs, err := Load()
	require.NoError(t, err)
	d, err := Data(rs)
	require.NoError(t, err)
	b, err := json.Marshal(d["ecs-agent-unconfigured"])
	require.NoError(t, err)
	var got struct {
		ID         string   `json:"id"`
		Kind       string   `json:"kind"`
		Severity   string   `json:"severity"`
		Units      []string `json:"units"`
		NeededWhen struct {
			ConfigKey struct{ File, Key string } `json:"config_key"`
		} `json:"needed_when"`
		Remediation struct {
			Action string   `json:"action"`
			Units  []string `json:"units"`
		} `json:"remediation"`
		Source *string `json:"source"`
	}
	require.NoError(t, json.Unmarshal(b, &got))
	assert.Equal(t, "ecs-agent-unconfigured", got.ID)
	assert.Equal(t, "unit", got.Kind)
	assert.Equal(t, "high", got.Severity)
	assert.Equal(t, "/etc/ecs/ecs.config", got.NeededWhen.ConfigKey.File)
	assert.Equal(t, "ECS_CLUSTER", got.NeededWhen.ConfigKey.Key)
	assert.Equal(t, "disable", got.Remediation.Action)
	assert.Nil(t, got.Source, "where a rule came from is not policy data")
	assert.Len(t, d, len(rs))
}

func TestProfiles(t *testing.T) {
	ps, err := LoadProfiles()
	require.NoError(t, err)
	i := slices.IndexFunc(ps, func(p Profile) bool { return p.Name == "k8s-gpu-node" })
	require.GreaterOrEqual(t, i, 0)
	p := ps[i]
	for _, u := range []string{"containerd.service", "kubelet.service", "systemd-journald.service", "getty@tty1.service", "nvidia-dcgm.service"} {
		assert.True(t, p.Allows(u), u)
	}
	for _, u := range []string{"ecs.service", "snapd.service", "amazon-ssm-agent.service", "motd-news.timer", "avahi-daemon.service"} {
		assert.False(t, p.Allows(u), u)
	}
	d, err := ProfilesData(ps)
	require.NoError(t, err)
	assert.Contains(t, d["k8s-gpu-node"], "allow")

	dir := writeFiles(t, map[string]string{
		"bad.yaml":  "name: Bad\nallow: [ecs, ecs, x.service]\n",
		"typo.yaml": "name: typo\ndescription: d\nallows: [x.service]\n",
		"ok.yaml":   "name: ok\ndescription: d\nallow: [x.service]\n",
	})
	_, err = LoadProfilesDir(dir)
	require.Error(t, err)
	for _, want := range []string{
		`bad.yaml: name "Bad" does not match the file name bad.yaml`,
		`name "Bad": want a lowercase slug`,
		`description: missing`,
		`allow "ecs": not a unit name or glob`,
		`allow "ecs": listed twice`,
		`typo.yaml: decode:`,
		`field allows not found`,
	} {
		assert.Contains(t, err.Error(), want)
	}
	assert.NotContains(t, err.Error(), "ok.yaml")

	okDir := writeFiles(t, map[string]string{"k8s-gpu-node.yaml": "name: k8s-gpu-node\ndescription: mine\nallow: [x.service]\n"})
	user, err := LoadProfilesDir(okDir)
	require.NoError(t, err)
	rulesDir := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(rulesDir, "profiles"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(rulesDir, "profiles", "edge.yaml"), []byte("name: edge\ndescription: d\nallow: [y.service]\n"), 0o644))
	all, err := LoadAllProfiles(t.TempDir(), rulesDir)
	require.NoError(t, err)
	assert.Len(t, all, len(ps)+1)

	merged := MergeProfiles(ps, user)
	assert.Len(t, merged, len(ps))
	assert.Equal(t, []string{"x.service"}, merged[slices.IndexFunc(merged, func(p Profile) bool { return p.Name == "k8s-gpu-node" })].Allow)
}

// TestDocs keeps rules/docs/ID.md and rules/docs/README.md in step with
// the catalog; run `go test ./rules -update` after changing a rule.
func TestDocs(t *testing.T) {
	rs, _ := parsedCatalog(t) // the YAML: -update may be rewriting compiled.go too
	want := map[string]string{"README.md": Index(rs)}
	for _, r := range rs {
		want[r.ID+".md"] = Markdown(r)
	}
	if *update {
		old, _ := filepath.Glob(filepath.Join("docs", "*.md"))
		for _, f := range old {
			require.NoError(t, os.Remove(f))
		}
		for name, body := range want {
			require.NoError(t, os.WriteFile(filepath.Join("docs", name), []byte(body), 0o644))
		}
	}
	have, err := filepath.Glob(filepath.Join("docs", "*.md"))
	require.NoError(t, err)
	for _, f := range have {
		_, ok := want[filepath.Base(f)]
		assert.True(t, ok, "stale doc page %s", f)
	}
	for name, body := range want {
		got, err := os.ReadFile(filepath.Join("docs", name))
		if !assert.NoError(t, err, "run go test ./rules -update") {
			continue
		}
		assert.Equal(t, body, string(got), "docs/%s is stale: run go test ./rules -update", name)
	}
}

func FuzzParse(f *testing.F) {
	files, err := fs.Glob(yamlCatalog, "*.yaml")
	require.NoError(f, err)
	for _, name := range files {
		b, err := fs.ReadFile(yamlCatalog, name)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte("needed_when: {any: [{any: [{any: []}]}]}"))
	f.Add([]byte("id: &a [*a]"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err != nil {
			return
		}
		_ = r.Validate()
		_ = Markdown(r)
		_ = ConfigRequests([]Rule{r})
	})
}

func BenchmarkLoad(b *testing.B) {
	for b.Loop() {
		if _, err := Load(); err != nil {
			b.Fatal(err)
		}
	}
}
