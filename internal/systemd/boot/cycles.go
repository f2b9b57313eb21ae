package boot

import (
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// Cycle is a set of start jobs ordered in a cycle: each starts, through
// After=/Before= orderings among the others, after itself.
type Cycle struct {
	// Units are the units of the jobs, sorted: a strongly connected set of
	// the ordering among the transaction's jobs (one cycle or several
	// that share jobs).
	Units []string
	// Deletable are the units among them whose job does not matter to
	// default.target (nothing requires it along a chain of Requires=-like
	// dependencies from the anchor), sorted: systemd breaks each cycle it
	// finds by deleting the first such job it meets walking the cycle back,
	// from a job it picks in hash-table order. With one candidate the
	// outcome is certain; with several it changes from boot to boot.
	Deletable []string
	// Deleted are the units whose job the model deletes for it, sorted:
	// the one candidate and the units that require it (their jobs go with
	// it); empty when there are several candidates, or when units of the
	// transaction conflict (systemd may then miss the cycle).
	Deleted []string
	// Missable reports that systemd may not find the cycle at all: units
	// of the transaction conflict (see breakCycles).
	Missable bool
}

// transactionCyclic is the bus error systemd fails a transaction with when
// a cycle has no job it may delete (transaction_verify_order_one).
const transactionCyclic = "Transaction order is cyclic. See system logs for details."

// breakCycles is transaction_verify_order for the start jobs of starts
// (those that are not redundant: perpetual units have no job by then) and
// the verify-active jobs of their Requisite= dependencies:
// it finds the cycles of the ordering among them, applies the deletions
// that are certain (a cycle with one deletable job: that job goes, with the
// jobs that required it; then, in a transaction that is not an isolate,
// the jobs nothing pulls in any more), and fails when a cycle consists of
// jobs that all matter to the anchor. Cycles with several candidates are
// reported, their jobs kept; uncertain are the units that may lose their
// job to them. It returns the jobs left.
func (g *Graph) breakCycles(root *Unit, starts []*Unit, taken, verify map[*Unit][]txEdge, isolate bool) (kept []*Unit, cycles []Cycle, uncertain map[*Unit]bool, f *Failure) {
	// A Requisite= systemd added (the requirements of the job that names
	// it did not fail first) gives its unit a verify-active job unless it
	// has a start job: it takes part in the ordering and, if it is
	// deleted, the jobs that pulled it in go with it.
	in := make(map[*Unit]bool, len(starts))
	for _, u := range starts {
		in[u] = true
	}
	jobs := slices.Clone(starts)
	cloned := false
	for _, u := range starts {
		for _, e := range verify[u] {
			if e.to == u {
				continue
			}
			if !cloned {
				taken, cloned = maps.Clone(taken), true
			}
			taken[u] = append(slices.Clip(taken[u]), e)
			if !in[e.to] {
				in[e.to] = true
				jobs = append(jobs, e.to)
			}
		}
	}
	// Conflicts= between two units with jobs gives one of them a stop job
	// beside its start job, and transaction_verify_order_one walks only
	// the first job of each unit, which is the one added last, in
	// hash-table order: it may walk the stop job, which it never reaches
	// from a start job, and miss a cycle (the oracle showed both). Then
	// no deletion is certain.
	hidden := false
	for _, u := range jobs {
		for _, d := range u.Deps {
			if d.Kind == "Conflicts" && !unit.IsTemplate(d.Name) {
				if y := g.load(d.Name); y != nil && y != u && in[y] && !activeAtBoot(y.Name) {
					hidden = true
				}
			}
		}
	}
	matters, requiredBy := mattering(root, jobs, taken)
	alive := map[*Unit]bool{}
	for _, u := range jobs {
		if !activeAtBoot(u.Name) {
			alive[u] = true
		}
	}
	current := func() []*Unit { return slices.DeleteFunc(slices.Clone(jobs), func(u *Unit) bool { return !alive[u] }) }
	// remove deletes u's job and those requiring it (transaction_unlink_job
	// with delete_dependencies); collect, outside an isolate, the jobs
	// nothing pulls in any more (transaction_collect_garbage).
	remove := func(gone map[*Unit]bool, u *Unit) {
		stack := []*Unit{u}
		for len(stack) > 0 {
			v := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if gone[v] {
				continue
			}
			gone[v] = true
			stack = append(stack, requiredBy[v]...)
		}
	}
	collect := func(gone map[*Unit]bool) {
		if isolate {
			return
		}
		var left []*Unit
		for _, u := range jobs {
			if !gone[u] && (alive[u] || activeAtBoot(u.Name)) {
				left = append(left, u)
			}
		}
		survivors := map[*Unit]bool{}
		for _, u := range collectGarbage(root, slices.Clone(left), taken) {
			survivors[u] = true
		}
		for _, u := range left {
			if !survivors[u] {
				gone[u] = true
			}
		}
	}
	for {
		live := current()
		og := g.buildOrder(live)
		changed := false
		var open []Cycle
		for _, scc := range cyclicSets(live, og) {
			var deletable []*Unit
			var all []*Unit
			for _, u := range scc {
				if matters[u] {
					all = append(all, u)
				} else {
					deletable = append(deletable, u)
				}
			}
			c := Cycle{Units: unitNames(scc), Deletable: unitNames(deletable), Missable: hidden}
			if len(cyclicSets(all, og)) > 0 {
				// A cycle of jobs that all matter: none may be deleted.
				cycles = append(cycles, c)
				return nil, cycles, nil, &Failure{Reason: transactionCyclic, Chain: []unit.Edge{}, Cycle: c.Units}
			}
			if len(deletable) != 1 || hidden {
				open = append(open, c)
				continue
			}
			gone := map[*Unit]bool{}
			remove(gone, deletable[0])
			collect(gone)
			for u := range gone {
				if alive[u] {
					c.Deleted = append(c.Deleted, u.Name)
				}
				delete(alive, u)
			}
			sort.Strings(c.Deleted)
			cycles = append(cycles, c)
			changed = true
			break // the ordering changed: look again
		}
		if changed {
			continue
		}
		cycles = append(cycles, open...)
		// The units that may lose their job: every candidate, what
		// requires it, and what only they pulled in.
		gone := map[*Unit]bool{}
		for _, c := range open {
			for _, n := range c.Deletable {
				remove(gone, g.units[n])
			}
		}
		collect(gone)
		for u := range gone {
			if alive[u] {
				if uncertain == nil {
					uncertain = map[*Unit]bool{}
				}
				uncertain[u] = true
			}
		}
		return slices.DeleteFunc(slices.Clone(starts), func(u *Unit) bool { return !alive[u] && !activeAtBoot(u.Name) }), cycles, uncertain, nil
	}
}

// mattering is transaction_find_jobs_that_matter_to_anchor: the jobs
// reachable from root along Requires=-like and Requisite= edges (whose job
// dependency "matters"); and, for each job, the jobs that pulled it in
// along such an edge.
func mattering(root *Unit, jobs []*Unit, taken map[*Unit][]txEdge) (matters map[*Unit]bool, requiredBy map[*Unit][]*Unit) {
	matters = map[*Unit]bool{root: true}
	requiredBy = map[*Unit][]*Unit{}
	for _, u := range jobs {
		for _, e := range taken[u] {
			if matter(e.dep.Kind) && e.to != u {
				requiredBy[e.to] = append(requiredBy[e.to], u)
			}
		}
	}
	queue := []*Unit{root}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for _, e := range taken[u] {
			if matter(e.dep.Kind) && !matters[e.to] {
				matters[e.to] = true
				queue = append(queue, e.to)
			}
		}
	}
	return matters, requiredBy
}

// matter reports whether a job pulled in through a dependency of kind
// matters to its puller (transaction_add_job_and_dependencies: a
// Requires=-like or Requisite= one).
func matter(kind string) bool {
	s := strengthOf(kind)
	return s == pull || s == verifyActive
}

// cyclicSets are the strongly connected sets of more than one unit of the
// ordering og restricted to nodes (Tarjan's algorithm, without recursion),
// each sorted by name, in the order of their first unit's name.
func cyclicSets(nodes []*Unit, og orderGraph) [][]*Unit {
	in := make(map[*Unit]bool, len(nodes))
	for _, u := range nodes {
		in[u] = true
	}
	index := map[*Unit]int{}
	low := map[*Unit]int{}
	onStack := map[*Unit]bool{}
	var stack []*Unit
	var out [][]*Unit
	type frame struct {
		u *Unit
		i int
	}
	for _, start := range nodes {
		if _, seen := index[start]; seen {
			continue
		}
		call := []frame{{u: start}}
		index[start], low[start] = len(index), len(index)
		stack = append(stack, start)
		onStack[start] = true
		for len(call) > 0 {
			f := &call[len(call)-1]
			next := og[f.u]
			if f.i < len(next) {
				v := next[f.i]
				f.i++
				if !in[v] {
					continue
				}
				if _, seen := index[v]; !seen {
					index[v], low[v] = len(index), len(index)
					stack = append(stack, v)
					onStack[v] = true
					call = append(call, frame{u: v})
				} else if onStack[v] {
					low[f.u] = min(low[f.u], index[v])
				}
				continue
			}
			u := f.u
			call = call[:len(call)-1]
			if len(call) > 0 {
				p := call[len(call)-1].u
				low[p] = min(low[p], low[u])
			}
			if low[u] != index[u] {
				continue
			}
			var scc []*Unit
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				scc = append(scc, w)
				if w == u {
					break
				}
			}
			if len(scc) > 1 {
				slices.SortFunc(scc, byName)
				out = append(out, scc)
			}
		}
	}
	slices.SortFunc(out, func(a, b []*Unit) int { return byName(a[0], b[0]) })
	return out
}

func byName(a, b *Unit) int { return strings.Compare(a.Name, b.Name) }

// unitNames are the names of us, sorted.
func unitNames(us []*Unit) []string {
	var out []string
	for _, u := range us {
		out = append(out, u.Name)
	}
	sort.Strings(out)
	return out
}
