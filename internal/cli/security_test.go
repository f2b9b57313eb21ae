package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// securityTree is a small image: a hardened service, an exposed one, a
// masked one, an alias, a template, and default.target.
func securityTree(t *testing.T, extra map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"usr/lib/systemd/system/default.target": "[Unit]\nDescription=default\n",
		"usr/lib/systemd/system/open.service":   "[Service]\nExecStart=/bin/true\n",
		"usr/lib/systemd/system/tight.service": "[Service]\nExecStart=/bin/true\nDynamicUser=yes\nPrivateNetwork=yes\nPrivateDevices=yes\n" +
			"CapabilityBoundingSet=\nSystemCallFilter=@system-service\nSystemCallArchitectures=native\nRestrictAddressFamilies=none\n" +
			"ProtectKernelTunables=yes\nProtectKernelModules=yes\nProtectControlGroups=yes\nRestrictNamespaces=yes\nIPAddressDeny=any\n",
		"usr/lib/systemd/system/tmpl@.service":  "[Service]\nExecStart=/bin/true\nUser=%i\n",
		"etc/os-release":                        "ID=debian\nVERSION_ID=12\n",
		"etc/systemd/system/alias.service":      "->/usr/lib/systemd/system/open.service",
		"etc/systemd/system/masked.service":     "->/dev/null",
		"usr/lib/systemd/system/masked.service": "[Service]\nExecStart=/bin/true\n",
	}
	for k, v := range extra {
		files[k] = v
	}
	for p, content := range files {
		full := filepath.Join(dir, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		if target, ok := strings.CutPrefix(content, "->"); ok {
			require.NoError(t, os.Symlink(target, full))
			continue
		}
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
	return dir
}

func TestSecurityCommand(t *testing.T) {
	dir := securityTree(t, nil)
	policy := filepath.Join(t.TempDir(), "policy.json")
	require.NoError(t, os.WriteFile(policy, []byte(`{"UserOrDynamicUser": {"weight": 0}, "PrivateNetwork": {"description_bad": "talks to the world"}}`), 0o644))
	badPolicy := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(badPolicy, []byte(`{"UserOrDynamicUser": {"weight": 0}`), 0o644))
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		contains []string
		stderr   string
	}{
		{"whole image", []string{"security", dir}, ExitOK,
			[]string{"open.service", "tight.service", "tmpl@.service", "UNSAFE", "services scored as systemd-analyze security --offline=true of systemd 252"}, ""},
		{"above the threshold", []string{"security", dir, "--threshold", "9.0"}, ExitFindings, []string{"open.service"}, ""},
		{"nothing above", []string{"security", dir, "--threshold", "10.0"}, ExitOK, nil, ""},
		{"threshold out of range", []string{"security", dir, "--threshold", "90"}, ExitError, nil, "above 10.0"},
		{"threshold not a number", []string{"security", dir, "--threshold", "high"}, ExitError, nil, "want a number"},
		{"threshold empty", []string{"security", dir, "--threshold", ""}, ExitError, nil, "--threshold"},
		{"named units", []string{"security", dir, "open.service", "tight.service"}, ExitOK,
			[]string{"→ Overall exposure level for open.service: 9.6 UNSAFE", "→ Overall exposure level for tight.service:", "✗ PrivateNetwork="}, ""},
		{"an alias scores its unit", []string{"security", dir, "alias.service"}, ExitOK, []string{"Overall exposure level for open.service"}, ""},
		{"a template scores an instance", []string{"security", dir, "tmpl@.service"}, ExitOK, []string{"Overall exposure level for tmpl@i.service"}, ""},
		{"masked", []string{"security", dir, "masked.service"}, ExitError, nil, "masked.service: unit not loaded: masked"},
		{"missing", []string{"security", dir, "nosuch.service"}, ExitError, nil, "nosuch.service: unit not loaded: not-found"},
		{"not a service", []string{"security", dir, "default.target"}, ExitError, nil, "not a service unit"},
		{"policy", []string{"security", dir, "open.service", "--security-policy", policy}, ExitOK,
			[]string{"talks to the world", "Option excluded by policy, skipping", "with the policy " + policy}, ""},
		{"malformed policy", []string{"security", dir, "--security-policy", badPolicy}, ExitError, nil, "invalid security policy"},
		{"missing policy", []string{"security", dir, "--security-policy", badPolicy + ".nope"}, ExitError, nil, "--security-policy"},
		{"bad format", []string{"security", dir, "-o", "yaml"}, ExitError, nil, "unknown output format"},
		{"257's tables", []string{"security", dir, "tmpl@.service", "--systemd-version", "257"}, ExitOK, []string{"tmpl@test_instance.service", "of systemd 257"}, ""},
		{"nearest tables", []string{"security", dir, "open.service", "--systemd-version", "255"}, ExitOK, []string{"systemd 252's tables (the nearest amilint carries to the image's systemd 255)"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := runCLI(t, tc.args...)
			assert.Equal(t, tc.code, code, "stdout: %s\nstderr: %s", out, stderr)
			for _, c := range tc.contains {
				assert.Contains(t, out, c)
			}
			if tc.stderr != "" {
				assert.Contains(t, stderr, tc.stderr)
				assert.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %s", stderr)
			}
		})
	}
}

func TestSecurityJSON(t *testing.T) {
	dir := securityTree(t, map[string]string{
		// The image's own policy applies when no --security-policy is given.
		"etc/systemd/systemd-analyze-security.policy": `{"PrivateNetwork": {"weight": 0}, "UMask": "not an object"}`,
	})
	code, out, stderr := runCLI(t, "security", dir, "-o", "json")
	require.Equal(t, ExitOK, code, stderr)
	var doc struct {
		Schema        string   `json:"schema"`
		Target        string   `json:"target"`
		Tables        int      `json:"tables"`
		Policy        string   `json:"policy"`
		PolicyIgnored []string `json:"policy_ignored"`
		Units         []struct {
			Unit     string   `json:"unit"`
			ID       string   `json:"id"`
			Exposure *float64 `json:"exposure"`
			Level    string   `json:"level"`
			Error    string   `json:"error"`
			Checks   []struct {
				ID          string   `json:"id"`
				Set         *bool    `json:"set"`
				Exposure    *float64 `json:"exposure"`
				Description string   `json:"description"`
			} `json:"checks"`
		} `json:"units"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	assert.Equal(t, "amilint/v1", doc.Schema)
	assert.Equal(t, 252, doc.Tables)
	assert.Equal(t, "/etc/systemd/systemd-analyze-security.policy", doc.Policy)
	assert.Equal(t, []string{"UMask: not an object"}, doc.PolicyIgnored)
	var names []string
	for _, u := range doc.Units {
		names = append(names, u.Unit)
		require.Empty(t, u.Error)
		require.NotNil(t, u.Exposure)
		require.Len(t, u.Checks, 81, "systemd's 81 checks")
		for _, c := range u.Checks {
			if c.ID == "PrivateNetwork" {
				assert.Nil(t, c.Exposure, "excluded by the image's policy")
				assert.Nil(t, c.Set)
				assert.Equal(t, "Option excluded by policy, skipping", c.Description)
			}
			if c.ID == "UserOrDynamicUser" && u.Unit == "open.service" {
				assert.Equal(t, 0.4, *c.Exposure)
				assert.False(t, *c.Set)
			}
		}
	}
	// Aliases and masked units are not services of their own.
	assert.Equal(t, []string{"open.service", "tight.service", "tmpl@.service"}, names)
}

// TestScanReportsExactlyTheExposedBootServices: `scan` reports
// service-exposure for exactly the services active at boot whose exposure
// (as `security` scores it) is above the threshold, on the DLAMI fixture
// and the Debian root, with the default threshold and with a profile's
// tuning.
func TestScanReportsExactlyTheExposedBootServices(t *testing.T) {
	targets := []string{"fixture:dlami"}
	if testenv.CI() || dirExists(filepath.Join(testenv.RepoRoot(t), ".cache", "debian-root", "lib", "systemd", "systemd")) {
		targets = append(targets, testenv.Bookworm.Path(t))
	}
	for _, tgt := range targets {
		t.Run(filepath.Base(tgt), func(t *testing.T) {
			code, out, stderr := runCLI(t, "facts", tgt)
			require.Equal(t, ExitOK, code, stderr)
			var doc struct {
				Units map[string]struct {
					Type          string `json:"unit_type"`
					ActiveAtBoot  bool   `json:"active_at_boot"`
					ConditionsMet string `json:"conditions_met"`
					Security      *struct {
						Exposure *float64 `json:"exposure"`
					} `json:"security"`
				} `json:"units"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &doc))
			for _, threshold := range []float64{9.0, 9.5, 5.0} {
				want := map[string]bool{}
				for name, u := range doc.Units {
					if u.Type == "service" && u.ActiveAtBoot && u.Security != nil && u.Security.Exposure != nil && *u.Security.Exposure > threshold {
						want[name] = true
					}
				}
				args := []string{tgt}
				if threshold != 9.0 {
					rules := t.TempDir()
					require.NoError(t, os.MkdirAll(filepath.Join(rules, "profiles"), 0o755))
					require.NoError(t, os.WriteFile(filepath.Join(rules, "profiles", "tuned.yaml"), []byte(fmt.Sprintf(
						"name: tuned\ndescription: a test profile\nallow: ['*.service', '*.socket', '*.target', '*.timer', '*.path', '*.mount', '*.slice', '*.scope', '*.device', '*.swap', '*.automount']\nrules:\n  service-exposure:\n    severity: medium\n    params: {threshold: %v}\n", threshold)), 0o644))
					args = append(args, "--rules", rules, "--profile", "tuned")
				}
				_, rep, stderr := scanJSON(t, args...)
				require.NotNil(t, rep, stderr)
				got := map[string]bool{}
				for _, f := range rep.Findings {
					if f.RuleID == "service-exposure" {
						got[f.Unit] = true
						want := "low"
						if threshold != 9.0 {
							want = "medium"
						}
						if doc.Units[f.Unit].ConditionsMet == "false" {
							want = "info" // it never runs: its conditions fail in the image
						}
						assert.Equal(t, want, f.Severity.String(), f.Unit)
					}
				}
				assert.Equal(t, want, got, "threshold %v", threshold)
				assert.NotEmpty(t, got, "threshold %v", threshold)
			}
		})
	}
}

func dirExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
