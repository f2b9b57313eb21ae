package audit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/facts"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/security"
)

func view(t *testing.T, name string) *rootfs.FS {
	src, err := fixtures.Source(name)
	require.NoError(t, err)
	return rootfs.New(src)
}

func TestModelJoinsFilesAndBoot(t *testing.T) {
	inv, err := audit.Model(view(t, "dlami"), audit.ModelOptions{})
	require.NoError(t, err)
	assert.True(t, slices.IsSortedFunc(inv.Units, func(a, b facts.UnitInput) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	}))
	byName := map[string]facts.UnitInput{}
	for _, u := range inv.Units {
		byName[u.Name] = u
	}
	ecs := byName["ecs.service"]
	assert.Equal(t, "enabled", ecs.State)
	assert.True(t, ecs.StartsAtBoot)
	assert.NotEmpty(t, ecs.Options, "merged unit options come from the boot loader")
	assert.Equal(t, "ecs.service", ecs.Chain[len(ecs.Chain)-1].To)
	// Every unit with a start job is in the join, file or not.
	for _, name := range inv.Boot.Start {
		_, ok := byName[name]
		assert.True(t, ok, name)
	}
}

func TestAuditPointsFindingsAtTheirUnitFile(t *testing.T) {
	a, err := audit.New(audit.Config{})
	require.NoError(t, err)
	res, err := a.Audit(context.Background(), view(t, "dlami"), finding.Target{Name: "fixture:dlami", Kind: "fixture"})
	require.NoError(t, err)
	assert.Equal(t, "Ubuntu 20.04.6 LTS", res.Report.Target.OS)
	i := slices.IndexFunc(res.Report.Findings, func(f finding.Finding) bool { return f.RuleID == "ecs-agent-unconfigured" })
	require.GreaterOrEqual(t, i, 0)
	assert.Equal(t, "/lib/systemd/system/ecs.service", res.Report.Findings[i].Evidence["fragment"])
}

// TestAuditRefusesATreeWithoutUnits: a directory with no unit file at all
// (not the root of a systemd image) must not pass with no findings.
func TestAuditRefusesATreeWithoutUnits(t *testing.T) {
	a, err := audit.New(audit.Config{})
	require.NoError(t, err)
	tree := fstest.MapFS{"etc/hostname": {Data: []byte("x\n")}}
	_, err = a.Audit(context.Background(), rootfs.New(tree), finding.Target{Name: "t", Kind: "dir"})
	assert.ErrorIs(t, err, audit.ErrNoUnits)
}

// TestAuditFindsABootThatCannotBeQueued: units but no default.target and no
// rescue.target: systemd cannot queue anything, which is a critical
// finding (exit 1), not an error of the audit.
func TestAuditFindsABootThatCannotBeQueued(t *testing.T) {
	a, err := audit.New(audit.Config{})
	require.NoError(t, err)
	tree := fstest.MapFS{"lib/systemd/system/x.service": {Data: []byte("[Service]\nExecStart=/bin/true\n")}}
	res, err := a.Audit(context.Background(), rootfs.New(tree), finding.Target{Name: "t", Kind: "dir"})
	require.NoError(t, err)
	assert.Equal(t, "Failed to load rescue.target", res.Facts.Boot.Failed)
	assert.Equal(t, "Unit default.target not found.", res.Facts.Boot.Fallback)
	ids := map[string]finding.Severity{}
	for _, f := range res.Report.Findings {
		ids[f.RuleID] = f.Severity
	}
	assert.Equal(t, finding.Critical, ids["boot-transaction-fails"])
	assert.Equal(t, finding.Critical, ids["boot-rescue-fallback"])
	assert.Equal(t, 1, finding.ExitCode(res.Report.Findings, finding.High))
}

func TestUnknownProfileIsAnError(t *testing.T) {
	_, err := audit.New(audit.Config{Profile: "nope"})
	assert.ErrorContains(t, err, `no profile "nope"`)
}

func TestEngineIsCompiledOncePerTarget(t *testing.T) {
	a, err := audit.New(audit.Config{})
	require.NoError(t, err)
	ctx := context.Background()
	e1, err := a.Engine(ctx, "fixture:dlami")
	require.NoError(t, err)
	e2, err := a.Engine(ctx, "fixture:dlami")
	require.NoError(t, err)
	assert.Same(t, e1, e2, "audit, fix and re-audit of one target compile once")
	e3, err := a.Engine(ctx, "other")
	require.NoError(t, err)
	assert.NotSame(t, e1, e3, "the target is a policy parameter")
}

// TestAuditBuildsChecksOnlyForUserPolicies: with the built-in catalog alone
// the audit's facts leave out the services' security checks (the catalog
// is never given them) and find exactly what the whole document finds; a
// user policy gets them, and Facts always builds them.
func TestAuditBuildsChecksOnlyForUserPolicies(t *testing.T) {
	ctx := context.Background()
	checks := func(doc *facts.Document) (services, withChecks int) {
		for _, u := range doc.Units {
			if u.Security != nil && u.Security.Exposure != nil {
				services++
				if len(u.Security.Checks) > 0 {
					withChecks++
				}
			}
		}
		return services, withChecks
	}
	for _, name := range []string{"dlami", "hardened"} {
		catalog, err := audit.New(audit.Config{})
		require.NoError(t, err)
		res, err := catalog.Audit(ctx, view(t, name), finding.Target{Name: name})
		require.NoError(t, err)
		services, withChecks := checks(res.Facts)
		require.Positive(t, services, name)
		assert.Zero(t, withChecks, "%s: the catalog's audit builds no checks", name)

		_, doc, err := catalog.Document(view(t, name), name)
		require.NoError(t, err)
		services, withChecks = checks(doc)
		assert.Equal(t, services, withChecks, "%s: Document builds every service's checks", name)
		eng, err := catalog.Engine(ctx, name)
		require.NoError(t, err)
		whole, err := eng.Evaluate(ctx, doc)
		require.NoError(t, err)
		type key struct{ rule, unit, message, severity string }
		keys := func(fs []finding.Finding) []key {
			var out []key
			for _, f := range fs {
				out = append(out, key{f.RuleID, f.Unit, f.Message, f.Severity.String()})
			}
			return out
		}
		assert.ElementsMatch(t, keys(whole), keys(res.Report.Findings), "%s: the same findings from the whole document", name)

		dir := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "c"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "c", "c.rego"), []byte(`package amilint.rules.c

findings contains {"rule_id": "c", "unit": name, "message": "checks"} if {
	some name, u in input.units
	count(u.security.checks) > 0
}
`), 0o644))
		user, err := audit.New(audit.Config{PolicyDirs: []string{dir}})
		require.NoError(t, err)
		res, err = user.Audit(ctx, view(t, name), finding.Target{Name: name})
		require.NoError(t, err)
		services, withChecks = checks(res.Facts)
		assert.Equal(t, services, withChecks, "%s: a user policy's audit builds every service's checks", name)
		n := 0
		for _, f := range res.Report.Findings {
			if f.RuleID == "c" {
				n++
			}
		}
		assert.Equal(t, services, n, "%s: the user policy sees every service's checks", name)
	}
}

// TestFactsOnlyCompilesOnDemand: the facts command's auditor does not
// compile the policies while it builds facts (that would take a core from
// the model for nothing), and still compiles them, errors included, when
// an engine is asked for.
func TestFactsOnlyCompilesOnDemand(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "broken.rego"), []byte("package amilint.user.broken\n\ndeny contains x if {\n"), 0o644))
	for _, factsOnly := range []bool{false, true} {
		a, err := audit.New(audit.Config{PolicyDirs: []string{dir}, FactsOnly: factsOnly})
		require.NoError(t, err, "New does not wait for the policies")
		assert.Equal(t, !factsOnly, audit.CompilationStarted(a), "FactsOnly=%v", factsOnly)
		fsys := view(t, "dlami")
		inv, err := audit.Model(fsys, audit.ModelOptions{})
		require.NoError(t, err)
		doc, err := a.Facts(fsys, inv)
		require.NoError(t, err)
		require.NotEmpty(t, doc.Units)
		assert.Equal(t, !factsOnly, audit.CompilationStarted(a), "building facts compiles nothing")
		_, err = a.Engine(ctx, "dlami")
		require.ErrorContains(t, err, "broken.rego", "FactsOnly=%v: the engine still reports the policy's error", factsOnly)
		assert.True(t, audit.CompilationStarted(a))
	}
}

// TestModelReportsTheFirstScoringFailureByName: the services are scored
// beside the loading of the units, in whatever order the workers finish;
// a failure is still the one of the first service by name, every time.
func TestModelReportsTheFirstScoringFailureByName(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	p, err := security.ParsePolicy([]byte(`{"PrivateTmp": {"range": 0}}`))
	require.NoError(t, err)
	inv, err := audit.Model(view(t, "dlami"), audit.ModelOptions{})
	require.NoError(t, err)
	first := ""
	for _, u := range inv.Units {
		if u.Security != nil {
			first = u.Name
			break
		}
	}
	require.NotEmpty(t, first)
	for range 20 {
		_, err := audit.Model(view(t, "dlami"), audit.ModelOptions{SecurityPolicy: p})
		require.Error(t, err)
		assert.Equal(t, "assess services: assess "+first+": "+first+": security policy: PrivateTmp: range 0", err.Error())
	}
}

// TestModelReadAheadChangesNothing: with the units read ahead beside the
// loading (ReadAhead), the inventory is the one without, unit for unit,
// on every fixture and both Debian roots.
func TestModelReadAheadChangesNothing(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	eachTree(t, func(t *testing.T, src rootfs.Source) {
		plain, err := audit.Model(rootfs.New(src).Memo(), audit.ModelOptions{})
		require.NoError(t, err)
		for range 3 {
			ahead, err := audit.Model(rootfs.New(src).Memo(), audit.ModelOptions{ReadAhead: true})
			require.NoError(t, err)
			require.Equal(t, len(plain.Units), len(ahead.Units))
			for i := range plain.Units {
				assert.Equal(t, plain.Units[i], ahead.Units[i], plain.Units[i].Name)
			}
			assert.Equal(t, plain.Boot.Start, ahead.Boot.Start)
		}
	})
}

// eachTree runs check on every fixture and both Debian roots.
func eachTree(t *testing.T, check func(t *testing.T, src rootfs.Source)) {
	for _, name := range fixtures.Names() {
		t.Run(name, func(t *testing.T) {
			src, err := fixtures.Source(name)
			require.NoError(t, err)
			check(t, src)
		})
	}
	for _, root := range testenv.DebianRoots {
		t.Run(root.Cache, func(t *testing.T) {
			src, err := rootfs.OpenDir(root.Path(t))
			require.NoError(t, err)
			defer src.Close()
			check(t, src)
		})
	}
}

// recording records the names asked of a source, in order.
type recording struct {
	rootfs.Source
	mu    sync.Mutex
	names []string
}

// recorded returns a recording of src and a view of it, marked remote if
// remote.
func recorded(src rootfs.Source, remote bool) (*recording, *rootfs.FS) {
	r := &recording{Source: src}
	fsys := rootfs.New(r)
	if remote {
		fsys = fsys.Remote()
	}
	return r, fsys
}

func (r *recording) ask(name string) {
	r.mu.Lock()
	r.names = append(r.names, name)
	r.mu.Unlock()
}

func (r *recording) Open(name string) (fs.File, error) { r.ask(name); return r.Source.Open(name) }
func (r *recording) ReadDir(name string) ([]fs.DirEntry, error) {
	r.ask(name)
	return r.Source.ReadDir(name)
}
func (r *recording) Lstat(name string) (fs.FileInfo, error) { r.ask(name); return r.Source.Lstat(name) }
func (r *recording) ReadLink(name string) (string, error) {
	r.ask(name)
	return r.Source.ReadLink(name)
}

// asked returns the names asked from the mark-th on (mark: a length of
// names taken before), as a set.
func (r *recording) asked(mark int) map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	set := map[string]bool{}
	for _, n := range r.names[mark:] {
		set[n] = true
	}
	return set
}

// TestModelOfRemoteImage: on a view marked remote, a model whose facts
// are to be built looks up the paths the facts resolve for each service
// (its executables) beside the conditions' paths, and the facts then ask
// the image for none of them; the facts are those of a local view, byte
// for byte. A model whose facts are not built (units -o json) asks the
// remote image for exactly what it asks a local one.
func TestModelOfRemoteImage(t *testing.T) {
	a, err := audit.New(audit.Config{})
	require.NoError(t, err)
	eachTree(t, func(t *testing.T, src rootfs.Source) {
		// The facts document, and the executables it resolves that the
		// facts themselves asked the image for.
		document := func(remote bool) (string, []string) {
			rec, fsys := recorded(src, remote)
			fsys = fsys.Memo()
			inv, err := audit.Model(fsys, audit.ModelOptions{Facts: true})
			require.NoError(t, err)
			mark := len(rec.names)
			doc, err := a.Facts(fsys, inv)
			require.NoError(t, err)
			b, err := json.Marshal(doc)
			require.NoError(t, err)
			asked := rec.asked(mark)
			var execs []string
			for _, u := range doc.Units {
				if u.ExecStart != nil && u.ExecStart.Resolved != "" && asked[strings.TrimPrefix(u.ExecStart.Resolved, "/")] {
					execs = append(execs, u.ExecStart.Resolved)
				}
			}
			return string(b), execs
		}
		local, localExecs := document(false)
		remote, remoteExecs := document(true)
		assert.Equal(t, local, remote)
		assert.Empty(t, remoteExecs, "the facts of a remote image asked for these again")
		assert.NotEmpty(t, localExecs, "the facts of a local image ask for executables")

		// The names a model alone asks for.
		modelled := func(remote bool) map[string]bool {
			rec, fsys := recorded(src, remote)
			_, err := audit.Model(fsys.Memo(), audit.ModelOptions{})
			require.NoError(t, err)
			return rec.asked(0)
		}
		assert.Equal(t, modelled(false), modelled(true), "a remote model without facts reads what a local one reads")
	})
}

// TestAuditOfRemoteImagePrefetches: Audit and Document build the facts,
// so on a remote view their model looks the executables up: each is
// asked of the image before the facts read system.conf (their first read
// of their own), where a local view asks some after it.
func TestAuditOfRemoteImagePrefetches(t *testing.T) {
	a, err := audit.New(audit.Config{})
	require.NoError(t, err)
	src, err := fixtures.Source("dlami")
	require.NoError(t, err)
	for _, remote := range []bool{false, true} {
		for _, how := range []string{"Audit", "Document"} {
			rec, fsys := recorded(src, remote)
			var doc *facts.Document
			if how == "Audit" {
				res, err := a.Audit(context.Background(), fsys, finding.Target{Name: "dlami", Kind: "fixture"})
				require.NoError(t, err)
				doc = res.Facts
			} else {
				_, doc, err = a.Document(fsys, "dlami")
				require.NoError(t, err)
			}
			conf := slices.Index(rec.names, "etc/systemd/system.conf")
			require.Positive(t, conf)
			late := 0
			for _, u := range doc.Units {
				if u.ExecStart != nil && u.ExecStart.Resolved != "" &&
					slices.Index(rec.names, strings.TrimPrefix(u.ExecStart.Resolved, "/")) > conf {
					late++
				}
			}
			if remote {
				assert.Zero(t, late, "%s: executables asked after the model", how)
			} else {
				assert.Positive(t, late, "%s: a local view asks executables in the facts", how)
			}
		}
	}
}

// chainTree is default.target starting c0.service, each cI.service the
// next, n of them: a boot tree n deep, whose chains together hold about
// n²/2 edges.
func chainTree(n int) fstest.MapFS {
	tree := fstest.MapFS{"lib/systemd/system/default.target": {Data: []byte("[Unit]\nWants=c0.service\n")}}
	for i := range n {
		tree[fmt.Sprintf("lib/systemd/system/c%d.service", i)] = &fstest.MapFile{
			Data: fmt.Appendf(nil, "[Unit]\nDefaultDependencies=no\nWants=c%d.service\n[Service]\nExecStart=/bin/true\n", i+1)}
	}
	return tree
}

// TestModelRefusesABootTreeTooDeep: 600 units each starting the next make
// chains of 180,300 edges in all (5,000 made 12 million: a scan took 106 s
// and 12 GB). The image is refused before one chain is built; 200 such
// units (20,000 edges) are audited.
func TestModelRefusesABootTreeTooDeep(t *testing.T) {
	_, err := audit.Model(rootfs.New(chainTree(600)), audit.ModelOptions{})
	require.ErrorIs(t, err, audit.ErrBootTooDeep)
	assert.Contains(t, err.Error(), "the units' boot chains hold 180300 edges in all, over the 65536 amilint builds for 601 units")

	inv, err := audit.Model(rootfs.New(chainTree(200)), audit.ModelOptions{})
	require.NoError(t, err)
	i := slices.IndexFunc(inv.Units, func(u facts.UnitInput) bool { return u.Name == "c199.service" })
	require.GreaterOrEqual(t, i, 0)
	assert.Len(t, inv.Units[i].Chain, 200)
}

// aliasTree is x.service with n Alias= lines and the n links enabling them
// make: every one of its n+1 names carries its n+2 directives.
func aliasTree(n int) fstest.MapFS {
	var unit strings.Builder
	unit.WriteString("[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n")
	tree := fstest.MapFS{
		"lib/systemd/system/default.target":    {Data: []byte("[Unit]\nWants=x.service\n")},
		"lib/systemd/system/multi-user.target": {Data: []byte("[Unit]\n")},
	}
	for i := range n {
		fmt.Fprintf(&unit, "Alias=a%d.service\n", i)
		tree[fmt.Sprintf("etc/systemd/system/a%d.service", i)] = &fstest.MapFile{Mode: fs.ModeSymlink, Data: []byte("/lib/systemd/system/x.service")}
	}
	tree["lib/systemd/system/x.service"] = &fstest.MapFile{Data: []byte(unit.String())}
	return tree
}

// TestModelRefusesTooManyDirectives: a unit of 600 Alias= lines, enabled,
// gives each of its 601 names its 602 directives (a thousand made the
// facts 51 MB; 10,000 made a scan 18 s and 5.2 GB). Refused once the names
// carry over 262,144; 100 aliases (10,000 directives) are audited.
func TestModelRefusesTooManyDirectives(t *testing.T) {
	_, err := audit.Model(rootfs.New(aliasTree(600)), audit.ModelOptions{})
	require.ErrorIs(t, err, audit.ErrTooManyDirectives)
	assert.Contains(t, err.Error(), "the units' directives, each alias carrying its unit's, number over 262144, the most amilint builds for 603 units")

	inv, err := audit.Model(rootfs.New(aliasTree(100)), audit.ModelOptions{})
	require.NoError(t, err)
	i := slices.IndexFunc(inv.Units, func(u facts.UnitInput) bool { return u.Name == "a99.service" })
	require.GreaterOrEqual(t, i, 0)
	assert.Len(t, inv.Units[i].Options, 102)
}
