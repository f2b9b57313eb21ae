package policy

import (
	"context"
	"os"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/rules"
)

// TestPrecompiledCatalogIsCurrent: precompiled.bin is what a fresh compile
// of the embedded catalog encodes to, byte for byte (go test
// ./internal/audit/policy -run Precompiled -update rewrites it).
func TestPrecompiledCatalogIsCurrent(t *testing.T) {
	want, err := buildPrecompiled()
	require.NoError(t, err)
	if *updateFormat { // -update: this package's one flag for rewriting what it generates
		require.NoError(t, os.WriteFile("precompiled.bin", want, 0o644))
		return
	}
	// Deterministic: a second compile encodes the same bytes.
	again, err := buildPrecompiled()
	require.NoError(t, err)
	require.Equal(t, want, again, "compiling the catalog twice encodes differently")
	assert.True(t, string(want) == string(precompiledBin),
		"precompiled.bin is stale: the catalog or OPA changed; run go test ./internal/audit/policy -run Precompiled -update")
	_, ok, err := precompiledCatalog(withMark(Sandbox()))
	require.NoError(t, err)
	assert.True(t, ok, "the embedded catalog matches precompiled.bin's key")
}

// TestPrecompiledRoundTrip: decoding gives back the compiled modules,
// locations included, and the rewritten variables.
func TestPrecompiledRoundTrip(t *testing.T) {
	srcs, err := DefaultModules(false)
	require.NoError(t, err)
	mods, err := ParseModules(srcs)
	require.NoError(t, err)
	c, err := Compile(mods, nil)
	require.NoError(t, err)
	key := catalogKey(srcs)
	bin, err := encodeCatalog(key, c.Modules, c.RewrittenVars)
	require.NoError(t, err)
	gotKey, got, rewritten, err := decodeCatalog(bin)
	require.NoError(t, err)
	assert.Equal(t, key, gotKey)
	assert.Equal(t, c.RewrittenVars, rewritten)
	require.Len(t, got, len(c.Modules))
	for name, m := range c.Modules {
		require.Contains(t, got, name)
		assert.True(t, withoutDocs(m).Equal(got[name]), "module %s:\n%v\nwant\n%v", name, got[name], m)
		for i, r := range got[name].Rules {
			assert.Same(t, got[name], r.Module)
			assert.Equal(t, m.Rules[i].Location.Row, r.Location.Row)
		}
	}
	again, err := encodeCatalog(key, got, rewritten)
	require.NoError(t, err)
	assert.Equal(t, bin, again, "re-encoding the decoded modules gives the same bytes (locations included)")

	// A truncated or altered file is an error, not a panic.
	for _, n := range []int{len(precompiledMagic) + 32, len(bin) / 2, len(bin) - 1} {
		_, _, _, err := decodeCatalog(bin[:n])
		assert.ErrorIs(t, err, errPrecompiled, "truncated at %d", n)
	}
}

// TestPrecompiledIsUsedOnlyForItsSources: a file made for other sources
// (or another OPA) is not used, and Load then compiles the sources.
func TestPrecompiledIsUsedOnlyForItsSources(t *testing.T) {
	srcs, err := DefaultModules(false)
	require.NoError(t, err)
	key := catalogKey(srcs)
	_, ok, err := loadPrecompiled(precompiledBin, key, withMark(Sandbox()))
	require.NoError(t, err)
	require.True(t, ok)
	srcs[0].Source += "\n# changed\n"
	_, ok, err = loadPrecompiled(precompiledBin, catalogKey(srcs), withMark(Sandbox()))
	require.NoError(t, err)
	assert.False(t, ok)
	_, ok, err = loadPrecompiled([]byte("junk"), key, withMark(Sandbox()))
	require.NoError(t, err)
	assert.False(t, ok)
}

// TestPrecompiledEvaluatesAsFreshCompile: the engine of the precompiled
// catalog and one compiled from the sources find the same on the dlami
// fixture, with and without a profile, for the entry point and a family.
func TestPrecompiledEvaluatesAsFreshCompile(t *testing.T) {
	rs, err := rules.Load()
	require.NoError(t, err)
	rd, err := rules.Data(rs)
	require.NoError(t, err)
	ps, err := rules.LoadProfiles()
	require.NoError(t, err)
	pd, err := rules.ProfilesData(ps)
	require.NoError(t, err)
	doc := dlamiFacts(t, rs)
	pre, err := Load(Config{})
	require.NoError(t, err)
	// Capabilities given (even the default ones) compile the sources.
	fresh, err := Load(Config{Capabilities: Sandbox()})
	require.NoError(t, err)
	for _, cfg := range []Config{
		{Rules: rd, Profiles: pd},
		{Rules: rd, Profiles: pd, Profile: "k8s-gpu-node", Traits: []string{"immutable"}},
		{Rules: rd, Profiles: pd, Query: "data.amilint.rules.unneeded.findings"},
	} {
		a, err := pre.Engine(context.Background(), cfg)
		require.NoError(t, err)
		b, err := fresh.Engine(context.Background(), cfg)
		require.NoError(t, err)
		got, err := a.Evaluate(context.Background(), doc)
		require.NoError(t, err)
		want, err := b.Evaluate(context.Background(), doc)
		require.NoError(t, err)
		assert.NotEmpty(t, want)
		assert.Equal(t, want, got, "profile %q query %q", cfg.Profile, cfg.Query)
	}
	assert.Equal(t, len(fresh.compiler.Modules), len(pre.compiler.Modules))
	for name, m := range fresh.compiler.Modules {
		assert.True(t, withoutDocs(m).Equal(pre.compiler.Modules[name]), name)
	}
}

// withoutDocs is m without its annotations and comments, which the
// precompiled catalog does not keep (evaluation does not read them).
func withoutDocs(m *ast.Module) *ast.Module {
	c := m.Copy()
	c.Annotations, c.Comments = nil, nil
	for _, r := range c.Rules {
		for ; r != nil; r = r.Else {
			r.Annotations = nil
		}
	}
	return c
}
