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

	"github.com/amilint/amilint/fixtures"
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
	var stderr strings.Builder
	cmd.Stderr = &stderr
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
		tb.Fatalf("%s: exit code %d: %s", p.name, code, strings.TrimSpace(stderr.String()))
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

// scaleRoot makes the dlami fixture with n generated services added: every
// other one enabled through multi-user.target.wants, every tenth with a
// drop-in.
func scaleRoot(tb testing.TB, n int) string {
	tb.Helper()
	dir := filepath.Join(tb.TempDir(), fmt.Sprintf("root-%d", n))
	require.NoError(tb, fixtures.Materialize("dlami", dir))
	sys := filepath.Join(dir, "lib/systemd/system")
	wants := filepath.Join(dir, "etc/systemd/system/multi-user.target.wants")
	require.NoError(tb, os.MkdirAll(wants, 0o755))
	for i := range n {
		name := fmt.Sprintf("bench-%05d.service", i)
		unit := fmt.Sprintf("[Unit]\nDescription=bench unit %d\nAfter=network.target\n\n[Service]\nExecStart=/usr/bin/true %d\nRestart=on-failure\n\n[Install]\nWantedBy=multi-user.target\n", i, i)
		require.NoError(tb, os.WriteFile(filepath.Join(sys, name), []byte(unit), 0o644))
		if i%2 == 0 {
			require.NoError(tb, os.Symlink("/lib/systemd/system/"+name, filepath.Join(wants, name)))
		}
		if i%10 == 0 {
			d := filepath.Join(sys, name+".d")
			require.NoError(tb, os.MkdirAll(d, 0o755))
			require.NoError(tb, os.WriteFile(filepath.Join(d, "override.conf"), []byte("[Service]\nRestartSec=5\n"), 0o644))
		}
	}
	return dir
}

// BenchmarkScale prints how units and scan grow with the number of unit
// files (250, 2,500 and 25,000 generated services over the dlami fixture;
// AMILINT_BENCH_SCALE lists other sizes), against systemctl --root
// list-unit-files on the same roots. Time per unit is net of start-up
// (amilint version). systemctl is not run on a size where its growth from
// the size before predicts more than AMILINT_BENCH_SYSTEMCTL_MAX seconds
// (default 120); the table says so.
func BenchmarkScale(b *testing.B) {
	systemctl := testenv.Tool(b, "systemctl", "systemd")
	sizes := []int{250, 2500, 25000}
	if s := os.Getenv("AMILINT_BENCH_SCALE"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			require.NoError(b, err, "AMILINT_BENCH_SCALE")
			sizes = append(sizes, n)
		}
	}
	maxSys := 120.0
	if v, err := strconv.ParseFloat(os.Getenv("AMILINT_BENCH_SYSTEMCTL_MAX"), 64); err == nil {
		maxSys = v
	}
	dir := b.TempDir()
	bin := buildBin(b, dir, "amilint", "./cmd/amilint")
	runs := max(benchRuns(20)/4, 3)
	// A root of up to smallRoot unit files is a few milliseconds of work
	// over start-up, and a median of a few rounds still moved by a fifth
	// from run to run: those rounds are cheap, so they get more.
	const smallRoot = 2500
	smallRuns := max(benchRuns(20), runs)
	type point struct {
		n                    int
		startup, units, scan *proc
		sys                  *proc // nil: not run
		why                  string
	}
	var pts []point
	for b.Loop() {
		pts = pts[:0]
		var lastSys time.Duration
		lastN := 0
		for _, n := range sizes {
			root := scaleRoot(b, n)
			p := point{n: n,
				startup: &proc{name: "version", argv: []string{bin, "version"}},
				units:   &proc{name: "units", argv: []string{bin, "units", root, "-o", "tsv"}},
				// No --policy-timeout: its default (30 s of wall time) is
				// a bound for untrusted policies, and on a loaded machine
				// the catalog over 25,000 services waits longer than that
				// for a CPU.
				scan: &proc{name: "scan", argv: []string{bin, "scan", root, "-o", "json", "--policy-timeout", "0"}, ok: []int{1}},
			}
			ps := []*proc{p.startup, p.units, p.scan}
			rounds := runs
			if n <= smallRoot {
				rounds = smallRuns
			}
			// systemctl's time grows with the square of the units: skip it
			// where the last size predicts more than maxSys seconds.
			predict := time.Duration(0)
			if lastN > 0 {
				predict = time.Duration(float64(lastSys) * float64(n*n) / float64(lastN*lastN))
			}
			if predict.Seconds() <= maxSys {
				p.sys = &proc{name: "systemctl", argv: []string{systemctl, "--root=" + root, "list-unit-files", "--no-legend", "--no-pager"},
					every: rounds, timeout: time.Duration(4*maxSys) * time.Second}
				ps = append(ps, p.sys)
			} else {
				p.why = fmt.Sprintf("not run: %s at %d units predicts %.0f s", ms(lastSys), lastN, predict.Seconds())
			}
			interleave(b, rounds, ps)
			if p.sys != nil {
				lastSys, lastN = median(p.sys.wall), n
			}
			pts = append(pts, p)
			require.NoError(b, os.RemoveAll(root))
		}
	}
	var w strings.Builder
	fmt.Fprintf(&w, "\nscale: generated services over the dlami fixture, median of %d interleaved rounds (%d up to %d unit files, systemctl once); per unit = (command − start-up) / unit files, wall and CPU (the children's rusage: on a shared machine wall time carries waits for the CPU)\n\n", runs, smallRuns, smallRoot)
	fmt.Fprintln(&w, "| unit files | amilint units | per unit | amilint scan | per unit | systemctl list-unit-files | per unit |")
	fmt.Fprintln(&w, "|---|---|---|---|---|---|---|")
	per := func(xs, startup []time.Duration, n int) float64 {
		return float64((median(xs) - median(startup)).Nanoseconds()) / 1000 / float64(n)
	}
	type spread struct{ lo, hi float64 }
	widen := func(s *spread, i int, x float64) {
		if i == 0 {
			*s = spread{x, x}
		}
		s.lo, s.hi = min(s.lo, x), max(s.hi, x)
	}
	var uWall, sWall, uCPU, sCPU spread
	for i, p := range pts {
		n := p.n + 21 // the fixture's own unit files
		u, s := per(p.units.wall, p.startup.wall, n), per(p.scan.wall, p.startup.wall, n)
		uc, sc := per(p.units.cpu, p.startup.cpu, n), per(p.scan.cpu, p.startup.cpu, n)
		widen(&uWall, i, u)
		widen(&sWall, i, s)
		widen(&uCPU, i, uc)
		widen(&sCPU, i, sc)
		sys := p.why
		sysPer := "-"
		if p.sys != nil {
			sys = fmt.Sprintf("%s (cpu %s)", ms(median(p.sys.wall)), ms(median(p.sys.cpu)))
			sysPer = fmt.Sprintf("%.0f µs (cpu %.0f µs)", float64(median(p.sys.wall).Nanoseconds())/1000/float64(n), float64(median(p.sys.cpu).Nanoseconds())/1000/float64(n))
		}
		fmt.Fprintf(&w, "| %d | %s (cpu %s) | %.1f µs (cpu %.1f µs) | %s (cpu %s) | %.1f µs (cpu %.1f µs) | %s | %s |\n", p.n,
			ms(median(p.units.wall)), ms(median(p.units.cpu)), u, uc, ms(median(p.scan.wall)), ms(median(p.scan.cpu)), s, sc, sys, sysPer)
	}
	fmt.Fprintf(&w, "\ntime per unit, largest over smallest: units %.2f× (cpu %.2f×), scan %.2f× (cpu %.2f×) (goal ≤ 2×)\n",
		uWall.hi/uWall.lo, uCPU.hi/uCPU.lo, sWall.hi/sWall.lo, sCPU.hi/sCPU.lo)
	fmt.Print(w.String())
	uMax, uMin, sMax, sMin := uWall.hi, uWall.lo, sWall.hi, sWall.lo
	b.ReportMetric(uCPU.hi/uCPU.lo, "units-cpu-per-unit-spread")
	b.ReportMetric(sCPU.hi/sCPU.lo, "scan-cpu-per-unit-spread")
	b.ReportMetric(uMax/uMin, "units-per-unit-spread")
	b.ReportMetric(sMax/sMin, "scan-per-unit-spread")
}
