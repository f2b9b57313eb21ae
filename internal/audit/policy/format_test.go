package policy

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateFormat = flag.Bool("update", false, "rewrite the embedded policies in opa fmt style")

// TestPoliciesFormatted fails when a shipped .rego file is not in opa fmt
// style (Rego v1); go test -run TestPoliciesFormatted -update rewrites them.
func TestPoliciesFormatted(t *testing.T) {
	mods, err := DefaultModules(true)
	require.NoError(t, err)
	for _, m := range mods {
		got, err := format.SourceWithOpts(m.Name, []byte(m.Source), format.Opts{RegoVersion: ast.RegoV1})
		require.NoError(t, err, m.Name)
		if *updateFormat {
			p := filepath.Join("..", "..", "..", "policies", strings.TrimPrefix(m.Name, "embedded:"))
			require.NoError(t, os.WriteFile(p, got, 0o644))
			continue
		}
		assert.Equal(t, string(got), m.Source, "%s is not opa fmt formatted (go test ./internal/audit/policy -run TestPoliciesFormatted -update)", m.Name)
	}
}

// TestPoliciesAnnotated checks that every shipped package carries a
// METADATA title and every rule family's findings are documented.
func TestPoliciesAnnotated(t *testing.T) {
	mods, err := DefaultModules(false)
	require.NoError(t, err)
	parsed, err := ParseModules(mods)
	require.NoError(t, err)
	for name, m := range parsed {
		var title string
		for _, a := range m.Annotations {
			if a.Scope == "package" {
				title = a.Title
			}
		}
		assert.NotEmpty(t, title, "%s: package METADATA title", name)
	}
}
