package cli_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
)

// The whole-process benchmarks of make bench: each row is a command of
// the built binary and the yardstick it is measured against in the same
// run, the commands taking turns round by round (paired, interleaved), so
// a change of load on a shared machine weighs on both sides alike. Wall
// time is what users wait; CPU time (user+system, from the kernel's
// accounting of each child) is steadier when other work loads the cores,
// and both are printed. Nothing here is asserted: tests never assert on
// time.

// benchRuns is how many rounds each table takes (AMILINT_BENCH_RUNS).
func benchRuns(def int) int {
	if n, err := strconv.Atoi(os.Getenv("AMILINT_BENCH_RUNS")); err == nil && n > 0 {
		return n
	}
	return def
}

// buildBin builds a main package of this module into dir.
func buildBin(tb testing.TB, dir, name, pkg string) string {
	tb.Helper()
	out := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = testenv.RepoRoot(tb)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	b, err := cmd.CombinedOutput()
	require.NoError(tb, err, "go build %s: %s", pkg, b)
	return out
}

// proc is one command of a table.
type proc struct {
	name string
	argv []string
	// every runs it every so many rounds only (a slow yardstick).
	every int
	// ok are the exit codes that mean it did its job.
	ok []int
	// timeout bounds one run.
	timeout time.Duration

	wall, cpu []time.Duration
}

// run runs p once and records its wall and CPU time.
func (p *proc) run(tb testing.TB) {
	tb.Helper()
	timeout := p.timeout
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.argv[0], p.argv[1:]...)
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	var exit *exec.ExitError
	code := 0
	if errors.As(err, &exit) {
		code = exit.ExitCode()
	} else if err != nil {
		tb.Fatalf("%s: %v", p.name, err)
	}
	if ctx.Err() != nil {
		tb.Fatalf("%s: ran out of %s", p.name, timeout)
	}
	if !slices.Contains(append([]int{0}, p.ok...), code) {
		tb.Fatalf("%s: exit code %d", p.name, code)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	p.wall = append(p.wall, wall)
	p.cpu = append(p.cpu, time.Duration(ru.Utime.Nano()+ru.Stime.Nano()))
}

// interleave runs the procs round by round.
func interleave(tb testing.TB, rounds int, ps []*proc) {
	tb.Helper()
	for _, p := range ps { // warm the page cache and the binary
		p.run(tb)
		p.wall, p.cpu = nil, nil
	}
	for r := range rounds {
		for _, p := range ps {
			if p.every > 1 && r%p.every != 0 {
				continue
			}
			p.run(tb)
		}
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// row is one line of the table: a command, its yardstick, how they
// compare, and the goal.
type row struct {
	what, yardstick string
	ours, ref       *proc
	// diff: ours − ref against a bound; else ratio: ref / ours against a
	// floor.
	diff  bool
	bound float64 // ms for diff, times for ratio
}

func (r row) print(tb testing.TB, w *strings.Builder) (met bool) {
	ow, oc := median(r.ours.wall), median(r.ours.cpu)
	rw, rc := median(r.ref.wall), median(r.ref.cpu)
	var cmpWall, cmpCPU, goal string
	if r.diff {
		dw := float64((ow - rw).Microseconds()) / 1000
		dc := float64((oc - rc).Microseconds()) / 1000
		cmpWall, cmpCPU = fmt.Sprintf("%+.1f ms", dw), fmt.Sprintf("%+.1f ms", dc)
		goal = fmt.Sprintf("≤ +%g ms", r.bound)
		met = dw <= r.bound
	} else {
		xw, xc := float64(rw)/float64(ow), float64(rc)/float64(oc)
		cmpWall, cmpCPU = fmt.Sprintf("%.1f×", xw), fmt.Sprintf("%.1f×", xc)
		goal = fmt.Sprintf("≥ %g×", r.bound)
		met = xw >= r.bound
	}
	verdict := "met"
	if !met {
		verdict = "NOT met"
	}
	fmt.Fprintf(w, "| %s | %s (cpu %s) | %s: %s (cpu %s) | %s (cpu %s) | %s %s |\n",
		r.what, ms(ow), ms(oc), r.yardstick, ms(rw), ms(rc), cmpWall, cmpCPU, goal, verdict)
	return met
}

// BenchmarkCommands prints the table of whole-process times on the Debian
// root: amilint's start-up against an empty program that links OPA's rego,
// units, facts and scan against that start-up, and scan against
// systemctl --root list-unit-files. Run it with -benchtime 1x: it runs
// AMILINT_BENCH_RUNS rounds (default 20) whatever b.N is.
func BenchmarkCommands(b *testing.B) {
	root := testenv.Bookworm.Path(b)
	systemctl := testenv.Tool(b, "systemctl", "systemd")
	dir := b.TempDir()
	bin := buildBin(b, dir, "amilint", "./cmd/amilint")
	opa := buildBin(b, dir, "opaempty", "./internal/cli/testdata/opaempty")
	empty := &proc{name: "opaempty", argv: []string{opa}}
	version := &proc{name: "version", argv: []string{bin, "version"}}
	units := &proc{name: "units", argv: []string{bin, "units", root, "-o", "tsv"}}
	facts := &proc{name: "facts", argv: []string{bin, "facts", root}}
	scan := &proc{name: "scan", argv: []string{bin, "scan", root, "-o", "json"}, ok: []int{1}}
	sysctl := &proc{name: "systemctl", argv: []string{systemctl, "--root=" + root, "list-unit-files", "--no-legend", "--no-pager"}, every: 4}
	for b.Loop() {
		interleave(b, benchRuns(20), []*proc{empty, version, units, facts, scan, sysctl})
	}
	rows := []row{
		{what: "start-up: `amilint version`", yardstick: "empty program linking OPA's rego", ours: version, ref: empty, diff: true, bound: 5},
		{what: "`units -o tsv`", yardstick: "start-up", ours: units, ref: version, diff: true, bound: 5},
		{what: "`facts`", yardstick: "start-up", ours: facts, ref: version, diff: true, bound: 15},
		{what: "`scan -o json`", yardstick: "start-up", ours: scan, ref: version, diff: true, bound: 25},
		{what: "`scan -o json`", yardstick: "`systemctl --root list-unit-files`", ours: scan, ref: sysctl, bound: 15},
	}
	var w strings.Builder
	fmt.Fprintf(&w, "\nwhole processes on %s, median of %d interleaved rounds (systemctl every 4th)\n\n", root, len(version.wall))
	fmt.Fprintln(&w, "| row | amilint | yardstick (same run) | difference or ratio | goal |")
	fmt.Fprintln(&w, "|---|---|---|---|---|")
	for _, r := range rows {
		r.print(b, &w)
	}
	fmt.Print(w.String())
	b.ReportMetric(float64(median(version.wall)-median(empty.wall))/1e6, "startup-ms-over-opa")
	b.ReportMetric(float64(median(scan.wall)-median(version.wall))/1e6, "scan-ms-over-startup")
	b.ReportMetric(float64(median(sysctl.wall))/float64(median(scan.wall)), "x-faster-than-systemctl")
}
