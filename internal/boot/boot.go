package boot

import (
	"errors"
	"fmt"
	"sort"

	"github.com/amilint/amilint/internal/finding"
	"github.com/amilint/amilint/internal/unit"
)

// DefaultTarget is the unit the system manager isolates at boot.
const DefaultTarget = "default.target"

// ErrTransaction reports an initial transaction systemd could not build:
// default.target (and its rescue and emergency fallbacks) unloadable, or a
// required dependency of the anchor missing or masked.
var ErrTransaction = errors.New("boot transaction fails")

// Boot is the initial boot transaction: the units systemd queues a start
// job for when it isolates default.target, each with the shortest chain of
// edges from default.target, and the units that only start later, when a
// started socket, timer, path or automount activates them.
type Boot struct {
	// Root is the unit the transaction is anchored at: default.target's
	// unit (through its alias), or rescue.target / emergency.target when
	// default.target cannot be loaded, as systemd falls back.
	Root string
	// Start maps every unit with a start job to its chain from
	// default.target (an empty chain for default.target's own unit when it
	// is not an alias).
	Start map[string][]finding.Edge
	// Activated maps every loadable unit without a start job that a started
	// trigger unit activates on demand to its chain: the trigger's chain
	// plus one edge of kind "socket", "timer", "path" or "automount".
	Activated map[string][]finding.Edge
	// ActivatedBy maps a unit to the started trigger units that activate
	// it, whether or not it also starts at boot; sorted.
	ActivatedBy map[string][]string
	// Err is set when systemd would fail the transaction (ErrTransaction).
	Err error
}

// StartsAtBoot reports whether name (any of a unit's names) gets a start
// job in the initial transaction.
func (b *Boot) StartsAtBoot(name string) bool {
	_, ok := b.Start[name]
	return ok
}

// strength says how a dependency kind takes part in a start transaction,
// after systemd's unit dependency atoms.
type strength int

const (
	noPull       strength = iota
	pull                  // UNIT_ATOM_PULL_IN_START: failure fails the puller
	want                  // UNIT_ATOM_PULL_IN_START_IGNORED: failure is dropped
	verifyActive          // UNIT_ATOM_PULL_IN_VERIFY (Requisite=): no start job
)

func strengthOf(kind string) strength {
	switch kind {
	case "Requires", "BindsTo", ".requires", "Slice", "default", "Type=dbus", "RequiresMountsFor":
		return pull
	case "Wants", "Upholds", ".wants", "Sockets":
		return want
	case "Requisite":
		return verifyActive
	}
	return noPull
}

func isTrigger(kind string) bool {
	switch kind {
	case "socket", "timer", "path", "automount":
		return true
	}
	return false
}

// activeAtBoot are the perpetual units systemd has active before the
// transaction; a start job on them is redundant and dropped.
func activeAtBoot(name string) bool { return perpetual(name) }

// Boot computes the initial boot transaction. It is computed once.
func (g *Graph) Boot() *Boot {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.boot == nil {
		g.boot = g.computeBoot()
	}
	return g.boot
}

type txEdge struct {
	to  *Unit
	dep Dep
}

func (g *Graph) computeBoot() *Boot {
	b := &Boot{
		Start:       map[string][]finding.Edge{},
		Activated:   map[string][]finding.Edge{},
		ActivatedBy: map[string][]string{},
	}
	var root *Unit
	rootName := ""
	for _, n := range []string{DefaultTarget, "rescue.target", "emergency.target"} {
		if u := g.load(n); u != nil && u.State == Loaded {
			root, rootName = u, n
			break
		}
	}
	if root == nil {
		b.Err = fmt.Errorf("load %s: %w", DefaultTarget, ErrTransaction)
		return b
	}
	b.Root = root.Name

	// Build the transaction as transaction_add_job_and_dependencies does:
	// the job is added first, then Requires-like dependencies (whose
	// failure fails this job's addition but leaves the job in place),
	// Requisite= checks, then Wants-like ones (whose failure is dropped).
	in := map[*Unit]bool{}
	taken := map[*Unit][]txEdge{}
	var add func(u *Unit) bool
	add = func(u *Unit) bool {
		if in[u] {
			return true
		}
		in[u] = true
		for _, pass := range []strength{pull, verifyActive, want} {
			for _, d := range u.Deps {
				if strengthOf(d.Kind) != pass {
					continue
				}
				du := g.load(d.Name)
				if du == nil {
					continue
				}
				if du.State != Loaded {
					if pass == want {
						continue
					}
					return false
				}
				if pass == verifyActive {
					continue
				}
				ok := add(du)
				taken[u] = append(taken[u], txEdge{du, d})
				if !ok && pass == pull {
					return false
				}
			}
		}
		return true
	}
	if !add(root) {
		b.Err = fmt.Errorf("start %s: %w: a required dependency cannot be loaded", root.Name, ErrTransaction)
		return b
	}

	// Shortest chains, breadth first over the edges the transaction took.
	var first []finding.Edge
	if rootName != root.Name {
		first = append(first, g.aliasEdge(rootName, root))
	}
	chains := map[*Unit][]finding.Edge{root: first}
	queue := []*Unit{root}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for _, e := range taken[u] {
			if _, seen := chains[e.to]; seen {
				continue
			}
			c := append(append([]finding.Edge(nil), chains[u]...), g.depEdges(u, e.dep, e.to)...)
			chains[e.to] = c
			queue = append(queue, e.to)
		}
	}
	for u, c := range chains {
		if activeAtBoot(u.Name) {
			continue
		}
		b.Start[u.Name] = c
	}

	// Activation by started trigger units.
	for u := range chains {
		if activeAtBoot(u.Name) {
			continue
		}
		for _, d := range u.Deps {
			if !isTrigger(d.Kind) {
				continue
			}
			du := g.load(d.Name)
			if du == nil || du.State != Loaded {
				continue
			}
			b.ActivatedBy[du.Name] = append(b.ActivatedBy[du.Name], u.Name)
			if _, started := b.Start[du.Name]; started {
				continue
			}
			c := append(append([]finding.Edge(nil), chains[u]...), g.depEdges(u, d, du)...)
			if old, ok := b.Activated[du.Name]; !ok || len(c) < len(old) {
				b.Activated[du.Name] = c
			}
		}
	}
	for _, l := range b.ActivatedBy {
		sort.Strings(l)
	}
	return b
}

// depEdges are the chain edges for u pulling in to through d: one edge, and
// an alias edge when d names an alias of to.
func (g *Graph) depEdges(u *Unit, d Dep, to *Unit) []finding.Edge {
	e := []finding.Edge{{From: u.Name, To: d.Name, Kind: d.Kind, Source: d.Source}}
	if d.Name != to.Name && !unit.IsTemplate(d.Name) {
		e = append(e, g.aliasEdge(d.Name, to))
	}
	return e
}

// aliasEdge is the edge from an alias name to its unit, with the alias link
// as Source when there is one.
func (g *Graph) aliasEdge(name string, to *Unit) finding.Edge {
	src := to.Fragment
	if link, _, ok := g.AliasLink(name); ok {
		src = link
	}
	return finding.Edge{From: name, To: to.Name, Kind: "alias", Source: src}
}
