package policy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/amilint/amilint/internal/audit/bytesize"
)

// The memory budget: OPA bounds neither what a policy allocates nor how
// fast, and a few lines of Rego (a string doubled by concat thirty times,
// numbers.range over billions) take every byte of a build host or get a
// DaemonSet's pod killed by the kernel, with no word of which policy did
// it. So one evaluation may grow the process's live heap by at most
// Config.Memory (--policy-memory), in two parts:
//
//   - while it runs, the runtime's soft memory limit (debug.SetMemoryLimit)
//     is lowered to what the process uses plus the budget, so that the
//     runtime collects garbage as the heap nears the budget, however
//     rarely it collects otherwise (the CLI's GOGC), and makes the
//     allocating goroutine help: garbage never counts, and a policy that
//     holds more is slowed by the collector;
//   - a watchdog samples the heap every millisecond and cancels the
//     evaluation, through the context OPA checks at every step and inside
//     the built-ins that generate (numbers.range), once a collection
//     found more than the budget held, or the heap is over twice the
//     budget whatever a collection would find.
//
// A step of OPA is not interrupted: one that doubles what the policy
// holds (concat of a string with itself) can take the heap to two or
// three times the budget before the evaluation stops. The built-ins that
// can build in one step far more than the policy holds are sized first
// (amplify.go). The budget is the process's: evaluations running side by
// side share it.

// MaxDefaultMemory bounds the default budget.
const MaxDefaultMemory = 2 << 30

// ErrMemory reports an evaluation stopped by its memory budget.
var ErrMemory = errors.New("ran out of memory")

// heapTick is how often the watchdog samples the heap. A core faults in
// about 2 GB a second here, so a policy gains some 2 MB between samples.
const heapTick = time.Millisecond

// The runtime metrics the watchdog samples.
const (
	// heapObjects is the bytes of heap objects, live and not yet swept.
	// After runtime.GC it is the live heap.
	heapObjects = "/memory/classes/heap/objects:bytes"
	// heapLive is the heap the last collection found live (0 before the
	// first).
	heapLive = "/gc/heap/live:bytes"
	// runtimeTotal less heapReleased is what the runtime's soft limit
	// bounds: all the memory it has mapped, less what it gave back. Of
	// that, heapFree is free to allocate into without growing.
	runtimeTotal = "/memory/classes/total:bytes"
	heapReleased = "/memory/classes/heap/released:bytes"
	heapFree     = "/memory/classes/heap/free:bytes"
)

// watchHeap calls over once, from a goroutine of its own, when the heap
// holds more than limit bytes over start, what it held when watchHeap
// was called, and then ranAway once if, stopped, it goes on to hold
// two times limit more (three, garbage included). halt is what the watch
// calls then, and what stops the evaluation from elsewhere: over, and the
// runtime's memory limit set again from there; stop ends the watch,
// restores the limit and waits for it.
func watchHeap(limit uint64, over, ranAway func()) (start uint64, halt, stop func()) {
	// used is what the soft limit bounds, less the free heap: what the
	// process holds, objects (garbage too), stacks and the runtime's own.
	// Each goroutine reading it has its own samples.
	samples := func() []metrics.Sample {
		return []metrics.Sample{{Name: heapObjects}, {Name: heapLive}, {Name: runtimeTotal}, {Name: heapReleased}, {Name: heapFree}}
	}
	read := func(sample []metrics.Sample) (objects, live, used uint64) {
		metrics.Read(sample)
		v := func(i int) uint64 { return sample[i].Value.Uint64() }
		return v(0), v(1), v(2) - v(3) - v(4)
	}
	sample := samples() // the watch's
	// The heap at the start counts garbage not collected yet, up to all
	// it allocated since the last collection; were that garbage the
	// policy's headroom, a process that collects rarely (the CLI) would
	// give it several budgets. So when it may exceed a quarter of the
	// budget, collect first: rare in the CLI (its heap holds megabytes
	// when the policies run), and cheaper there than the evaluation.
	start, live, used := read(sample)
	if start > live && start-live > limit/4 {
		runtime.GC()
		start, _, used = read(sample)
	}
	var mu sync.Mutex
	restore := lowerMemoryLimit(used + limit)
	// Once the evaluation is stopped, a limit the heap is already over
	// only slows its unwinding down (the collector runs back to back):
	// the limit is set again a budget over what the process holds then,
	// which keeps the collector after the garbage of a call that goes
	// on allocating (stuck.go), so that what the watch reads is current.
	var halted atomic.Bool
	released := false // under mu: the watch is over, the limit restored
	halt = func() {
		over()
		if halted.Swap(true) {
			return
		}
		_, _, used := read(samples())
		mu.Lock()
		defer mu.Unlock()
		if released {
			return // a call given up, halting after the watch ended
		}
		restore()
		restore = lowerMemoryLimit(used + limit)
	}
	release := func() {
		mu.Lock()
		defer mu.Unlock()
		restore()
		restore = func() {}
		released = true
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(heapTick)
		defer t.Stop()
		// base is the heap when the watch first saw the evaluation
		// stopped (by the watch, or by a sized built-in refused).
		var base uint64
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			objects, live, _ := read(sample)
			if base == 0 {
				if !halted.Load() && (live > start+limit || objects > start+2*limit) {
					halt()
				}
				if halted.Load() {
					base = max(objects, 1)
				}
				continue
			}
			// Stopped, and still growing: a built-in call that
			// cannot be interrupted (stuck.go). A call under way when
			// the evaluation was stopped may still build up to two
			// budgets (the most a sized built-in is let build); past
			// that, or a budget more with its garbage, it is not one
			// of those.
			if live > base+2*limit || objects > base+3*limit {
				ranAway()
				return
			}
		}
	})
	return start, halt, func() {
		close(done)
		wg.Wait()
		release()
	}
}

// memoryLimit is the runtime's soft memory limit as the budgets set it:
// the lowest any evaluation running asks for, and the process's own
// again once none runs.
var memoryLimit struct {
	sync.Mutex
	running int
	own     int64
}

// lowerMemoryLimit lowers the runtime's soft memory limit to at most n
// bytes until restore is called.
func lowerMemoryLimit(n uint64) (restore func()) {
	memoryLimit.Lock()
	defer memoryLimit.Unlock()
	cur := debug.SetMemoryLimit(-1)
	if memoryLimit.running == 0 {
		memoryLimit.own = cur
	}
	memoryLimit.running++
	if n < math.MaxInt64 && int64(n) < cur {
		debug.SetMemoryLimit(int64(n))
	}
	return func() {
		memoryLimit.Lock()
		defer memoryLimit.Unlock()
		memoryLimit.running--
		if memoryLimit.running == 0 {
			debug.SetMemoryLimit(memoryLimit.own)
		}
	}
}

// withMemory bounds ctx by a memory budget of limit bytes (none when 0):
// past it ctx is cancelled with ErrMemory as its cause.
func withMemory(ctx context.Context, limit uint64) (context.Context, context.CancelFunc) {
	if limit == 0 {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	runaway := make(chan struct{})
	start, halt, stop := watchHeap(limit, func() { cancel(ErrMemory) }, func() { close(runaway) })
	ctx = context.WithValue(ctx, heapKey{}, &heapBudget{start: start, limit: limit, over: halt, runaway: runaway})
	return ctx, func() {
		stop()
		cancel(nil)
	}
}

// MemoryError is an evaluation stopped by its memory budget.
type MemoryError struct {
	// Package names what was being evaluated when the budget ran out, as
	// TimeoutError's does.
	Package string
	// Files are the package's policy files.
	Files []string
	// Limit is the budget, in bytes.
	Limit uint64
}

func (e *MemoryError) Error() string {
	return fmt.Sprintf("evaluate policies: %s %s: held more than %s of heap (--policy-memory)", named(e.Package, e.Files), ErrMemory, bytesize.Format(e.Limit))
}

// Unwrap makes errors.Is(err, ErrMemory) hold.
func (e *MemoryError) Unwrap() error { return ErrMemory }
