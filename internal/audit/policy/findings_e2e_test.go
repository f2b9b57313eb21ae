package policy_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/audit/policy"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// roots are the image roots the catalog's differential tests run on: the
// Debian bookworm and trixie roots and every embedded fixture.
func roots(t *testing.T) map[string]func() rootfs.Source {
	t.Helper()
	out := map[string]func() rootfs.Source{}
	for _, r := range testenv.DebianRoots {
		out[r.Cache] = func() rootfs.Source {
			src, err := rootfs.OpenDir(r.Path(t))
			require.NoError(t, err)
			t.Cleanup(func() { src.Close() })
			return src
		}
	}
	for _, name := range fixtures.Names() {
		out["fixture:"+name] = func() rootfs.Source {
			src, err := fixtures.Source(name)
			require.NoError(t, err)
			return src
		}
	}
	return out
}

// TestDirectFindingsOnRoots: the catalog's findings on every root come
// out of OPA's value directly, equal to those through encoding/json, and
// the query marked family by family finds what the entry point alone does.
func TestDirectFindingsOnRoots(t *testing.T) {
	ctx := context.Background()
	for name, src := range roots(t) {
		t.Run(name, func(t *testing.T) {
			a, doc := rootFacts(t, src())
			eng, err := a.Engine(ctx, name)
			require.NoError(t, err)
			want, err := eng.EvaluateThroughJSON(ctx, doc)
			require.NoError(t, err)
			got, err := eng.Evaluate(ctx, doc)
			require.NoError(t, err)
			assert.Equal(t, want, got)
			direct, err := eng.TakesDirectPath(ctx, doc)
			require.NoError(t, err)
			assert.True(t, direct, "the catalog's findings go through encoding/json")
			plain, err := a.EngineQuery(ctx, name, policy.EntryPoint)
			require.NoError(t, err)
			unmarked, err := plain.Evaluate(ctx, doc)
			require.NoError(t, err)
			assert.Equal(t, unmarked, got)
		})
	}
}

// TestDirectFindingsOfUserPolicies: whatever a user's policy returns,
// Evaluate's findings or error are those through encoding/json.
func TestDirectFindingsOfUserPolicies(t *testing.T) {
	ctx := context.Background()
	src, err := fixtures.Source(fixtures.Default)
	require.NoError(t, err)
	for _, c := range []struct {
		name, body string
		direct     bool
	}{
		{"a unit whole as evidence", `findings contains {"rule_id": "u", "unit": n, "message": "m", "evidence": {"unit": u}} if some n, u in input.units`, true},
		{"the chain of every unit", `findings contains {"rule_id": "u", "unit": n, "message": "m", "chain": u.chain} if { some n, u in input.units; u.chain }`, true},
		{"members matching only ignoring case", `findings contains {"rule_id": "u", "Unit": n, "MESSAGE": "m", "remediation": {"Action": "disable"}} if some n, _ in input.units`, false},
		{"extra members", `findings contains {"rule_id": "u", "unit": n, "message": "m", "family": {"x": {1, 2}, 3: [4]}} if some n, _ in input.units`, false},
		{"wrong types", `findings contains {"rule_id": "u", "unit": 1, "message": "m"}`, false},
		{"unknown severity", `findings contains {"rule_id": "u", "severity": "grave", "message": "m"}`, false},
		{"a number float64 cannot hold", `findings contains {"rule_id": "u", "message": "m", "evidence": {"n": 1e400}}`, false},
		{"no message", `findings contains {"rule_id": "u", "unit": n} if some n, _ in input.units`, false},
		{"not an object", `findings contains "u"`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, doc := rootFacts(t, src, "package amilint.rules.user\n\n"+c.body+"\n")
			eng, err := a.Engine(ctx, "dlami")
			require.NoError(t, err)
			want, wantErr := eng.EvaluateThroughJSON(ctx, doc)
			got, err := eng.Evaluate(ctx, doc)
			if wantErr != nil {
				require.Error(t, err)
				assert.Equal(t, wantErr.Error(), err.Error())
			} else {
				require.NoError(t, err)
				require.NotEmpty(t, want)
			}
			assert.Equal(t, want, got)
			direct, err := eng.TakesDirectPath(ctx, doc)
			require.NoError(t, err)
			assert.Equal(t, c.direct, direct)
		})
	}
}
