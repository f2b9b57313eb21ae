package policy

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const stuckPolicy = `package amilint.rules.stuck

findings contains f if {
	f := {"rule_id": "stuck", "severity": "high", "message": "evaluated"}
}
`

// holdFamily makes the first mark before family a built-in call that
// cannot be interrupted: it runs work until release is called (at the
// test's end at the latest), and stuckAfter is d meanwhile. The cleanup
// waits for the call to return, so that nothing runs on into other tests.
func holdFamily(t *testing.T, family string, d time.Duration, work func(released <-chan struct{})) (release func()) {
	t.Helper()
	released := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	var held atomic.Bool
	returned := make(chan struct{})
	hook := func(_ context.Context, fam *ast.Term) {
		if s, ok := fam.Value.(ast.String); ok && string(s) == family && held.CompareAndSwap(false, true) {
			defer close(returned)
			work(released)
		}
	}
	markHook.Store(&hook)
	stuckAfterSet.Store(int64(d))
	t.Cleanup(func() {
		release()
		if held.Load() {
			<-returned
		}
		markHook.Store(nil)
		stuckAfterSet.Store(0)
	})
	return release
}

// evaluateWithin is e.Evaluate of an empty input, failing the test when
// it has not returned within a minute (the bug these tests are for is an
// evaluation that never returns).
func evaluateWithin(t *testing.T, ctx context.Context, e *Engine) (n int, took time.Duration, err error) {
	t.Helper()
	type out struct {
		n   int
		err error
	}
	ch := make(chan out, 1)
	start := time.Now()
	go func() {
		fs, err := e.Evaluate(ctx, map[string]any{})
		ch <- out{len(fs), err}
	}()
	select {
	case o := <-ch:
		return o.n, time.Since(start), o.err
	case <-time.After(time.Minute):
		t.Fatal("the evaluation did not return within a minute")
		return 0, 0, nil
	}
}

// TestStuckEvaluationIsGivenUp: a policy in a built-in call that ignores
// its time budget is given up stuckAfter after the budget stopped it,
// with the budget's error, and the engine evaluates again once the call
// has ended.
func TestStuckEvaluationIsGivenUp(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "p/stuck.rego", stuckPolicy)
	release := holdFamily(t, "package amilint.rules.stuck", 200*time.Millisecond, func(released <-chan struct{}) { <-released })
	e, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "p")}, Timeout: 100 * time.Millisecond})
	require.NoError(t, err)

	_, took, err := evaluateWithin(t, context.Background(), e)
	require.True(t, IsStuck(err), "%v", err)
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	assert.ErrorIs(t, err, ErrTimeout)
	assert.Equal(t, "package amilint.rules.stuck", te.Package)
	assert.Equal(t, "evaluate policies: package amilint.rules.stuck ("+file+") ran out of time: stopped after 100ms (--policy-timeout); it was still running 200ms later, in a built-in call that cannot be interrupted", err.Error())
	assert.GreaterOrEqual(t, took, 300*time.Millisecond, "given up only after the budget and stuckAfter")

	release()
	n, _, err := evaluateWithin(t, context.Background(), e)
	require.NoError(t, err)
	assert.Positive(t, n)
}

// TestStuckCallerCancelIsGivenUp: with no budget, a caller's cancellation
// (SIGINT in the CLI) gives a stuck evaluation up the same way.
func TestStuckCallerCancelIsGivenUp(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "p/stuck.rego", stuckPolicy)
	holdFamily(t, "package amilint.rules.stuck", 100*time.Millisecond, func(released <-chan struct{}) { <-released })
	e, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "p")}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	_, _, err = evaluateWithin(t, ctx, e)
	require.True(t, IsStuck(err), "%v", err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, ErrTimeout)
	assert.NotErrorIs(t, err, ErrMemory)
	assert.Contains(t, err.Error(), "evaluate policies: package amilint.rules.stuck ("+file+") stopped: context canceled; it was still running 100ms later")
}

// TestRunawayIsGivenUpAtOnce: a built-in call that goes on allocating
// once the memory budget stopped it is given up when it holds two
// budgets more than then, without waiting for stuckAfter (a minute here),
// and well before it would have held the gigabyte it was heading for.
func TestRunawayIsGivenUpAtOnce(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "p/stuck.rego", stuckPolicy)
	const budget = 16 << 20
	var mu sync.Mutex
	var held [][]byte
	holdFamily(t, "package amilint.rules.stuck", time.Minute, func(released <-chan struct{}) {
		for len(held) < 1024 {
			select {
			case <-released:
				return
			default:
			}
			mu.Lock()
			held = append(held, make([]byte, 1<<20))
			mu.Unlock()
			time.Sleep(200 * time.Microsecond)
		}
		<-released
	})
	e, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "p")}, Memory: budget})
	require.NoError(t, err)

	_, took, err := evaluateWithin(t, context.Background(), e)
	require.True(t, IsStuck(err), "%v", err)
	var se *StuckError
	require.ErrorAs(t, err, &se)
	assert.Zero(t, se.After)
	var me *MemoryError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, "package amilint.rules.stuck", me.Package)
	assert.Equal(t, "evaluate policies: package amilint.rules.stuck ("+file+") ran out of memory: held more than 16MiB of heap (--policy-memory); it went on allocating once stopped, in a built-in call that cannot be interrupted", err.Error())
	assert.Less(t, took, time.Minute)
	mu.Lock()
	n := len(held)
	mu.Unlock()
	assert.Less(t, n, 1024, "given up before the call held all it was heading for")
}

// TestStuckPartIsGivenUp: the built-in catalog evaluates in parts side
// by side; a part stuck in a call gives the whole evaluation up, naming
// its package.
func TestStuckPartIsGivenUp(t *testing.T) {
	holdFamily(t, "package amilint.rules.exposure", 200*time.Millisecond, func(released <-chan struct{}) { <-released })
	e, err := New(context.Background(), Config{Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	require.Greater(t, len(e.parts), 1, "the catalog alone is evaluated in parts")
	_, _, err = evaluateWithin(t, context.Background(), e)
	require.True(t, IsStuck(err), "%v", err)
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	assert.Contains(t, te.Package, "package amilint.rules.exposure")
}

// TestPartsFailedKeepsStuck: joining the parts' errors keeps an
// evaluation given up as given up, whichever part it was.
func TestPartsFailedKeepsStuck(t *testing.T) {
	a := &TimeoutError{Package: "package amilint.rules.a", Limit: time.Second}
	b := &TimeoutError{Package: "package amilint.rules.b", Limit: time.Second}
	for _, errs := range [][]error{
		{&StuckError{Err: a, After: time.Second}, b},
		{a, &StuckError{Err: b, After: time.Second}},
		{nil, &StuckError{Err: b, After: time.Second}},
	} {
		err := partsFailed(errs)
		assert.True(t, IsStuck(err), "%v", err)
		assert.ErrorIs(t, err, ErrTimeout)
	}
	// A part that failed on its own is not what the stuck part is named by.
	other := errors.New("evaluate policies: a part of the catalog gave no set of findings")
	err := partsFailed([]error{other, &StuckError{Err: b, After: time.Second}})
	assert.True(t, IsStuck(err))
	assert.ErrorIs(t, err, ErrTimeout)
	assert.NotErrorIs(t, err, other)
	assert.False(t, IsStuck(partsFailed([]error{a, b})))
	assert.False(t, IsStuck(partsFailed([]error{errors.New("x"), nil})))
	assert.NoError(t, partsFailed([]error{nil, nil}))
}

// TestWithoutNamesThePackage: an engine of every family but one is
// evaluated family by family, so a budget that stops it names the
// family's package, as the entry point's does (a comprehension over the
// families named only "query …"); and it leaves the family out.
func TestWithoutNamesThePackage(t *testing.T) {
	holdFamily(t, "package amilint.rules.exposure", time.Minute, func(released <-chan struct{}) {
		select {
		case <-released:
		case <-time.After(300 * time.Millisecond):
		}
	})
	e, err := New(context.Background(), Config{Without: []string{"live"}, Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	_, _, err = evaluateWithin(t, context.Background(), e)
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	assert.False(t, IsStuck(err))
	assert.Equal(t, "package amilint.rules.exposure", te.Package)

	var mu sync.Mutex
	var marked []string
	record := func(_ context.Context, fam *ast.Term) {
		mu.Lock()
		defer mu.Unlock()
		marked = append(marked, string(fam.Value.(ast.String)))
	}
	markHook.Store(&record)
	all, err := New(context.Background(), Config{Without: []string{"live"}})
	require.NoError(t, err)
	_, err = all.Evaluate(context.Background(), map[string]any{})
	require.NoError(t, err)
	mu.Lock()
	assert.Contains(t, marked, "package amilint.rules.boot")
	assert.Contains(t, marked, "package amilint.rules.exposure")
	assert.NotContains(t, marked, "package amilint.rules.live")
	mu.Unlock()

	none, err := New(context.Background(), Config{Without: []string{"boot", "container_restart", "crash_loop", "exposure", "first_boot", "image", "image_corrupt", "live", "missing_exec", "profile_allowlist", "unneeded"}})
	require.NoError(t, err)
	fs, err := none.Evaluate(context.Background(), map[string]any{})
	require.NoError(t, err)
	assert.Empty(t, fs)
}
