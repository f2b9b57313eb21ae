package policy

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// A budget stops an evaluation through its context, which OPA checks
// between steps and inside the built-ins that loop (numbers.range,
// replace, regex.replace, net.cidr_expand). Any other built-in call runs
// to its end first, and some never end, or not before the machine runs
// out of memory: a Go template that loops (strings.render_template), all
// the paths of a graph (graph.reachable_paths), the decimal digits of a
// number of a billion bits (bits.lsh, *). A goroutine cannot be stopped
// from outside, so such an evaluation is given up: when it has not
// returned stuckAfter after its budget stopped it, or at once when it
// goes on to hold two budgets more once stopped, Evaluate returns a StuckError
// naming the package as the budget's own error does. The call runs on in
// its goroutine, holding a core and what it allocates, until the process
// exits, which is what a caller does with a StuckError: the CLI's commands
// exit 2 with it, `live --serve` stops serving and exits 2, so that its
// supervisor starts it again.

// DefaultStuckAfter is how long an evaluation stopped by its budget (or
// by its caller) has to return before it is given up. Unwinding takes
// milliseconds; the rest is room for a machine under load.
const DefaultStuckAfter = 5 * time.Second

// stuckAfterSet is stuckAfter in nanoseconds when tests set it.
var stuckAfterSet atomic.Int64

// stuckAfter is how long an evaluation stopped has to return.
func stuckAfter() time.Duration {
	if d := stuckAfterSet.Load(); d > 0 {
		return time.Duration(d)
	}
	return DefaultStuckAfter
}

// StuckError is an evaluation that did not return once stopped: a
// built-in call it made cannot be interrupted. Err is the error the stop
// gave (a TimeoutError, a MemoryError, the caller's cancellation).
type StuckError struct {
	Err error
	// After is how long it ran on after it was stopped; 0 when it was
	// given up because its heap ran away.
	After time.Duration
}

func (e *StuckError) Error() string {
	if e.After == 0 {
		return fmt.Sprintf("%v; it went on allocating once stopped, in a built-in call that cannot be interrupted", e.Err)
	}
	return fmt.Sprintf("%v; it was still running %s later, in a built-in call that cannot be interrupted", e.Err, e.After)
}

// Unwrap makes errors.Is(err, ErrTimeout) and the like hold.
func (e *StuckError) Unwrap() error { return e.Err }

// IsStuck reports whether err says an evaluation was given up: its
// goroutine still runs, and the process should exit.
func IsStuck(err error) bool {
	var s *StuckError
	return errors.As(err, &s)
}

type stuckKey struct{}

// stuckSignal is closed when the evaluation it guards is given up; ran
// away says why.
type stuckSignal struct {
	c       chan struct{}
	after   time.Duration
	ranAway bool
}

// guard watches the evaluation under ctx: once ctx is done, it has
// stuckAfter to call the returned end, or less when its memory budget
// reports the heap ran away; past that the signal evaluations read from
// ctx (bounded) is closed. end stops the watch.
func guard(ctx context.Context) (context.Context, func()) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	var runaway <-chan struct{}
	if b, ok := ctx.Value(heapKey{}).(*heapBudget); ok {
		runaway = b.runaway
	}
	sig := &stuckSignal{c: make(chan struct{}), after: stuckAfter()}
	ended := make(chan struct{})
	go func() {
		select {
		case <-ended:
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(sig.after)
		defer t.Stop()
		select {
		case <-ended:
			return
		case <-t.C:
		case <-runaway:
			sig.ranAway = true
		}
		close(sig.c)
	}()
	return context.WithValue(ctx, stuckKey{}, sig), func() { close(ended) }
}

// bounded runs eval, on a goroutine of its own when ctx is guarded, and
// returns what it returns, or a StuckError made of explain's error once
// the guard gives the evaluation up.
func bounded[T any](ctx context.Context, eval func() (T, error), explain func(error) error) (T, error) {
	sig, ok := ctx.Value(stuckKey{}).(*stuckSignal)
	if !ok {
		return eval()
	}
	type out struct {
		v   T
		err error
	}
	ch := make(chan out, 1)
	go func() {
		v, err := eval()
		ch <- out{v, err}
	}()
	select {
	case o := <-ch:
		return o.v, o.err
	case <-sig.c:
	}
	select {
	case o := <-ch: // it returned as it was given up
		return o.v, o.err
	default:
	}
	var zero T
	return zero, sig.give(explain(ctx.Err()))
}

// give is the StuckError of an evaluation the signal gave up, err the
// error its stop gave.
func (sig *stuckSignal) give(err error) *StuckError {
	if sig.ranAway {
		return &StuckError{Err: err}
	}
	return &StuckError{Err: err, After: sig.after}
}
