package policy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/audit/policy"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/condition"
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

// withoutUnread is v's JSON form (as encoding/json writes it) without
// what the catalog's input leaves out, as a Rego value, and how many
// members it took out at each path.
func withoutUnread(t *testing.T, v any) (ast.Value, map[string]int) {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	var m any
	require.NoError(t, json.Unmarshal(b, &m))
	removed := map[string]int{}
	prune(m, policy.CatalogUnread(), "", removed)
	want, err := ast.InterfaceToValue(m)
	require.NoError(t, err)
	return want, removed
}

// prune deletes from v what tree (policy.CatalogUnread's form) leaves out,
// counting the deletions by path (at, the path of v).
func prune(v any, tree map[string]any, at string, removed map[string]int) {
	obj, ok := v.(map[string]any)
	if !ok {
		return
	}
	for k, x := range obj {
		name := k
		sub, on := tree[k]
		if !on {
			name = "*"
			sub, on = tree["*"]
		}
		switch s := sub.(type) {
		case nil:
			if on {
				delete(obj, k)
				removed[at+"."+name]++
			}
		case map[string]any:
			prune(x, s, at+"."+name, removed)
		}
	}
}

// unreadPaths are the paths of what tree leaves out.
func unreadPaths(tree map[string]any, at string) []string {
	var out []string
	for k, sub := range tree {
		switch s := sub.(type) {
		case nil:
			out = append(out, at+"."+k)
		case map[string]any:
			out = append(out, unreadPaths(s, at+"."+k)...)
		}
	}
	return out
}

// TestCatalogInputLeavesOutOnlyWhatItDoesNotRead: the catalog's input is,
// as encoding/json writes the document, without the members of
// policy.CatalogUnread and nothing else: on the Debian root, and on a
// document where every unit member is set.
func TestCatalogInputLeavesOutOnlyWhatItDoesNotRead(t *testing.T) {
	_, doc := debianFacts(t)
	all := map[string]int{}
	for _, d := range []*facts.Document{doc, everyMember()} {
		want, removed := withoutUnread(t, d)
		for p, n := range removed {
			all[p] += n
		}
		got, err := policy.CatalogInput(d)
		require.NoError(t, err)
		assert.Zero(t, ast.Compare(want, got.(ast.Value)), "the catalog's input differs from the document without what the catalog does not read")
	}
	for _, p := range unreadPaths(policy.CatalogUnread(), "") {
		assert.Positive(t, all[p], "no document had %s", p)
	}
	assert.Greater(t, all[".units.*.security.checks"], 100)
	assert.Greater(t, all[".units.*.directives.*"], 100)

	// Where nothing is on the path, nothing is left out.
	for _, v := range []any{map[string]any{"x": 1}, map[string]any{"units": map[string]any{"a": map[string]any{"security": 1, "wants": 2}}}, map[string]any{"wants": 1}, []int{1}, nil} {
		got, err := policy.CatalogInput(v)
		require.NoError(t, err)
		want, err := policy.GoValue(v)
		require.NoError(t, err)
		if m, ok := v.(map[string]any); ok && m["units"] != nil {
			want, _ = withoutUnread(t, v)
		}
		assert.Zero(t, ast.Compare(want, got.(ast.Value)), "%v", v)
	}
}

// TestCatalogInputSplitEqualsOneCore: the units of a document are
// converted in two halves side by side (prunedMapSplit) into the value one
// goroutine builds, and a unit that cannot be converted fails either way.
func TestCatalogInputSplitEqualsOneCore(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2)) // the split needs two
	_, doc := debianFacts(t)
	require.Greater(t, len(doc.Units), 64, "enough units to split")
	got, err := policy.CatalogInput(doc)
	require.NoError(t, err)
	want, err := policy.CatalogInputOnOneCore(doc)
	require.NoError(t, err)
	assert.Zero(t, ast.Compare(want.(ast.Value), got.(ast.Value)))

	bad := map[string]any{"units": map[string]any{}}
	for i := range 100 {
		bad["units"].(map[string]any)[fmt.Sprintf("u%03d.service", i)] = map[string]any{"name": i}
	}
	bad["units"].(map[string]any)["u099.service"] = map[string]any{"f": func() {}}
	_, err = policy.CatalogInput(bad)
	require.Error(t, err)
	_, wantErr := policy.CatalogInputOnOneCore(bad)
	assert.Equal(t, wantErr.Error(), err.Error())
}

// everyMember is a facts document with one unit, every member of which is
// set.
func everyMember() *facts.Document {
	yes := true
	return &facts.Document{Units: map[string]*facts.Unit{"a.service": {
		Name: "a.service", Type: "service", State: "enabled", Path: "/p", Fragment: "/f",
		DropIns: []string{"/d"}, Aliases: []string{"b.service"}, StartsAtBoot: true,
		ActivatedBy: []string{"a.socket"}, ActiveAtBoot: true, Preset: "enable",
		Conditions: []condition.Check{{}}, ConditionsReason: "r", ServiceType: "simple",
		ExecStart: &facts.Exec{Path: "/bin/a"}, ExecStartPre: []*facts.Exec{{Path: "/bin/b"}},
		Restart: "always", RestartPreventExitStatus: []string{"1"}, User: "u", Group: "g", DynamicUser: true,
		EnvironmentFiles: []facts.EnvironmentFile{{Path: "/e"}}, Sandboxing: map[string]string{"PrivateTmp": "yes"},
		Wants: []string{"w"}, Requires: []string{"r"}, After: []string{"x"}, WantedBy: []string{"y"},
		SpawnsContainer: true, Directives: map[string]map[string][]string{"Service": {"Type": {"simple"}}, "Install": {"DefaultInstance": {"i"}, "WantedBy": {"y"}}},
		Problems: []string{"p"},
		Security: &facts.Security{Level: "OK", Checks: map[string]facts.SecurityCheck{"PrivateTmp": {Name: "PrivateTmp=", Set: &yes}},
			Top: []facts.SecurityFix{{ID: "X"}}, Notes: []string{"n"}, Error: "e"},
	}}}
}

// unreadNamed lists where mods name what the catalog's input leaves out:
// a term that is the name of a member it leaves out, as a string
// (u.wants, object.get(u, "wants", [])) or a variable; or the name of a
// member it keeps only some members of, where a ref or array does not go
// on with one of those (u.directives.Service, object.get(u,
// "directives", {})).
func unreadNamed(mods map[string]*ast.Module) []string {
	named := map[string]bool{}    // dropped members' names
	only := map[string][]string{} // name -> the members kept of it
	var walk func(tree map[string]any)
	walk = func(tree map[string]any) {
		for k, sub := range tree {
			switch s := sub.(type) {
			case nil:
				if k != "*" {
					named[k] = true
				}
			case map[string]any:
				if _, ok := s["*"]; ok && s["*"] == nil {
					for kk := range s {
						if kk != "*" {
							only[k] = append(only[k], kk)
						}
					}
				}
				walk(s)
			}
		}
	}
	walk(policy.CatalogUnread())
	var out []string
	for name, m := range mods {
		ok := map[*ast.Term]bool{} // terms going on as only allows
		ast.WalkTerms(m, func(x *ast.Term) bool {
			var elems []*ast.Term
			switch v := x.Value.(type) {
			case ast.Ref:
				elems = v
			case *ast.Array:
				for i := range v.Len() {
					elems = append(elems, v.Elem(i))
				}
			}
			for i, e := range elems {
				s, isStr := e.Value.(ast.String)
				kept, restricted := only[string(s)]
				if !isStr || !restricted || i+1 == len(elems) {
					continue
				}
				if next, isStr := elems[i+1].Value.(ast.String); isStr && slices.Contains(kept, string(next)) {
					ok[e] = true
				}
			}
			var s string
			switch v := x.Value.(type) {
			case ast.String:
				s = string(v)
			case ast.Var:
				s = string(v)
			}
			if named[s] || only[s] != nil && !ok[x] {
				out = append(out, fmt.Sprintf("%s names %q at %v", name, s, x.Location))
			}
			return false
		})
	}
	return out
}

// TestCatalogReadsNoneOfWhatItIsNotGiven holds the catalog to not reading
// what its input leaves out: no module names those members, and its
// findings on every root are the same with the whole document (which
// catches a rule that reads them without naming them, iterating a unit's
// members or reporting one whole, where a root shows it).
func TestCatalogReadsNoneOfWhatItIsNotGiven(t *testing.T) {
	srcs, err := policy.DefaultModules(false)
	require.NoError(t, err)
	mods, err := policy.ParseModules(srcs)
	require.NoError(t, err)
	require.NotEmpty(t, mods)
	assert.Empty(t, unreadNamed(mods), "take them out of policy.unreadByCatalog")

	// The check finds what it is for.
	bad, err := policy.ParseModules([]policy.Module{{Name: "bad.rego", Source: `package amilint.rules.bad

findings contains {"rule_id": "x", "message": "m"} if {
	some u in input.units
	count(u.wants) > 0
	object.get(u, "drop_ins", []) != []
	some checks in u.security
	u.directives.Service
	object.get(u, ["directives", "Install", "WantedBy"], []) != []
	object.get(u, ["directives", "Install", "DefaultInstance"], []) != []
	object.get(u, "directives", {}) != {}
}
`}})
	require.NoError(t, err)
	assert.Len(t, unreadNamed(bad), 6, "%q", unreadNamed(bad))

	ctx := context.Background()
	same := func(t *testing.T, a *audit.Auditor, name string, doc *facts.Document) []finding.Finding {
		t.Helper()
		eng, err := a.Engine(ctx, name)
		require.NoError(t, err)
		whole, err := policy.GoValue(doc)
		require.NoError(t, err)
		want, err := eng.Evaluate(ctx, whole) // an ast.Value is used as is
		require.NoError(t, err)
		got, err := eng.Evaluate(ctx, doc)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		return got
	}
	// The one directive the catalog reads: a template the first boot's
	// presets enable through its DefaultInstance=.
	t.Run("DefaultInstance", func(t *testing.T) {
		src, err := fixtures.Source("hardened-firstboot")
		require.NoError(t, err)
		a, doc := rootFacts(t, src)
		u := doc.Units["getty@.service"]
		require.NotNil(t, u)
		require.NotEmpty(t, u.Directives["Install"]["DefaultInstance"])
		u.State, u.Preset = "disabled", "enable"
		found := func(fs []finding.Finding) bool {
			return slices.ContainsFunc(fs, func(f finding.Finding) bool {
				return f.RuleID == "first-boot-presets" && f.Unit == "getty@.service"
			})
		}
		assert.True(t, found(same(t, a, "firstboot", doc)))
		delete(u.Directives["Install"], "DefaultInstance")
		assert.False(t, found(same(t, a, "firstboot", doc)))
	})
	for name, src := range roots(t) {
		t.Run(name, func(t *testing.T) {
			a, doc := rootFacts(t, src())
			got := same(t, a, name, doc)
			if name == testenv.Bookworm.Cache {
				exposure := 0
				for _, f := range got {
					if f.RuleID == "service-exposure" {
						exposure++
					}
				}
				assert.Positive(t, exposure, "the exposure rule reads the security facts")
			}
		})
	}
}

// TestUserPoliciesSeeEverything: with a user's policy loaded, the input is
// the whole document: the security checks, and every member of every
// unit.
func TestUserPoliciesSeeEverything(t *testing.T) {
	ctx := context.Background()
	a, doc := debianFacts(t, `package amilint.rules.user_checks

findings contains f if {
	some name, u in input.units
	some id, c in u.security.checks
	c.set == false
	f := {"rule_id": "user-checks", "unit": name, "message": id, "chain": []}
}
`, `package amilint.rules.user_members

findings contains f if {
	some name, u in input.units
	some k, _ in u
	f := {"rule_id": "user-members", "unit": name, "message": k}
}

findings contains f if {
	some name, u in input.units
	some k, _ in u.security
	f := {"rule_id": "user-members", "unit": name, "message": concat(".", ["security", k])}
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
	members := map[string]bool{}
	for _, f := range fs {
		switch f.RuleID {
		case "user-checks":
			got++
			assert.False(t, strings.Contains(f.Message, " "), f.Message)
		case "user-members":
			members[f.Unit+" "+f.Message] = true
		}
	}
	require.Positive(t, want)
	assert.Equal(t, want, got)

	b, err := json.Marshal(doc)
	require.NoError(t, err)
	var m struct {
		Units map[string]map[string]json.RawMessage `json:"units"`
	}
	require.NoError(t, json.Unmarshal(b, &m))
	wantMembers := map[string]bool{}
	for name, u := range m.Units {
		for k := range u {
			wantMembers[name+" "+k] = true
		}
		if sec, ok := u["security"]; ok {
			var s map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(sec, &s))
			for k := range s {
				wantMembers[name+" security."+k] = true
			}
		}
	}
	assert.Equal(t, wantMembers, members)
	for _, p := range unreadPaths(policy.CatalogUnread(), "") {
		parts := strings.Split(p, ".")
		last := parts[len(parts)-1]
		if parts[len(parts)-2] == "security" {
			last = "security." + last
		}
		if last == "*" || last == "problems" || last == "security.notes" { // the Debian root has none
			continue
		}
		seen := false
		for k := range members {
			seen = seen || strings.HasSuffix(k, " "+last)
		}
		assert.True(t, seen, "a user's policy does not see %s", last)
	}
}
