package policy

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"time"

	"github.com/amilint/amilint/internal/audit/bytesize"
)

// The memory budget: OPA bounds neither what a policy allocates nor how
// fast, and a few lines of Rego (a string doubled by concat thirty times,
// numbers.range over billions) take every byte of a build host or get a
// DaemonSet's pod killed by the kernel, with no word of which policy did
// it. So one evaluation may grow the process's live heap by at most
// Config.Memory (--policy-memory): a watchdog samples the heap while it
// runs and, once the heap holds more than that over what it held at the
// start even after a collection, cancels the evaluation through the same
// context the time budget uses. OPA checks it at every step and inside
// the built-ins that generate (numbers.range), so the heap overshoots the
// budget by at most what one step allocates: with steps that at most
// double what the policy holds, the peak stays within a few budgets.

// DefaultMemory is the heap growth the CLI lets one evaluation make: over
// ten times what the catalog holds on a root of 25,000 units (between 128
// and 160 MiB, measured with --policy-memory).
const DefaultMemory = 2 << 30

// ErrMemory reports an evaluation stopped by its memory budget.
var ErrMemory = errors.New("ran out of memory")

// heapTick is how often the watchdog samples the heap. A core faults in
// about 2 GB a second here, so a policy gains some 4 MB between samples.
const heapTick = 2 * time.Millisecond

// heapObjects is the runtime metric the watchdog samples: the bytes of
// heap objects, live and not yet swept. After runtime.GC it is the live
// heap.
const heapObjects = "/memory/classes/heap/objects:bytes"

// heapLive is the heap the last collection found live (0 before the
// first).
const heapLive = "/gc/heap/live:bytes"

// watchHeap calls over once, from a goroutine of its own, when the heap
// holds more than limit bytes over what it held live when watchHeap was
// called, after a collection; stop ends the watch and waits for it.
func watchHeap(limit uint64, over func()) (stop func()) {
	sample := []metrics.Sample{{Name: heapObjects}, {Name: heapLive}}
	read := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	// The heap at the start counts garbage not collected yet, up to all
	// it allocated since the last collection; were that garbage the
	// policy's headroom, a process that collects rarely (the CLI) would
	// give it several budgets. So when it may exceed a quarter of the
	// budget, collect first: rare in the CLI (its heap holds megabytes
	// when the policies run), and cheaper there than the evaluation.
	start := read()
	if live := sample[1].Value.Uint64(); start > live && start-live > limit/4 {
		runtime.GC()
		start = read()
	}
	ceiling := start + limit
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(heapTick)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if read() <= ceiling {
				continue
			}
			// Garbage counts until it is collected (the CLI collects
			// rarely, for speed): only what survives a collection is
			// held.
			runtime.GC()
			if read() > ceiling {
				over()
				return
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// withMemory bounds ctx by a memory budget of limit bytes (none when 0):
// past it ctx is cancelled with ErrMemory as its cause.
func withMemory(ctx context.Context, limit uint64) (context.Context, context.CancelFunc) {
	if limit == 0 {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := watchHeap(limit, func() { cancel(ErrMemory) })
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
	files := ""
	if len(e.Files) > 0 {
		files = " (" + strings.Join(e.Files, ", ") + ")"
	}
	return fmt.Sprintf("evaluate policies: %s%s %s: held more than %s of heap (--policy-memory)", e.Package, files, ErrMemory, bytesize.Format(e.Limit))
}

// Unwrap makes errors.Is(err, ErrMemory) hold.
func (e *MemoryError) Unwrap() error { return ErrMemory }
