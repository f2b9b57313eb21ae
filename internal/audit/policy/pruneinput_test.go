package policy_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/audit/policy"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// debianFacts is the facts document of the Debian root (its services
// carry security checks) and an auditor over the catalog and the given
// user policies.
func debianFacts(t *testing.T, policies ...string) (*audit.Auditor, *facts.Document) {
	t.Helper()
	src, err := rootfs.OpenDir(testenv.Bookworm.Path(t))
	require.NoError(t, err)
	t.Cleanup(func() { src.Close() })
	a, doc := rootFacts(t, src, policies...)
	checks := 0
	for _, u := range doc.Units {
		if u.Security != nil {
			checks += len(u.Security.Checks)
		}
	}
	require.Greater(t, checks, 1000, "the Debian root's services carry their security checks")
	return a, doc
}

// rootFacts is the facts document of the image root src and an auditor
// over the catalog and the given user policies.
func rootFacts(t *testing.T, src rootfs.Source, policies ...string) (*audit.Auditor, *facts.Document) {
	t.Helper()
	fsys := rootfs.New(src).Memo()
	cfg := audit.Config{}
	if len(policies) > 0 {
		dir := t.TempDir()
		for i, p := range policies {
			require.NoError(t, os.WriteFile(filepath.Join(dir, string(rune('a'+i))+".rego"), []byte(p), 0o644))
		}
		cfg.PolicyDirs = []string{dir}
	}
	a, err := audit.New(cfg)
	require.NoError(t, err)
	inv, err := audit.Model(fsys, audit.ModelOptions{})
	require.NoError(t, err)
	doc, err := a.Facts(fsys, inv)
	require.NoError(t, err)
	return a, doc
}

// TestCatalogInputLeavesOutOnlyChecks: the catalog's input is, as
// encoding/json writes the document, without units.NAME.security.checks
// and nothing else.
func TestCatalogInputLeavesOutOnlyChecks(t *testing.T) {
	_, doc := debianFacts(t)
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	removed := 0
	for _, u := range m["units"].(map[string]any) {
		if sec, ok := u.(map[string]any)["security"].(map[string]any); ok {
			_, had := sec["checks"]
			require.True(t, had)
			delete(sec, "checks")
			removed++
		}
	}
	require.Positive(t, removed)
	want, err := ast.InterfaceToValue(m)
	require.NoError(t, err)
	got, err := policy.CatalogInput(doc)
	require.NoError(t, err)
	assert.Zero(t, ast.Compare(want, got.(ast.Value)), "the catalog's input differs from the document without its checks")

	// Where nothing is on the path, nothing is left out.
	for _, v := range []any{map[string]any{"x": 1}, map[string]any{"units": map[string]any{"a": map[string]any{"security": 1}}}, []int{1}, nil} {
		got, err := policy.CatalogInput(v)
		require.NoError(t, err)
		want, err := policy.GoValue(v)
		require.NoError(t, err)
		assert.Zero(t, ast.Compare(want, got.(ast.Value)), "%v", v)
	}
}

// TestCatalogReadsNoChecks holds the catalog to not reading what its
// input leaves out: no module names the checks (no term is the string
// "checks", as in u.security.checks), and its findings on the Debian root
// are the same with the whole document (which catches a rule that reads
// them without naming them, iterating a security object's members or
// reporting one whole, where the Debian root shows it).
func TestCatalogReadsNoChecks(t *testing.T) {
	srcs, err := policy.DefaultModules(false)
	require.NoError(t, err)
	mods, err := policy.ParseModules(srcs)
	require.NoError(t, err)
	require.NotEmpty(t, mods)
	for name, m := range mods {
		ast.WalkTerms(m, func(x *ast.Term) bool {
			assert.NotEqual(t, ast.String("checks"), x.Value, "%s names the security checks at %v: take them out of policy.unreadByCatalog", name, x.Location)
			return false
		})
	}
	ctx := context.Background()
	a, doc := debianFacts(t)
	eng, err := a.Engine(ctx, "debian")
	require.NoError(t, err)
	whole, err := policy.GoValue(doc)
	require.NoError(t, err)
	want, err := eng.Evaluate(ctx, whole) // an ast.Value is used as is
	require.NoError(t, err)
	got, err := eng.Evaluate(ctx, doc)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	exposure := 0
	for _, f := range got {
		if f.RuleID == "service-exposure" {
			exposure++
		}
	}
	assert.Positive(t, exposure, "the exposure rule reads the security facts")
}

// TestUserPoliciesSeeChecks: with a user's policy loaded, the input is the
// whole document.
func TestUserPoliciesSeeChecks(t *testing.T) {
	ctx := context.Background()
	a, doc := debianFacts(t, `package amilint.rules.user_checks

findings contains f if {
	some name, u in input.units
	some id, c in u.security.checks
	c.set == false
	f := {"rule_id": "user-checks", "unit": name, "message": id, "chain": []}
}
`)
	eng, err := a.Engine(ctx, "debian")
	require.NoError(t, err)
	fs, err := eng.Evaluate(ctx, doc)
	require.NoError(t, err)
	want := 0
	for _, u := range doc.Units {
		if u.Security != nil {
			for _, c := range u.Security.Checks {
				if c.Set != nil && !*c.Set {
					want++
				}
			}
		}
	}
	got := 0
	for _, f := range fs {
		if f.RuleID == "user-checks" {
			got++
			assert.False(t, strings.Contains(f.Message, " "), f.Message)
		}
	}
	require.Positive(t, want)
	assert.Equal(t, want, got)
}
