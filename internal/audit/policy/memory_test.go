package policy

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// doubling holds a string doubled 25 times: 512 MiB, and 1 GiB in all
// with the strings before it, each step one concat.
func doubling() string { return doublingTo(25) }

// doublingTo holds a string of 16 bytes doubled n times, and the
// strings before it, in the body of its findings rule.
func doublingTo(n int) string {
	return "package amilint.rules.hog\n\nfindings contains f if {\n" + doublings(n) +
		fmt.Sprintf("\tf := {\"rule_id\": \"hog\", \"severity\": \"high\", \"message\": sprintf(\"%%d\", [count(s%d)])}\n}\n", n)
}

// doublings are the body lines binding s0, a string of 16 bytes, and s1
// to sn, each the one before doubled by one concat.
func doublings(n int) string {
	var b strings.Builder
	b.WriteString("\ts0 := \"0123456789abcdef\"\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "\ts%d := concat(\"\", [s%d, s%d])\n", i, i-1, i-1)
	}
	return b.String()
}

// stopsWithin evaluates e, which must run out of its budget: the error is
// a MemoryError naming pkg, returned, and the heap stayed under four
// budgets over its start (a doubling step is not interrupted: about twice
// is measured).
func stopsWithin(t *testing.T, ctx context.Context, e *Engine, budget uint64, pkg string) error {
	t.Helper()
	base := heapNow()
	stop := peakHeap()
	_, err := e.Evaluate(ctx, map[string]any{})
	peak := stop()
	t.Logf("peak %d MiB over a start of %d MiB", (peak-base)>>20, base>>20)
	var me *MemoryError
	require.ErrorAs(t, err, &me)
	assert.Equal(t, pkg, me.Package)
	assert.False(t, IsStuck(err), "stopped, not given up: %v", err)
	assert.Less(t, peak, base+4*budget, "peak heap %d MiB over a start of %d MiB", (peak-base)>>20, base>>20)
	return err
}

// peakHeap samples the heap's objects every half millisecond until stop
// is called, and returns the most it saw.
func peakHeap() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		s := []metrics.Sample{{Name: heapObjects}}
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-time.After(500 * time.Microsecond):
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

// heapNow collects, then reads the heap's objects.
func heapNow() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: heapObjects}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestMemoryStopsAPolicyAndNamesIt evaluates a policy that would hold
// 1 GiB under a budget of 32 MiB: it stops with a MemoryError naming the
// package and its file, the heap never came near the gigabyte, and the
// engine evaluates again afterwards.
func TestMemoryStopsAPolicyAndNamesIt(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "p/hog.rego", doubling())
	const budget = 32 << 20
	e, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "p")}, Memory: budget})
	require.NoError(t, err)
	guard, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for range 2 {
		// Far from the policy's 1 GiB.
		err := stopsWithin(t, guard, e, budget, "package amilint.rules.hog")
		require.NoError(t, guard.Err())
		assert.ErrorIs(t, err, ErrMemory)
		assert.NotErrorIs(t, err, ErrTimeout)
		var me *MemoryError
		require.ErrorAs(t, err, &me)
		assert.Equal(t, []string{file}, me.Files)
		assert.Equal(t, "evaluate policies: package amilint.rules.hog ("+file+") ran out of memory: held more than 32MiB of heap (--policy-memory)", err.Error())
	}
}

// TestMemoryStopsAGeneratingBuiltin: numbers.range over twenty million
// numbers (about a gigabyte of terms) is stopped from inside the built-in.
func TestMemoryStopsAGeneratingBuiltin(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "p/range.rego", `package amilint.rules.ranges

findings contains f if {
	n := count(numbers.range(1000, 20000000))
	f := {"rule_id": "ranges", "severity": "high", "message": sprintf("%d", [n])}
}
`)
	const budget = 32 << 20
	e, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "p")}, Memory: budget})
	require.NoError(t, err)
	stopsWithin(t, context.Background(), e, budget, "package amilint.rules.ranges")
}

// TestMemoryBudgetCountsWhatIsHeld: the catalog over the DLAMI fixture,
// with a policy that makes garbage many times the budget in all (a list
// of 100,000 strings built and dropped 10 times), is not stopped by a
// budget of 32 MiB although the test turned collection off: the budget
// makes the runtime collect, and only what the heap still holds counts.
func TestMemoryBudgetCountsWhatIsHeld(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "p/garbage.rego", `package amilint.rules.garbage

findings contains f if {
	some i in numbers.range(1, 10)
	n := count(concat(",", [sprintf("%d-%d", [i, j]) | some j in numbers.range(1, 100000)]))
	n < 0
	f := {"rule_id": "garbage", "severity": "high", "message": "never"}
}
`)
	rs, cfg := catalog(t)
	doc := dlamiFacts(t, rs)
	plain, err := New(context.Background(), cfg)
	require.NoError(t, err)
	want, err := plain.Evaluate(context.Background(), doc)
	require.NoError(t, err)
	require.NotEmpty(t, want)

	cfg.PolicyDirs, cfg.Memory = []string{filepath.Join(dir, "p")}, 32<<20
	e, err := New(context.Background(), cfg)
	require.NoError(t, err)
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	before := gcStats()
	got, err := e.Evaluate(context.Background(), doc)
	require.NoError(t, err)
	assert.Equal(t, want, got)
	after := gcStats()
	t.Logf("allocated %d MiB, %d collections", (after[0]-before[0])>>20, after[1]-before[1])
	assert.Greater(t, after[0]-before[0], uint64(4*32<<20), "the policy made less garbage than the test needs")
	assert.Positive(t, after[1]-before[1], "the budget was never reached: nothing was collected")
}

// gcStats are the bytes allocated so far and the collections run.
func gcStats() [2]uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(s)
	return [2]uint64{s[0].Value.Uint64(), s[1].Value.Uint64()}
}

// TestCancelIsNotMemory: a caller's cancellation is reported as such.
func TestCancelIsNotMemory(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "p/forever.rego", forever)
	e, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "p")}, Memory: 1 << 30})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = e.Evaluate(ctx, map[string]any{})
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrMemory)
}

// TestMemoryGarbageIsNoHeadroom: 600 MiB of garbage not yet collected when
// an evaluation starts does not widen its budget: a policy holding
// 300 MiB in strings of 1 MiB (each small enough to be the watchdog's to
// judge, not the sized built-ins') is stopped at 32 MiB.
func TestMemoryGarbageIsNoHeadroom(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "p/hog.rego", "package amilint.rules.hog\n\nfindings contains f if {\n"+doublings(16)+`	xs := [concat("", [s16, format_int(i, 10)]) | some i in numbers.range(1, 300)]
	f := {"rule_id": "hog", "severity": "high", "message": sprintf("%d", [count(xs)])}
}
`)
	e, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "p")}, Memory: 32 << 20})
	require.NoError(t, err)
	heapNow()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	for range 600 {
		garbage = make([]byte, 1<<20)
	}
	garbage = nil
	_, err = e.Evaluate(context.Background(), map[string]any{})
	assert.ErrorIs(t, err, ErrMemory)
}

// garbage keeps the compiler from dropping the test's allocations.
var garbage []byte

// TestMemoryAmplifiersAreSizedFirst: built-ins that build in one call a
// result far larger than what the policy holds (an array holding one
// 4 MiB string 64 times) are refused under a 16 MiB budget before they
// build their 256 MiB, and a sprintf width of 200 million too, and a
// shift left by two billion bits (a number of 250 MB, then its 600
// million digits).
func TestMemoryAmplifiersAreSizedFirst(t *testing.T) {
	const budget = 16 << 20
	for name, expr := range map[string]string{
		"concat":                    `concat("", [s | some _ in numbers.range(1, 64); s := big])`,
		"json.marshal":              `json.marshal([s | some _ in numbers.range(1, 64); s := big])`,
		"json.marshal_with_options": `json.marshal_with_options([s | some _ in numbers.range(1, 64); s := big], {"pretty": true})`,
		"yaml.marshal":              `yaml.marshal([s | some _ in numbers.range(1, 64); s := big])`,
		"sprintf":                   `sprintf("%0200000000d", [1])`,
		"sprintf *":                 `sprintf("%0*d", [200000000, 1])`,
		"bits.lsh":                  `sprintf("%d", [bits.lsh(1, 2000000000)])`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, "p/amp.rego", "package amilint.rules.amp\n\nbig := s18 if {\n"+doublings(18)+"}\n"+fmt.Sprintf(`
findings contains f if {
	x := %s
	f := {"rule_id": "amp", "severity": "high", "message": sprintf("%%d", [count(x)])}
}
`, expr))
			e, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "p")}, Memory: budget})
			require.NoError(t, err)
			stopsWithin(t, context.Background(), e, budget, "package amilint.rules.amp")
		})
	}
}

// TestMemoryLimitIsRestored: the runtime's soft memory limit is the
// process's own again after an evaluation that ends, one the budget
// stops, and several side by side.
func TestMemoryLimitIsRestored(t *testing.T) {
	const own = 1 << 40
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(own))
	dir := t.TempDir()
	write(t, dir, "hog/hog.rego", doublingTo(22))
	write(t, dir, "ok/ok.rego", "package amilint.rules.ok\n\nfindings contains f if {\n\tf := {\"rule_id\": \"ok\", \"severity\": \"low\", \"message\": \"m\"}\n}\n")
	hog, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "hog")}, Memory: 8 << 20})
	require.NoError(t, err)
	ok, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "ok")}, Memory: 8 << 20})
	require.NoError(t, err)

	_, err = ok.Evaluate(context.Background(), map[string]any{})
	require.NoError(t, err)
	assert.Equal(t, int64(own), debug.SetMemoryLimit(-1), "after an evaluation that ends")
	_, err = hog.Evaluate(context.Background(), map[string]any{})
	require.ErrorIs(t, err, ErrMemory)
	assert.Equal(t, int64(own), debug.SetMemoryLimit(-1), "after one the budget stops")
	var wg sync.WaitGroup
	for i := range 4 {
		e := []*Engine{ok, hog}[i%2]
		wg.Go(func() { _, _ = e.Evaluate(context.Background(), map[string]any{}) })
	}
	wg.Wait()
	assert.Equal(t, int64(own), debug.SetMemoryLimit(-1), "after four side by side")
}

// TestHaltAfterTheWatchLeavesTheLimit: a call given up that halts its
// budget after the watch ended (the evaluation returned without it)
// lowers the runtime's memory limit no more.
func TestHaltAfterTheWatchLeavesTheLimit(t *testing.T) {
	const own = 1 << 40
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(own))
	_, halt, stop := watchHeap(8<<20, func() {}, func() {})
	stop()
	halt()
	assert.Equal(t, int64(own), debug.SetMemoryLimit(-1))
}
