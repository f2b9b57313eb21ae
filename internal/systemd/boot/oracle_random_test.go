package boot

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// The random oracle: seeded random trees stacked over each Debian root,
// each compared with systemd --test of that root's systemd.
//
//	AMILINT_ORACLE_SEEDS=N   compare seeds 1..N (default defaultOracleSeeds)
//	AMILINT_ORACLE_SEED=S    compare seed S alone, printing its tree
//	AMILINT_ORACLE_REPEAT=K  run systemd up to K times on a tree whose first
//	                         answer differs from the model's (default 10)

// defaultOracleSeeds is how many random trees CI compares per systemd
// version: each costs one systemd --test run (about 0.3 s on two cores).
const defaultOracleSeeds = 500

// feature names what a random tree exercises, for the coverage check.
type feature string

const (
	featRun             feature = "/run content"
	featVarRun          feature = "a unit linked through /var/run"
	featRequiresMasked  feature = "a masked unit required via .requires/"
	featRequiresMissing feature = "a missing unit required via .requires/"
	featRequiresSetting feature = "Requires= on a masked or missing unit"
	featDefaultMasked   feature = "default.target masked"
	featDefaultMissing  feature = "default.target missing"
	featDefaultAlias    feature = "default.target aliased to another target"
	featRescueMasked    feature = "rescue.target masked"
	featTemplate        feature = "template instances"
	featAlias           feature = "aliases"
	featUpholds         feature = ".upholds/ links"
)

// treeGen builds one random tree.
type treeGen struct {
	r     *rand.Rand
	ops   []op
	feats map[feature]bool
	// required counts what the tree adds to multi-user.target's own
	// requirements (Requires=basic.target aside): one at most, for the
	// reason in unitFile.
	required int
}

func (g *treeGen) chance(p float64) bool  { return g.r.Float64() < p }
func (g *treeGen) pick(s []string) string { return s[g.r.IntN(len(s))] }
func (g *treeGen) add(o ...op)            { g.ops = append(g.ops, o...) }
func (g *treeGen) has(f feature)          { g.feats[f] = true }
func (g *treeGen) dir() string {
	return g.pick([]string{etcDir, etcDir, libDir, "/lib/systemd/system/"})
}
func (g *treeGen) link(from, to string) op { return link(from, to) }
func (g *treeGen) file(p, text string) op  { return file(p, text) }

const (
	etcDir = "/etc/systemd/system/"
	libDir = "/usr/lib/systemd/system/"
)

// randomNames are the units a random tree defines (and some it only
// names): services, a template, a socket, a timer, targets.
var randomNames = []string{"r-a.service", "r-b.service", "r-c.service", "r-d-e.service", "r-f.service",
	"r-g@.service", "r-h.socket", "r-i.timer", "r-j.service", "r-k.service", "r-t.target", "r-u.target"}

// dep returns a random dependency name: one of the tree's units (an
// instance for the template), one it masks, or one that does not exist.
func (g *treeGen) dep() string {
	switch g.r.IntN(14) {
	case 0:
		return "r-missing.service"
	case 1:
		return "r-masked.service"
	}
	n := g.pick(randomNames)
	if unit.IsTemplate(n) {
		g.has(featTemplate)
		return unit.WithInstance(n, g.pick([]string{"one", "two"}))
	}
	return n
}

// unitFile returns a random unit file for name.
func (g *treeGen) unitFile(name string) string {
	var b strings.Builder
	b.WriteString("[Unit]\n")
	// At most one Requires= or BindsTo=: when one of several fails,
	// which of the others systemd added first depends on the order it
	// walks a hash table, so the outcome changes from run to run.
	pulls := 0
	switch {
	case name == "r-t.target":
		pulls = 1 // it gets .requires links (see randomTree)
	case unit.IsTemplate(name):
		pulls = 1 // its instances require their new slice already
	}
	for range g.r.IntN(4) {
		key := g.pick([]string{"Wants", "Wants", "Wants", "Requires", "Requires", "Requisite", "BindsTo", "Upholds", "PartOf"})
		if key == "Requires" || key == "BindsTo" {
			if pulls++; pulls > 1 {
				key = "Wants"
			}
		}
		d := g.dep()
		if key != "Wants" && key != "Upholds" && key != "PartOf" && (d == "r-missing.service" || d == "r-masked.service") {
			g.has(featRequiresSetting)
		}
		fmt.Fprintf(&b, "%s=%s\n", key, d)
	}
	if g.chance(0.15) {
		b.WriteString("DefaultDependencies=no\n")
	}
	switch unit.Type(name) {
	case "socket":
		fmt.Fprintf(&b, "[Socket]\nListenStream=/run/%s\n", name)
		if g.chance(0.5) {
			b.WriteString("Service=r-j.service\n")
		}
	case "timer":
		b.WriteString("[Timer]\nOnBootSec=5\n")
		if g.chance(0.5) {
			b.WriteString("Unit=r-k.service\n")
		}
	case "target":
	default:
		switch g.r.IntN(10) {
		case 0:
			b.WriteString("[Service]\nType=simple\n") // refused: no ExecStart=
		case 1:
			b.WriteString("[Service]\nType=oneshot\nExecStart=/bin/true\nExecStart=/bin/true\n")
		default:
			b.WriteString("[Service]\nExecStart=/bin/true\n")
		}
	}
	return b.String()
}

// randomTree returns the changes seed makes to a Debian root.
func randomTree(seed uint64) ([]op, map[feature]bool) {
	g := &treeGen{r: rand.New(rand.NewPCG(seed, 0x626f6f74)), feats: map[feature]bool{}}
	if g.chance(0.8) {
		g.add(g.link(etcDir+"r-masked.service", "/dev/null"))
	}
	for _, n := range randomNames {
		d := g.dir()
		switch g.r.IntN(12) {
		case 0:
			g.add(g.link(d+n, "/dev/null"))
		case 1:
			g.add(g.file(d+n, "")) // an empty file masks too
		case 2:
			// not written: a name others may want or require
		default:
			g.add(g.file(d+n, g.unitFile(n)))
		}
		if g.chance(0.35) {
			// Only sockets and timers in sockets.target.wants: a service
			// orders after basic.target, which orders after
			// sockets.target (a target after what it pulls in), and
			// systemd breaks that cycle by deleting a job it picks in
			// hash-table order (ordering cycles are outside the model).
			targets := []string{"multi-user.target", "multi-user.target", "r-t.target"}
			if t := unit.Type(n); t == "socket" || t == "timer" {
				targets = append(targets, "sockets.target")
			}
			target := g.pick(targets)
			if unit.IsTemplate(n) {
				n = unit.WithInstance(n, "one")
				g.has(featTemplate)
			}
			g.add(link(etcDir+target+".wants/"+n, d+strings.Replace(n, "@one", "@", 1)))
		}
	}
	// Aliases, enabled under their alias name.
	for i := range g.r.IntN(3) {
		alias := fmt.Sprintf("r-alias%d.service", i)
		target := g.pick(randomNames)
		if unit.Type(target) != "service" || unit.IsTemplate(target) {
			continue
		}
		g.has(featAlias)
		g.add(g.link(etcDir+alias, target), g.link(etcDir+"multi-user.target.wants/"+alias, etcDir+alias))
	}
	if g.chance(0.3) {
		g.has(featAlias)
		g.has(featTemplate)
		g.add(g.link(etcDir+"r-alias@.service", "r-g@.service"),
			g.link(etcDir+"multi-user.target.wants/r-alias@two.service", etcDir+"r-g@.service"))
	}
	// Drop-ins at name, prefix, template and type level.
	for range g.r.IntN(3) {
		where := g.pick([]string{"r-a.service.d/", "r-d-.service.d/", "r-.service.d/", "service.d/", "r-g@.service.d/", "r-g@one.service.d/", "r-t.target.d/"})
		key := g.pick([]string{"Wants", "Wants", "Upholds"})
		g.add(g.file(etcDir+where+fmt.Sprintf("%02d.conf", g.r.IntN(3)), "[Unit]\n"+key+"="+g.dep()+"\n"))
	}
	// Dependency directories of the tree's units.
	for range g.r.IntN(4) {
		kind := g.pick([]string{".wants", ".wants", ".requires", ".upholds"})
		owner := g.pick([]string{"r-a.service", "r-g@.service", "r-b.service", "r-t.target", "r-u.target"})
		if kind == ".requires" {
			// A .requires link of its own makes a second requirement
			// (see unitFile); r-t.target has none in its file.
			owner = "r-t.target"
		}
		n := g.dep()
		if kind == ".upholds" {
			g.has(featUpholds)
		}
		g.add(g.link(etcDir+owner+kind+"/"+n, etcDir+n))
	}
	// What default.target requires: masked or missing units directly,
	// through .requires/ and a drop-in, or the tree's units.
	if g.chance(0.2) {
		g.required++
		switch g.r.IntN(3) {
		case 0:
			// The link must not itself resolve to /dev/null: such a
			// .requires entry is skipped, not a dependency on a mask.
			g.has(featRequiresMasked)
			g.add(g.link(etcDir+"multi-user.target.requires/r-masked.service", libDir+"r-masked.service"),
				g.link(etcDir+"r-masked.service", "/dev/null"))
		case 1:
			g.has(featRequiresMissing)
			g.add(g.link(etcDir+"multi-user.target.requires/r-missing.service", etcDir+"r-missing.service"))
		default:
			g.add(g.link(etcDir+"multi-user.target.requires/"+g.pick(randomNames[:5]), etcDir+g.pick(randomNames[:5])))
		}
	}
	if g.required == 0 && g.chance(0.1) {
		g.required++
		g.add(g.file(etcDir+"multi-user.target.d/50-requires.conf", "[Unit]\nRequires="+g.dep()+"\n"))
	}
	// default.target: masked, missing, or another target; rescue.target
	// masked.
	if g.chance(0.15) {
		switch g.r.IntN(4) {
		case 0:
			g.has(featDefaultMasked)
			g.add(g.link(etcDir+"default.target", "/dev/null"))
		case 1:
			g.has(featDefaultMissing)
			g.add(systemdtest.Remove(libDir + "default.target"))
		case 2:
			g.has(featDefaultAlias)
			g.add(g.link(etcDir+"default.target", g.pick([]string{"r-t.target", "r-u.target", "multi-user.target"})))
		default:
			g.has(featDefaultAlias)
			g.add(g.link(etcDir+"default.target", libDir+"r-gone.target"))
		}
		if g.chance(0.3) {
			g.has(featRescueMasked)
			g.add(g.link(etcDir+"rescue.target", "/dev/null"))
		}
	}
	// /run: none of it exists when PID 1 loads units.
	if g.chance(0.6) {
		g.has(featRun)
		runDir := "/run/systemd/" + g.pick([]string{"system", "system", "transient", "generator", "generator.late", "system.control"}) + "/"
		g.add(g.file(runDir+"r-run.service", "[Service]\nExecStart=/bin/true\n"),
			g.link(runDir+"multi-user.target.wants/r-run.service", runDir+"r-run.service"))
		if g.chance(0.4) {
			g.add(g.link(runDir+"multi-user.target.requires/r-run-missing.service", "/nowhere"))
		}
		if g.chance(0.3) {
			g.add(g.link(runDir+"default.target", "/dev/null"))
		}
		if g.chance(0.3) {
			g.add(g.link(runDir+g.pick(randomNames[:5]), "/dev/null"))
		}
		if g.chance(0.3) {
			// A runtime copy of a unit, shadowing /usr/lib's if it were
			// seen: empty (a mask) or refused.
			g.add(g.file(runDir+g.pick(randomNames[:5]), g.pick([]string{"", "[Service]\nType=simple\n"})))
		}
		if g.chance(0.3) {
			g.add(g.file(runDir+"multi-user.target.d/50-run.conf", "[Unit]\nWants=r-run.service\nRequires=r-run-missing.service\n"))
		}
		if g.chance(0.3) {
			g.has(featVarRun)
			kind := ".wants"
			if g.required == 0 && g.chance(0.5) {
				g.required++
				kind = ".requires"
			}
			g.add(g.file("/run/r-viarun.service", "[Service]\nExecStart=/bin/true\n"),
				g.link(etcDir+"r-viarun.service", "/var/run/r-viarun.service"),
				g.link(etcDir+"multi-user.target"+kind+"/r-viarun.service", etcDir+"r-viarun.service"))
		}
	}
	return g.ops, g.feats
}

// oracleSeeds are the seeds TestOracleRandom compares.
func oracleSeeds(t *testing.T) []uint64 {
	if s := os.Getenv("AMILINT_ORACLE_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "AMILINT_ORACLE_SEED")
		return []uint64{n}
	}
	n := uint64(defaultOracleSeeds)
	if s := os.Getenv("AMILINT_ORACLE_SEEDS"); s != "" {
		var err error
		n, err = strconv.ParseUint(s, 10, 32)
		require.NoError(t, err, "AMILINT_ORACLE_SEEDS")
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i) + 1
	}
	return seeds
}

// tally counts agreement over many trees.
type tally struct {
	mu                            sync.Mutex
	trees, failed, fellBack       int
	units, agree                  int
	reruns, unsettled, mismatched int
	feats                         map[feature]int
}

// outcome is one answer to "what does boot queue": the units started, or
// the failure reason, and the target fallen back to.
type outcome struct {
	start    []string
	failed   string
	fallback string
}

func (o outcome) equal(p outcome) bool {
	return slices.Equal(o.start, p.start) && o.failed == p.failed && o.fallback == p.fallback
}

func modelOutcome(b *Boot) outcome {
	o := outcome{start: b.Start}
	if b.Failure != nil {
		o.start, o.failed = nil, b.Failure.Reason
	}
	if b.Fallback != "" {
		o.fallback = RescueTarget
	}
	return o
}

func oracleOutcome(tr systemdtest.Transaction) outcome {
	o := outcome{start: tr.Start, failed: tr.Failed, fallback: tr.Fallback}
	if o.failed != "" {
		o.start = nil
	}
	return o
}

// TestOracleRandom compares the model with systemd 252 and 257 on seeded
// random trees stacked over each Debian root: units with every dependency
// kind and directory, masks, missing units, refused units, templates,
// aliases, drop-ins, masked and missing units that default.target requires
// directly and through .requires/, masked, missing and re-aliased
// default.target, a masked rescue.target, and /run content (which PID 1
// never sees). Every tree must agree unit by unit, and on whether and why
// the transaction fails and whether systemd falls back to rescue.target.
//
// Where systemd's own answer depends on the order it walks a hash table
// (which of several Requires= it adds before one fails), it differs from
// run to run: a tree whose first answer differs from the model's is run
// again, and the model must give one of systemd's answers.
func TestOracleRandom(t *testing.T) {
	seeds := oracleSeeds(t)
	runs := 10
	if k, err := strconv.Atoi(os.Getenv("AMILINT_ORACLE_REPEAT")); err == nil && k > 0 {
		runs = k
	}
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			sd.Path(t) // fail (under CI) or skip once, not per tree
			tl := &tally{feats: map[feature]int{}}
			t.Run("trees", func(t *testing.T) {
				for _, seed := range seeds {
					t.Run(fmt.Sprint(seed), func(t *testing.T) {
						t.Parallel()
						compareRandomTree(t, sd, seed, runs, len(seeds) == 1, tl)
					})
				}
			})
			t.Logf("systemd %d: %d trees (%d fail the transaction, %d fall back to rescue.target); "+
				"%d of %d started units agree; %d trees needed reruns, %d where systemd disagrees with itself, %d mismatched",
				sd.Version, tl.trees, tl.failed, tl.fellBack, tl.agree, tl.units, tl.reruns, tl.unsettled, tl.mismatched)
			if len(seeds) < 100 {
				return
			}
			for _, f := range []feature{featRun, featVarRun, featRequiresMasked, featRequiresMissing, featRequiresSetting,
				featDefaultMasked, featDefaultMissing, featDefaultAlias, featRescueMasked, featTemplate, featAlias, featUpholds} {
				assert.Positive(t, tl.feats[f], "no tree had %s", f)
			}
			assert.Positive(t, tl.failed, "no tree failed the transaction")
			assert.Positive(t, tl.fellBack, "no tree fell back to rescue.target")
		})
	}
}

// compareRandomTree compares one seed's tree on sd.
func compareRandomTree(t *testing.T, sd systemdtest.Systemd, seed uint64, runs int, verbose bool, tl *tally) {
	ops, feats := randomTree(seed)
	replay := fmt.Sprintf("replay: AMILINT_ORACLE_SEED=%d go test -count=1 -v -run 'TestOracleRandom/%d/' ./internal/systemd/boot", seed, sd.Version)
	describe := func() string {
		var b strings.Builder
		b.WriteString(replay + "\n")
		for _, o := range ops {
			switch {
			case o.Remove:
				fmt.Fprintf(&b, "  %s (removed)\n", o.Path)
			case o.Link != "":
				fmt.Fprintf(&b, "  %s -> %s\n", o.Path, o.Link)
			default:
				fmt.Fprintf(&b, "  %s: %q\n", o.Path, o.Text)
			}
		}
		return b.String()
	}
	if verbose {
		t.Log(describe())
	}
	v := newVariant(t, sd, ops)
	g := v.graph(t)
	got := modelOutcome(g.Boot())

	var first, want outcome
	var seen []outcome
	matched, tries := false, 0
	for i := 0; i < runs && !matched; i++ {
		tries++
		o := oracleOutcome(v.oracle(t))
		if i == 0 {
			first = o
		}
		if !slices.ContainsFunc(seen, o.equal) {
			seen = append(seen, o)
		}
		matched = o.equal(got)
		want = o
	}
	if !matched {
		want = first
	}

	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.trees++
	for f := range feats {
		tl.feats[f]++
	}
	if want.failed != "" {
		tl.failed++
	}
	if want.fallback != "" {
		tl.fellBack++
	}
	if tries > 1 {
		tl.reruns++
	}
	if len(seen) > 1 {
		tl.unsettled++
	}
	all := append(slices.Clone(want.start), got.start...)
	sort.Strings(all)
	all = slices.Compact(all)
	tl.units += len(all)
	for _, u := range all {
		if slices.Contains(want.start, u) == slices.Contains(got.start, u) {
			tl.agree++
		}
	}
	if len(seen) > 1 {
		t.Logf("seed %d: systemd gave %d different answers in %d runs; the model's is one of them", seed, len(seen), tries)
	}
	if matched {
		return
	}
	tl.mismatched++
	var answers strings.Builder
	for i, o := range seen {
		onlySystemd, onlyModel := diff(o.start, got.start)
		fmt.Fprintf(&answers, "  answer %d: failed=%q fallback=%q; only systemd starts %v, only the model %v\n", i+1, o.failed, o.fallback, onlySystemd, onlyModel)
	}
	t.Errorf("seed %d, systemd %d: the model failed=%q fallback=%q; systemd gave %d different answers in %d runs:\n%s%s",
		seed, sd.Version, got.failed, got.fallback, len(seen), tries, answers.String(), describe())
}
