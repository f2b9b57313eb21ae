package boot

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	"github.com/amilint/amilint/internal/systemd/unit"
)

// DefaultTarget is the unit the system manager isolates at boot.
const DefaultTarget = "default.target"

// ErrTransaction reports an initial transaction systemd could not build:
// default.target and its rescue.target fallback unloadable, or a unit the
// anchor requires (directly or through others) missing, masked or refused.
var ErrTransaction = errors.New("boot transaction fails")

// RescueTarget is what PID 1 isolates when default.target cannot be
// loaded.
const RescueTarget = "rescue.target"

// Failure is why systemd cannot queue the initial transaction: PID 1 then
// freezes, and the machine never reaches a target.
type Failure struct {
	// Reason is systemd's own message, as PID 1 logs it: "Failed to
	// isolate default target: Unit x.service is masked.".
	Reason string
	// Unit is the unit that cannot be started, "" when the failure is
	// not one unit's (conflicting requirements).
	Unit string
	// Chain is the edges from default.target to Unit: the requirements
	// that make Unit block the boot.
	Chain []unit.Edge
	// Cycle are the units of an ordering cycle none of whose jobs systemd
	// may delete (see [Cycle]), when that is why; sorted.
	Cycle []string
}

// Boot is the initial boot transaction: the units systemd queues a start
// job for when it isolates default.target, and the units that only start
// later, when a started socket, timer, path or automount activates them.
// [Boot.Chain] explains each with the shortest chain of edges from
// default.target. Names are unit ids ([Unit.Name]).
type Boot struct {
	// Default is the unit default.target resolves to through its alias
	// ("multi-user.target"), or default.target when it has none.
	Default string
	// Root is the unit the transaction is anchored at: the unit the
	// kernel command line names (systemd.unit=, a runlevel word), else
	// Default; rescue.target when that cannot be loaded, as systemd falls
	// back.
	Root string
	// CmdLineUnit is the unit the kernel command line names in
	// default.target's place, as given (systemd.unit=, a runlevel word's
	// target); "" when it names none.
	CmdLineUnit string
	// Fallback is why systemd isolates rescue.target instead of the unit
	// it was to start ("Unit default.target is masked."); "" when it does
	// not fall back.
	Fallback string
	// Start are the units with a start job, sorted.
	Start []string
	// Activated are the loadable units without a start job that a started
	// trigger unit activates on demand, sorted.
	Activated []string
	// ActivatedBy maps a unit to the started trigger units that activate
	// it, whether or not it also starts at boot; sorted.
	ActivatedBy map[string][]string
	// Conflicted maps a unit whose start job a Conflicts= removed (or that
	// required such a unit) to the unit it conflicted with.
	Conflicted map[string]string
	// Cycles are the ordering cycles among the start jobs and how
	// systemd breaks them (see [Cycle]), in the order of their first
	// unit's name.
	Cycles []Cycle
	// Uncertain are the units of Start that may lose their start job to
	// an ordering cycle systemd breaks by deleting one of several jobs,
	// which it picks in hash-table order, differently from boot to boot:
	// the candidates, the units that require them and, when the default
	// target is not isolated, what only they pull in; sorted.
	Uncertain []string
	// Failure says why systemd cannot queue the transaction; then nothing
	// starts. Nil when it can.
	Failure *Failure
	// Err is set when systemd would fail the transaction: an error
	// wrapping ErrTransaction with Failure's reason.
	Err error

	start map[string]bool
	// step holds, for every unit reached, the edges from its parent in the
	// shortest-path tree (one edge, or two through an alias name); chains
	// are built on demand so a deep tree costs linear memory.
	step   map[string][]unit.Edge
	parent map[string]string
	first  []unit.Edge // the default.target alias edge, if any
}

// StartsAtBoot reports whether the unit with id name gets a start job in
// the initial transaction.
func (b *Boot) StartsAtBoot(name string) bool { return b.start[name] }

// Chain returns the shortest chain of edges from default.target that makes
// the unit with id name start (or, for an activated unit, that starts its
// trigger, plus the activation edge); nil for a unit that does neither, and
// for default.target's own unit when it is not an alias.
func (b *Boot) Chain(name string) []unit.Edge {
	if _, ok := b.step[name]; !ok && name != b.Root {
		return nil
	}
	var rev [][]unit.Edge
	for n := name; n != b.Root; n = b.parent[n] {
		rev = append(rev, b.step[n])
	}
	out := append([]unit.Edge(nil), b.first...)
	for i := len(rev) - 1; i >= 0; i-- {
		out = append(out, rev[i]...)
	}
	return out
}

// ChainEdges is the sum of len(b.Chain(n)) over names, counted without
// building a chain: a unit's count is its parent's plus its own step, each
// unit's counted once. The chains together grow with the square of the
// boot tree's depth (a chain of units each starting the next), so a caller
// that builds them all asks this first.
func (b *Boot) ChainEdges(names []string) int {
	memo := make(map[string]int, len(b.step))
	var path []string
	total := 0
	for _, name := range names {
		if _, ok := b.step[name]; !ok && name != b.Root {
			continue
		}
		// Walk up to the root or a unit already counted, then count back
		// down the path.
		n := name
		path = path[:0]
		for n != b.Root {
			if _, ok := memo[n]; ok {
				break
			}
			path = append(path, n)
			n = b.parent[n]
		}
		c := len(b.first)
		if n != b.Root {
			c = memo[n]
		}
		for i := len(path) - 1; i >= 0; i-- {
			c += len(b.step[path[i]])
			memo[path[i]] = c
		}
		total += c
	}
	return total
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
	case "Requires", "BindsTo", ".requires", "Slice", "default", "Type=dbus", "RequiresMountsFor", "LogNamespace", "Device":
		return pull
	case "Wants", "Upholds", ".wants", ".upholds", "Sockets", "sysv", "WantsMountsFor", "DevicePolicy", "Quota":
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
		ActivatedBy: map[string][]string{},
		Conflicted:  map[string]string{},
		start:       map[string]bool{},
		step:        map[string][]unit.Edge{},
		parent:      map[string]string{},
	}
	// do_queue_default_job: the unit the kernel command line names, else
	// default.target; else rescue.target, with no further fallback.
	rootName := DefaultTarget
	root := g.load(DefaultTarget)
	b.Default = root.Name
	if g.bootUnit != "" {
		b.CmdLineUnit = g.bootUnit
		rootName, root = g.bootUnit, g.load(g.bootUnit)
	}
	if root.State != Loaded {
		b.Fallback = loadError(root)
		rootName, root = RescueTarget, g.load(RescueTarget)
		if root.State != Loaded {
			reason := "Failed to load " + RescueTarget
			if root.State == Masked {
				reason = RescueTarget + " masked"
			}
			b.fail(&Failure{Reason: reason, Unit: root.Name, Chain: []unit.Edge{}})
			return b
		}
	}
	b.Root = root.Name

	// Build the transaction as transaction_add_job_and_dependencies does:
	// the job is added first, then Requires-like dependencies (whose
	// failure fails this job's addition but leaves the job in place),
	// then Wants-like ones (whose failure is dropped), then Requisite=
	// checks (which fail it too).
	// The recursion is an explicit stack so a deep chain cannot exhaust
	// the goroutine stack.
	in := map[*Unit]bool{}
	taken := map[*Unit][]txEdge{}
	dropped := map[*Unit]bool{}
	verify := map[*Unit][]txEdge{}
	// A target without AllowIsolate=yes cannot be isolated: PID 1 starts
	// it instead (job mode replace), which collects garbage.
	v, _ := root.Last("Unit", "AllowIsolate")
	isolate := parseBool(v, false)
	if f := g.addJobs(root, in, taken, dropped, verify); f != nil {
		if isolate {
			f.Reason = "Failed to isolate default target: " + f.Reason
		} else {
			f.Reason = "Failed to start default target: " + f.Reason
		}
		if rootName != root.Name {
			f.Chain = append([]unit.Edge{g.aliasEdge(rootName, root)}, f.Chain...)
		}
		b.fail(f)
		return b
	}

	// Shortest chains, breadth first over the edges the transaction took.
	if rootName != root.Name {
		b.first = []unit.Edge{g.aliasEdge(rootName, root)}
	}
	seen := map[*Unit]bool{root: true}
	order := []*Unit{root}
	for i := 0; i < len(order); i++ {
		u := order[i]
		for _, e := range taken[u] {
			if seen[e.to] {
				continue
			}
			seen[e.to] = true
			b.step[e.to.Name] = g.depEdges(u, e.dep, e.to)
			b.parent[e.to.Name] = u.Name
			order = append(order, e.to)
		}
	}
	// Units whose job systemd dropped again because a requirement failed
	// (systemd 254 on) have no job; the jobs they added stay, and their
	// chains still pass through them.
	jobs := slices.DeleteFunc(slices.Clone(order), func(u *Unit) bool { return dropped[u] })
	if !isolate {
		jobs = collectGarbage(root, jobs, taken)
	}
	// transaction_activate verifies the order before it merges jobs.
	jobs, cycles, uncertain, f := g.breakCycles(root, jobs, taken, verify, isolate)
	b.Cycles = cycles
	if f != nil {
		if isolate {
			f.Reason = "Failed to isolate default target: " + f.Reason
		} else {
			f.Reason = "Failed to start default target: " + f.Reason
		}
		b.fail(f)
		return b
	}
	deleted, f := g.resolveConflicts(root, jobs, taken, verify)
	if f != nil {
		b.fail(f)
		return b
	}
	for _, u := range jobs {
		if by := deleted[u]; by != nil {
			b.Conflicted[u.Name] = by.Name
		}
	}
	for _, u := range jobs {
		if !activeAtBoot(u.Name) && deleted[u] == nil {
			b.start[u.Name] = true
			b.Start = append(b.Start, u.Name)
			if uncertain[u] {
				b.Uncertain = append(b.Uncertain, u.Name)
			}
		}
	}
	sort.Strings(b.Start)
	sort.Strings(b.Uncertain)

	// Activation by started trigger units, in breadth-first order so the
	// first trigger found gives the shortest chain.
	for _, u := range order {
		if !b.start[u.Name] {
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
			if _, reached := b.step[du.Name]; reached || du == root {
				continue
			}
			b.step[du.Name] = g.depEdges(u, d, du)
			b.parent[du.Name] = u.Name
			b.Activated = append(b.Activated, du.Name)
		}
	}
	sort.Strings(b.Activated)
	for _, l := range b.ActivatedBy {
		sort.Strings(l)
	}
	return b
}

// collectGarbage is transaction_collect_garbage, which a transaction that
// does not isolate runs: a job no other job of the transaction pulls in is
// deleted, until none is left (jobs left only by a job dropped for a
// failed requirement go; a cycle of jobs pulling each other stays, as in
// systemd).
func collectGarbage(root *Unit, jobs []*Unit, taken map[*Unit][]txEdge) []*Unit {
	alive := make(map[*Unit]bool, len(jobs))
	for _, u := range jobs {
		alive[u] = true
	}
	for changed := true; changed; {
		changed = false
		pulled := map[*Unit]bool{}
		for u := range alive {
			for _, e := range taken[u] {
				if e.to != u {
					pulled[e.to] = true
				}
			}
		}
		for u := range alive {
			if u != root && !pulled[u] {
				delete(alive, u)
				changed = true
			}
		}
	}
	return slices.DeleteFunc(jobs, func(u *Unit) bool { return !alive[u] })
}

// fail records that systemd cannot queue the transaction.
func (b *Boot) fail(f *Failure) {
	b.Failure = f
	b.Err = fmt.Errorf("%w: %s", ErrTransaction, f.Reason)
}

// loadError is bus_unit_validate_load_state's message for a unit that is
// not loaded.
func loadError(u *Unit) string {
	switch u.State {
	case Masked:
		return fmt.Sprintf("Unit %s is masked.", u.Name)
	case BadSetting:
		return fmt.Sprintf("Unit %s has a bad unit file setting.", u.Name)
	case Error:
		return fmt.Sprintf("Unit %s failed to load properly, please adjust/correct and reload service manager: %s", u.Name, errnoText(u.LoadError))
	}
	return fmt.Sprintf("Unit %s not found.", u.Name)
}

// errnoText is the description of the error number behind the load error
// of a unit in the error state, as systemd's message gives it (not the
// model's own account of the cause): a line too long, a bad section
// header, the image policy parser's distinct errors, and "Invalid
// argument" for the rest (a line that is not UTF-8 clean, a path that is
// not normalized).
func errnoText(err error) string {
	switch {
	case errors.Is(err, unit.ErrLineTooLong):
		return "No buffer space available" // ENOBUFS
	case errors.Is(err, unit.ErrBadSection):
		return "Bad message" // EBADMSG
	case errors.Is(err, errImagePolicyDup):
		return "Name not unique on network" // ENOTUNIQ
	case errors.Is(err, errImagePolicyPartition):
		return "Invalid slot" // EBADSLT
	case errors.Is(err, errImagePolicyFlag):
		return "Invalid request code" // EBADRQC
	}
	return "Invalid argument" // EINVAL
}

// resolveConflicts applies Conflicts= between units of the transaction as
// transaction_merge_jobs does. When X has a start job and Conflicts=Y, Y
// gets a stop job that matters to the anchor if X's start does, and X a
// stop job (from Y's ConflictedBy) that never does; each unit's
// unmergeable start/stop pair is resolved by deleting the job that does
// not matter (matter: reachable from the anchor through Requires-like
// edges only), and deleting a job deletes the jobs that required it. So:
// if only X matters, Y's start goes; if only Y matters, the stop of Y goes
// and X's start with it; if both matter the transaction fails. If neither
// matters systemd drops one of the two in hash-table order, which varies
// from run to run (the oracle test showed both outcomes); the model drops
// Y. Jobs the dropped unit pulled in stay: an isolate transaction collects
// no garbage. It returns the deleted units and, for each, the unit its
// conflict was with. A conflict between two required units is a Failure.
func (g *Graph) resolveConflicts(root *Unit, order []*Unit, taken, verify map[*Unit][]txEdge) (map[*Unit]*Unit, *Failure) {
	// The verify-active jobs of Requisite= take part too: their pullers
	// require them.
	in := map[*Unit]bool{}
	for _, u := range order {
		in[u] = true
	}
	var verified []*Unit
	edges := taken
	for _, u := range order {
		for _, e := range verify[u] {
			if e.to == u {
				continue
			}
			if len(verified) == 0 {
				edges = maps.Clone(taken)
			}
			edges[u] = append(slices.Clip(edges[u]), e)
			if !in[e.to] {
				in[e.to] = true
				verified = append(verified, e.to)
			}
		}
	}
	matters, requiredBy := mattering(root, slices.Concat(order, verified), edges)
	order = slices.Concat(order, verified)
	deleted := map[*Unit]*Unit{}
	var drop func(u, by *Unit)
	drop = func(u, by *Unit) {
		deleted[u] = by
		for _, v := range requiredBy[u] {
			if deleted[v] == nil {
				drop(v, by)
			}
		}
	}
	for _, x := range order {
		for _, d := range x.Deps {
			if d.Kind != "Conflicts" || deleted[x] != nil {
				continue
			}
			y := g.load(d.Name)
			if y == nil || y == x || !in[y] || deleted[y] != nil || activeAtBoot(y.Name) {
				continue
			}
			switch {
			case matters[x] && matters[y]:
				return nil, &Failure{Reason: fmt.Sprintf("Failed to isolate default target: Transaction contains conflicting jobs 'stop' and 'start' for %s. "+
					"Probably contradicting requirement dependencies configured.", y.Name), Unit: y.Name, Chain: []unit.Edge{}}
			case matters[y]:
				drop(x, y)
			default:
				drop(y, x)
			}
		}
	}
	return deleted, nil
}

// DropFailedJobs is the systemd version from which a job whose Requires=,
// BindsTo= or Requisite= dependency cannot be added is deleted from the
// transaction again (systemd pull request 27852); before it the job
// stays and starts.
const DropFailedJobs = 254

// addJobs adds root's start job and its dependencies' to the transaction
// (in), recording the edges taken, the Requisite= edges that add a
// verify-active job (verify) and, from DropFailedJobs on, the units whose
// job was dropped again. It returns why systemd would fail adding root's
// job, or nil.
func (g *Graph) addJobs(root *Unit, in map[*Unit]bool, taken map[*Unit][]txEdge, dropped map[*Unit]bool, verify map[*Unit][]txEdge) *Failure {
	// frame is one call of transaction_add_job_and_dependencies in
	// progress: which pass over the unit's dependencies, and where.
	type frame struct {
		u    *Unit
		pass int
		i    int
	}
	passes := []strength{pull, want, verifyActive}
	in[root] = true
	stack := []frame{{u: root}}
	var failed *Failure // the failure of the frame that returned last
	returned := false
	// fail returns from the top frame with failure f: its job stays
	// before DropFailedJobs and is deleted from it on.
	fail := func(f *Failure) {
		if u := stack[len(stack)-1].u; g.version >= DropFailedJobs {
			dropped[u] = true
			delete(in, u)
		}
		stack = stack[:len(stack)-1]
		failed, returned = f, true
	}
	for len(stack) > 0 {
		f := &stack[len(stack)-1]
		if returned {
			// The child at f.i-1 returned failed.
			returned = false
			if failed != nil && passes[f.pass] != want {
				d := f.u.Deps[f.i-1]
				failed.Chain = slices.Concat(g.depEdges(f.u, d, g.load(d.Name)), failed.Chain)
				fail(failed)
				continue
			}
			failed = nil
		}
		if f.pass == len(passes) {
			stack = stack[:len(stack)-1]
			failed, returned = nil, true
			continue
		}
		if f.i == len(f.u.Deps) {
			f.pass, f.i = f.pass+1, 0
			continue
		}
		d := f.u.Deps[f.i]
		f.i++
		pass := passes[f.pass]
		if strengthOf(d.Kind) != pass {
			continue
		}
		if unit.IsTemplate(d.Name) {
			// Left only where systemd does not resolve a template
			// either: it cannot load one as a unit ("missing the
			// instance name"), so the dependency is dropped, or fails
			// a Requires=.
			if pass == want {
				continue
			}
			fail(&Failure{Reason: fmt.Sprintf("Unit name %s is missing the instance name.", d.Name), Unit: d.Name,
				Chain: []unit.Edge{{From: f.u.Name, To: d.Name, Kind: d.Kind, Source: d.Source}}})
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
			fail(&Failure{Reason: loadError(du), Unit: du.Name, Chain: g.depEdges(f.u, d, du)})
			continue
		}
		if pass == verifyActive {
			verify[f.u] = append(verify[f.u], txEdge{du, d})
			continue
		}
		taken[f.u] = append(taken[f.u], txEdge{du, d})
		if in[du] {
			continue // an existing job: success, as systemd returns
		}
		in[du] = true
		delete(dropped, du)
		stack = append(stack, frame{u: du})
	}
	return failed
}

// depEdges are the chain edges for u pulling in to through d: one edge, and
// an alias edge when d names an alias of to.
func (g *Graph) depEdges(u *Unit, d Dep, to *Unit) []unit.Edge {
	e := []unit.Edge{{From: u.Name, To: d.Name, Kind: d.Kind, Source: d.Source, Assumes: g.gen.assumes(d.Source)}}
	if d.Name != to.Name && !unit.IsTemplate(d.Name) {
		e = append(e, g.aliasEdge(d.Name, to))
	}
	return e
}

// aliasEdge is the edge from an alias name to its unit, with the alias link
// as Source when there is one.
func (g *Graph) aliasEdge(name string, to *Unit) unit.Edge {
	src := to.Fragment
	if link, _, ok := g.AliasLink(name); ok {
		src = link
	}
	return unit.Edge{From: name, To: to.Name, Kind: "alias", Source: src}
}
