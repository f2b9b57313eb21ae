package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const userPolicy = `# METADATA
# title: No telnet
package amilint.rules.no_telnet

findings contains f if {
	some name, u in input.units
	name == "telnet.socket"
	u.active_at_boot
	f := {"rule_id": "no-telnet", "severity": data.user.severity, "unit": name, "message": "telnet at boot", "chain": u.chain}
}
`

const userTests = `package amilint.rules.no_telnet_test

import data.amilint

inp := {"units": {"telnet.socket": {"active_at_boot": true, "chain": []}}}

test_reported_through_the_entry_point if {
	some f in amilint.findings with input as inp
	f.rule_id == "no-telnet"
	f.severity == "high"
}

test_not_at_boot if {
	count(amilint.findings) == 0 with input as {"units": {"telnet.socket": {"active_at_boot": false, "chain": []}}}
}
`

// catalogTest checks the shipped ECS rule through data.rules and the
// shipped policies with the embedded catalog.
const catalogTest = `package c_test

import data.amilint

test_catalog_is_data if {
	data.rules["ecs-agent-unconfigured"].severity == "high"
	data.params.profile == "k8s-gpu-node"
	"kubelet.service" in data.profiles["k8s-gpu-node"].allow
}

test_ecs_through_the_entry_point if {
	inp := {"units": {"ecs.service": {"unit_type": "service", "active_at_boot": true, "chain": [], "restart": "no"}}}
	some f in amilint.findings with input as inp
	f.rule_id == "ecs-agent-unconfigured"
}
`

func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	}
	return dir
}

func TestPolicyTest(t *testing.T) {
	data := filepath.Join(writeFiles(t, map[string]string{"d.yaml": "severity: high\n"}), "d.yaml")
	tests := []struct {
		name   string
		files  map[string]string
		args   []string
		code   int
		stdout []string
		stderr string
	}{
		{"pass", map[string]string{"p/no_telnet.rego": userPolicy, "p/no_telnet_test.rego": userTests},
			[]string{"--data", data, "-v"}, ExitOK, []string{"PASS: data.amilint.rules.no_telnet_test.test_not_at_boot", "2 passed, 0 failed, 0 errors"}, ""},
		{"run filter", map[string]string{"p/no_telnet.rego": userPolicy, "p/no_telnet_test.rego": userTests},
			[]string{"--data", data, "--run", "not_at_boot$"}, ExitOK, []string{"1 passed, 0 failed, 0 errors"}, ""},
		{"run filter matches nothing", map[string]string{"p/no_telnet.rego": userPolicy, "p/no_telnet_test.rego": userTests},
			[]string{"--run", "nothing"}, ExitError, nil, "no tests found"},
		{"bad run filter", map[string]string{"p/no_telnet.rego": userPolicy, "p/no_telnet_test.rego": userTests},
			[]string{"--run", "("}, ExitError, nil, "error parsing regexp"},
		{"fail without the data", map[string]string{"no_telnet.rego": userPolicy, "no_telnet_test.rego": userTests},
			nil, ExitFindings, []string{"FAIL: data.amilint.rules.no_telnet_test.test_reported_through_the_entry_point", "1 passed, 1 failed"}, ""},
		{"runtime error", map[string]string{"x_test.rego": "package x\n\ntest_div if {\n\t1 / 0 == 1\n}\n"},
			nil, ExitError, []string{"ERROR: data.x.test_div"}, ""},
		{"parse error", map[string]string{"x.rego": "package x\n\nallow if {\n"},
			nil, ExitError, nil, "parse"},
		{"rego v0 syntax is refused", map[string]string{"x.rego": "package x\n\nallow { true }\n"},
			nil, ExitError, nil, "parse"},
		{"catalog as data", map[string]string{"c_test.rego": catalogTest},
			[]string{"--profile", "k8s-gpu-node"}, ExitOK, []string{"2 passed, 0 failed, 0 errors"}, ""},
		{"no tests", map[string]string{"x.rego": "package x\n\nallow := true\n"},
			nil, ExitError, nil, "no tests found"},
		{"no policies", map[string]string{"README": "nothing"},
			nil, ExitError, nil, "no policies found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeFiles(t, tt.files)
			var out, errb bytes.Buffer
			code := Run(context.Background(), append([]string{"policy", "test", dir}, tt.args...), &out, &errb)
			assert.Equal(t, tt.code, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			for _, s := range tt.stdout {
				assert.Contains(t, out.String(), s)
			}
			assert.Contains(t, errb.String(), tt.stderr)
		})
	}
}

func TestPolicyUsage(t *testing.T) {
	var out, errb bytes.Buffer
	assert.Equal(t, ExitError, Run(context.Background(), []string{"policy"}, &out, &errb))
	assert.Equal(t, ExitError, Run(context.Background(), []string{"policy", "test"}, &out, &errb))
	assert.Equal(t, ExitError, Run(context.Background(), []string{"policy", "test", filepath.Join(t.TempDir(), "none")}, &out, &errb))
}
