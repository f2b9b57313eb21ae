package policy_test

import (
	"context"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/audit/finding"
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
			require.Equal(t, 1, plain.Parts())
			unmarked, err := plain.Evaluate(ctx, doc)
			require.NoError(t, err)
			assert.Equal(t, unmarked, got)
			assert.Equal(t, min(2, runtime.GOMAXPROCS(0)), eng.Parts(), "the catalog alone is evaluated in two parts on several cores")
		})
	}
}

// TestSplitEvaluation: on one core the catalog is evaluated in one query,
// with the same findings as in two parts; a budget too small for either
// part stops the evaluation with a TimeoutError naming a catalog package.
func TestSplitEvaluation(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2)) // two cores, whatever the machine has
	ctx := context.Background()
	src, err := rootfs.OpenDir(testenv.Bookworm.Path(t))
	require.NoError(t, err)
	defer src.Close()
	a, doc := rootFacts(t, src)
	split, err := a.Engine(ctx, "split")
	require.NoError(t, err)
	require.Equal(t, 2, split.Parts(), "this test needs two cores")
	want, err := split.Evaluate(ctx, doc)
	require.NoError(t, err)
	require.True(t, slices.ContainsFunc(want, func(f finding.Finding) bool { return f.RuleID == "service-exposure" }))
	require.True(t, slices.ContainsFunc(want, func(f finding.Finding) bool { return f.RuleID != "service-exposure" }))

	runtime.GOMAXPROCS(1)
	one, err := a.Engine(ctx, "one core")
	require.NoError(t, err)
	require.Equal(t, 1, one.Parts())
	got, err := one.Evaluate(ctx, doc)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	runtime.GOMAXPROCS(2)

	p, err := policy.Load(policy.Config{})
	require.NoError(t, err)
	cfg := a.PolicyConfig("tight")
	cfg.Timeout = time.Nanosecond
	tight, err := p.Engine(ctx, cfg)
	require.NoError(t, err)
	require.Equal(t, 2, tight.Parts())
	// OPA notices the budget at its next step: a part may finish first,
	// or stop before its first mark (then the message names the entry
	// point); most stop inside a family, and the message names it.
	timedOut, named := 0, 0
	for range 20 {
		_, err = tight.Evaluate(ctx, doc)
		if err == nil {
			continue
		}
		var te *policy.TimeoutError
		require.ErrorAs(t, err, &te)
		timedOut++
		// Both parts stopped: each package a part was in, joined.
		rules := false
		for _, pkg := range strings.Split(te.Package, " and ") {
			if strings.HasPrefix(pkg, "package amilint.rules.") {
				rules = true
			} else {
				assert.Equal(t, "package amilint", pkg, te.Package)
			}
		}
		if rules {
			named++
			assert.NotEmpty(t, te.Files, te.Package)
		}
	}
	assert.Positive(t, timedOut, "a budget of 1ns stops some evaluation")
	assert.Positive(t, named, "a part's progress record names the family it was in")
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
