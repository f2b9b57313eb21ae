package policy

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/open-policy-agent/opa/v1/util"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/systemd/unit"
	"github.com/amilint/amilint/rules"
)

func write(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	return p
}

const userRule = `package amilint.rules.user_ssh

findings contains f if {
	some name, u in input.units
	name == "ssh.service"
	f := {
		"rule_id": "user-ssh",
		"severity": data.user.sev,
		"unit": name,
		"message": sprintf("%s for %s under %s", [name, data.params.target, data.params.profile]),
		"chain": u.chain,
	}
}
`

func TestUserPolicyAndData(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "p/ssh.rego", userRule)
	write(t, dir, "p/ssh_test.rego", "package x_test\n\ntest_never if false\n") // tests are not evaluated
	d1 := write(t, dir, "a.yaml", "sev: high\nnested: {a: 1}\n")
	d2 := write(t, dir, "b.json", `{"nested": {"b": 2}}`)
	e, err := New(context.Background(), Config{
		PolicyDirs: []string{filepath.Join(dir, "p")},
		DataFiles:  []string{d1, d2},
		Profile:    "k8s-gpu-node",
		Target:     "ami-1",
	})
	require.NoError(t, err)
	in := map[string]any{"units": map[string]any{"ssh.service": map[string]any{"chain": []any{}}}}
	fs, err := e.Evaluate(context.Background(), in)
	require.NoError(t, err)
	require.Len(t, fs, 1)
	assert.Equal(t, finding.Finding{
		RuleID: "user-ssh", Severity: finding.High, Unit: "ssh.service",
		Message: "ssh.service for ami-1 under k8s-gpu-node", Chain: []unit.Edge{},
		Remediation: finding.Remediation{Action: "none"},
	}, fs[0])

	// The same input as raw JSON gives the same findings.
	raw, err := json.Marshal(in)
	require.NoError(t, err)
	fs2, err := e.Evaluate(context.Background(), json.RawMessage(raw))
	require.NoError(t, err)
	assert.Equal(t, fs, fs2)
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.Mkdir(empty, 0o755))
	write(t, dir, "bad/x.rego", "package amilint.rules.bad\n\nfindings contains f if {\n\tf := undefined_fn(1)\n}\n")
	write(t, dir, "syntax/x.rego", "package x\n\nallow {\n")
	write(t, dir, "v0/x.rego", "package x\n\ndeny[msg] { msg := \"x\" }\n")
	write(t, dir, "conflict/x.rego", "package amilint.rules.c\n\nfindings contains f if {\n\tsome f in data.amilint.findings\n}\n")
	write(t, dir, "main/x.rego", "package main\n\ndeny contains \"x\" if true\n")
	write(t, dir, "typo/x.rego", "package amilint.rules.typo\n\nfinding contains {\"rule_id\": \"x\", \"message\": \"x\"} if true\n")
	d := write(t, dir, "list.json", "[1, 2]")
	d2 := write(t, dir, "c1.yaml", "a: 1\n")
	d3 := write(t, dir, "c2.yaml", "a: 2\n")
	tests := []struct {
		name string
		cfg  Config
		want string
		is   error
	}{
		{"no policies", Config{PolicyDirs: []string{empty}}, "no policies found", ErrNoPolicies},
		{"not under amilint.rules", Config{PolicyDirs: []string{filepath.Join(dir, "main")}}, "no package under amilint.rules", nil},
		{"findings misspelt", Config{PolicyDirs: []string{filepath.Join(dir, "typo")}}, "no rule named findings", nil},
		{"missing dir", Config{PolicyDirs: []string{filepath.Join(dir, "none")}}, "no such file", nil},
		{"compile error", Config{PolicyDirs: []string{filepath.Join(dir, "bad")}}, "undefined function undefined_fn", nil},
		{"syntax error", Config{PolicyDirs: []string{filepath.Join(dir, "syntax")}}, "rego_parse_error", nil},
		{"rego v0 refused", Config{PolicyDirs: []string{filepath.Join(dir, "v0")}}, "rego_parse_error", nil},
		{"recursion through the entry point", Config{PolicyDirs: []string{filepath.Join(dir, "conflict")}}, "rego_recursion_error", nil},
		{"data not an object", Config{DataFiles: []string{d}}, "top level is not an object", nil},
		{"data conflict", Config{DataFiles: []string{d2, d3}}, `key "a" defined twice`, nil},
		{"data missing", Config{DataFiles: []string{filepath.Join(dir, "none.json")}}, "read data", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(context.Background(), tt.cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			if tt.is != nil {
				assert.True(t, errors.Is(err, tt.is))
			}
		})
	}
}

func TestEvaluateRejectsMalformedFindings(t *testing.T) {
	dir := t.TempDir()
	tests := []struct{ name, body, want string }{
		{"no message", `f := {"rule_id": "x"}`, "rule_id and message are required"},
		{"bad severity", `f := {"rule_id": "x", "message": "m", "severity": "urgent"}`, "urgent"},
		{"not an object", `f := 42`, "finding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, tt.name)
			write(t, p, "x.rego", "package amilint.rules.x\n\nfindings contains f if {\n\t"+tt.body+"\n}\n")
			e, err := New(context.Background(), Config{PolicyDirs: []string{p}})
			require.NoError(t, err)
			_, err = e.Evaluate(context.Background(), map[string]any{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestEvaluateEmptyInput(t *testing.T) {
	e, err := New(context.Background(), Config{})
	require.NoError(t, err)
	fs, err := e.Evaluate(context.Background(), map[string]any{})
	require.NoError(t, err)
	assert.Empty(t, fs)
	assert.Positive(t, e.Modules())
}

// TestDataParams checks data.params: the user's parameters, then profile,
// target and traits, which they cannot override; no traits is [], not null.
func TestDataParams(t *testing.T) {
	d, err := Data(Config{Profile: "p", Target: "t", Params: map[string]any{"live": map[string]any{"k": "v"}, "profile": "x"}})
	require.NoError(t, err)
	assert.Equal(t, map[string]any{"live": map[string]any{"k": "v"}, "profile": "p", "target": "t", "traits": []any{}}, d["params"])
	d, err = Data(Config{Traits: []string{"gpu", "immutable"}})
	require.NoError(t, err)
	assert.Equal(t, []any{"gpu", "immutable"}, d["params"].(map[string]any)["traits"])
}

// TestDataEqualsRoundTrip: Data passes what is already JSON-shaped (the
// catalog's rules and profiles, the user's data files) to the store as is
// and round-trips the rest; the result is what round-tripping everything
// gives.
func TestDataEqualsRoundTrip(t *testing.T) {
	rs, err := rules.Load()
	require.NoError(t, err)
	ps, err := rules.LoadProfiles()
	require.NoError(t, err)
	rd, err := rules.Data(rs)
	require.NoError(t, err)
	pd, err := rules.ProfilesData(ps)
	require.NoError(t, err)
	require.True(t, jsonShaped(rd), "rules.Data is JSON-shaped")
	require.True(t, jsonShaped(pd), "rules.ProfilesData is JSON-shaped")
	userFile := write(t, t.TempDir(), "user.json", `{"a": {"n": 1.50, "e": 2e3, "l": [1, "x", null, true]}}`)
	cfg := Config{
		Rules: rd, Profiles: pd, DataFiles: []string{userFile}, Profile: "p", Target: "t", Traits: []string{"gpu"},
		Params: map[string]any{"live": map[string]any{"cores": 2, "ratio": 0.25, "names": []string{"a"}, "big": int64(1) << 60}},
	}
	got, err := Data(cfg)
	require.NoError(t, err)
	var want any = map[string]any{"rules": rd, "profiles": pd, "params": params(cfg), "user": map[string]any{}}
	var user any
	require.NoError(t, util.Unmarshal([]byte(mustRead(t, userFile)), &user))
	want.(map[string]any)["user"] = user
	require.NoError(t, util.RoundTrip(&want))
	assert.Equal(t, want, any(got))
	assert.True(t, jsonShaped(got))
	assert.IsType(t, json.Number(""), got["params"].(map[string]any)["live"].(map[string]any)["cores"], "parameters are round-tripped")
}

func mustRead(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	return string(b)
}

func TestJSONShapedValues(t *testing.T) {
	for _, v := range []any{nil, true, "s", json.Number("1"), []any{}, map[string]any{"a": []any{json.Number("2"), nil}}} {
		assert.True(t, jsonShaped(v), "%#v", v)
	}
	for _, v := range []any{1, 1.5, []string{}, map[string]string{}, []any{1}, map[string]any{"a": map[string]any{"b": float64(1)}}} {
		assert.False(t, jsonShaped(v), "%#v", v)
	}
}
