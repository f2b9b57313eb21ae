package cgroup_test

import (
	"context"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/amilint/amilint/internal/host/cgroup"
	"github.com/amilint/amilint/internal/host/cgroup/cgrouptest"
	"github.com/amilint/amilint/internal/host/live"
	"github.com/stretchr/testify/require"
)

// benchZombies is the incident's scale unless AMILINT_BENCH_ZOMBIES says
// otherwise.
func benchZombies(b *testing.B) int {
	if s := os.Getenv("AMILINT_BENCH_ZOMBIES"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(b, err)
		return n
	}
	return 70000
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs f in b.Loop and reports wall and CPU time per audit, and
// the share of one core the audit would cost every 15 s.
func measure(b *testing.B, f func() error) {
	b.Helper()
	c0, w0 := cpuTime(), time.Now()
	n := 0
	for b.Loop() {
		require.NoError(b, f())
		n++
	}
	wall, cpu := time.Since(w0)/time.Duration(n), (cpuTime()-c0)/time.Duration(n)
	b.ReportMetric(float64(wall.Microseconds())/1000, "wall-ms/audit")
	b.ReportMetric(float64(cpu.Microseconds())/1000, "cpu-ms/audit")
	b.ReportMetric(100*cpu.Seconds()/15, "%core@15s")
}

// BenchmarkZombies makes the incident's ~70,000 real zombie memory cgroups
// (bounded to 5 minutes of making; fewer if that runs out, and it says
// so), then measures the cgroup reader and the live audit over them while
// recording every file the reader opens: none is a memory.stat.
func BenchmarkZombies(b *testing.B) {
	cgrouptest.Exclusive(b) // the count is the machine's
	want := benchZombies(b)
	start := time.Now()
	z := cgrouptest.MakeWithThread(b, want, 4096, start.Add(5*time.Minute))
	took := time.Since(start)
	b.Logf("made %d of %d zombie memcgs in %s (%.0f/s)", z.Made, want, took.Round(time.Millisecond), float64(z.Made)/took.Seconds())
	if z.Refused != nil {
		b.Logf("the kernel refused more: %v", z.Refused)
	}

	rec := &recordFS{FS: os.DirFS("/")}
	r := &cgroup.Reader{FS: rec}
	h, err := r.Read()
	require.NoError(b, err)
	b.Logf("memcg: tracked %d, present %d, zombies %d", h.Memory.Tracked, h.Memory.Present, h.Memory.Zombies)
	require.GreaterOrEqual(b, h.Memory.Zombies, z.Made*9/10, "the zombies are counted")

	b.Run("cgroup.Read", func(b *testing.B) {
		measure(b, func() error { _, err := r.Read(); return err })
		b.ReportMetric(float64(h.Memory.Zombies), "zombies")
	})
	b.Run("live.Collect/cgroup+cpu", func(b *testing.B) {
		// A one-shot audit; the sample is 1 ms, so this measures the work
		// (two readings of each), not the sampling wait.
		opts := live.Options{Sample: time.Millisecond, Collect: []string{live.CollectCgroup, live.CollectCPU}}
		measure(b, func() error { _, err := live.Collect(context.Background(), opts); return err })
	})
	b.Run("live.Auditor/cgroup+cpu/steady", func(b *testing.B) {
		// What the exporter pays per interval: one reading of each,
		// compared with the previous audit's.
		a, err := live.NewAuditor(live.Options{Sample: time.Millisecond, Collect: []string{live.CollectCgroup, live.CollectCPU}})
		require.NoError(b, err)
		defer a.Close()
		_, err = a.Audit(context.Background())
		require.NoError(b, err)
		measure(b, func() error { _, err := a.Audit(context.Background()); return err })
	})
	for _, n := range rec.opened() {
		require.NotContains(b, n, "memory.stat", "the reader opened %s", n)
	}
	b.Logf("the reader opened or listed %d names, no memory.stat", len(rec.opened()))
}
