package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/amilint/amilint/internal/finding"
	"github.com/amilint/amilint/internal/live"
	"github.com/amilint/amilint/internal/metrics"
	"github.com/amilint/amilint/internal/npd"
)

// liveReport is the amilint/v1 report of a live audit, with the live facts.
type liveReport struct {
	*finding.Report
	Live *live.Facts `json:"live"`
}

// runLive audits the running host: `amilint live [-o text|json]
// [--serve ADDR] [--npd] [--sample DURATION] …`.
func runLive(e *env, args []string) int {
	fs := newFlags(e, "live")
	out := fs.String("o", "text", "output format: text or json")
	serve := fs.String("serve", "", "serve Prometheus metrics and /healthz on `ADDR` (e.g. :9847) until stopped")
	npdMode := fs.Bool("npd", false, "node-problem-detector custom plugin mode: one line, exit 0 OK, 1 problem, 2 unknown")
	sample := fs.Duration("sample", time.Second, "length of the CPU sample and of the growth checks")
	root := fs.String("root", "/", "the host's root as this process sees it (/proc and /sys are read under it)")
	mountinfo := fs.String("mountinfo", "", "mountinfo file under --root (default proc/self/mountinfo; proc/1/mountinfo in a hostPID pod)")
	bus := fs.String("bus", "", "systemd's bus: a socket path or a D-Bus address (default: the system bus)")
	collect := fs.String("collect", strings.Join(live.AllCollectors, ","), "collectors to run, comma-separated")
	zombies := fs.Int("zombie-threshold", live.DefaultZombieThreshold, "zombie memory cgroups at or above which the host is reported")
	restarts := fs.Uint("restart-threshold", 3, "service restarts at or above which a unit is crash-looping")
	saturation := fs.Float64("saturation", 0.95, "share of system time at or above which a core is saturated")
	interval := fs.Duration("interval", metrics.DefaultInterval, "with --serve, time between two audits")
	failOn := fs.String("fail-on", "high", "exit 1 when a finding is at or above this severity")
	if _, err := parse(fs, args); err != nil {
		return fail(e, "live", err)
	}
	sev, err := finding.ParseSeverity(*failOn)
	if err != nil {
		return fail(e, "live", err)
	}
	if *out != "text" && *out != "json" {
		return fail(e, "live", fmt.Errorf("output %q: want text or json", *out))
	}
	opts := live.Options{Root: *root, MountInfo: *mountinfo, Bus: *bus, Sample: *sample,
		ZombieThreshold: *zombies, RestartThreshold: uint32(*restarts), Saturation: *saturation}
	for _, c := range strings.Split(*collect, ",") {
		if c = strings.TrimSpace(c); c != "" {
			opts.Collect = append(opts.Collect, c)
		}
	}
	if err := errors.Join(opts.Validate(), checkRoot(opts.Root)); err != nil {
		return fail(e, "live", err)
	}
	auditor, err := live.NewAuditor(opts)
	if err != nil {
		return fail(e, "live", err)
	}
	defer auditor.Close()
	audit := func(ctx context.Context) (*live.Facts, []finding.Finding, error) {
		f, err := auditor.Audit(ctx)
		if f == nil {
			return nil, nil, err
		}
		return f, live.Findings(f), err
	}

	if *serve != "" {
		ln, err := net.Listen("tcp", *serve)
		if err != nil {
			return fail(e, "live", fmt.Errorf("listen %s: %w", *serve, err))
		}
		fmt.Fprintf(e.stderr, "amilint live: serving /metrics and /healthz on %s\n", ln.Addr())
		if err := metrics.New(audit, *interval, e.log).Serve(e.ctx, ln); err != nil {
			return fail(e, "live", err)
		}
		return ExitOK
	}

	facts, fs2, err := audit(e.ctx)
	if *npdMode {
		code, msg := npd.Status(fs2, err, sev, npd.MaxMessage)
		fmt.Fprintln(e.stdout, msg)
		return code
	}
	if facts == nil {
		return fail(e, "live", err)
	}
	name := facts.Hostname
	if name == "" {
		name = *root
	}
	rep := finding.NewReport(finding.Target{Name: name, Kind: "live"}, fs2)
	switch *out {
	case "json":
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if werr := enc.Encode(liveReport{Report: rep, Live: facts}); werr != nil {
			return fail(e, "live", werr)
		}
	default:
		writeLiveText(e.stdout, rep, facts)
	}
	if err != nil {
		for _, c := range live.AllCollectors {
			if msg, ok := facts.Errors[c]; ok {
				fmt.Fprintf(e.stderr, "amilint live: %s: %s\n", c, msg)
			}
		}
		return ExitError
	}
	return finding.ExitCode(rep.Findings, sev)
}

func pct(r float64) string { return fmt.Sprintf("%.0f%%", 100*r) }

// writeLiveText prints the live facts and findings for a person.
func writeLiveText(w io.Writer, rep *finding.Report, f *live.Facts) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "host\t%s\tsample %s\n", rep.Target.Name, f.Sample)
	if c := f.Cgroups; c != nil {
		if m := c.Memory; m != nil {
			growth := ""
			if c.Growth != nil {
				growth = fmt.Sprintf(" (%+d in %s)", c.Growth.Zombies, c.Growth.Interval)
			}
			fmt.Fprintf(tw, "memcg\tv%d %s\ttracked %d, present %d, zombies %d%s\n", m.Version, m.Hierarchy, m.Tracked, m.Present, m.Zombies, growth)
		}
		if u := c.Unified; u != nil && u.Dying > 0 {
			fmt.Fprintf(tw, "cgroup2\t%s\tdying %d, leaking %s\n", u.Mount, u.Dying, orNone(u.Leaking))
		}
		if c.Suspect != "" {
			fmt.Fprintf(tw, "suspect\t%s\t%s\n", c.Suspect, c.Why)
		}
	}
	if r := f.CPU; r != nil {
		fmt.Fprintf(tw, "cpu\t%d cores\tmachine %s busy\n", len(r.Cores), pct(r.Busy))
		for _, n := range r.NICs {
			fmt.Fprintf(tw, "nic\t%s\tIRQs %v on cores %v\n", n.Name, n.IRQs, n.Cores)
		}
		for _, c := range r.Cores {
			if c.Busy >= 0.5 || c.NICIRQs > 0 || len(c.NICs) > 0 {
				fmt.Fprintf(tw, "core %d\tbusy %s\tuser %s system %s softirq %s net_rx %d\n", c.CPU, pct(c.Busy), pct(c.User), pct(c.System), pct(c.SoftIRQ), c.NetRX)
			}
		}
	}
	if s := f.Systemd; s != nil {
		fmt.Fprintf(tw, "systemd\t%d units\tcrash-looping: %s; container per restart: %s\n", len(s.Units),
			orNone(strings.Join(s.CrashLooping, ", ")), orNone(strings.Join(s.ContainerPerRestart, ", ")))
	}
	for _, c := range live.AllCollectors {
		if msg, ok := f.Errors[c]; ok {
			fmt.Fprintf(tw, "error\t%s\t%s\n", c, msg)
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\n%d findings", rep.Summary.Total)
	if rep.Summary.Highest != "" {
		fmt.Fprintf(w, ", highest %s", rep.Summary.Highest)
	}
	fmt.Fprintln(w)
	for _, fd := range rep.Findings {
		unit := ""
		if fd.Unit != "" {
			unit = " " + fd.Unit
		}
		fmt.Fprintf(w, "  %-8s %s%s: %s\n", strings.ToUpper(fd.Severity.String()), fd.RuleID, unit, fd.Message)
		for _, c := range fd.Remediation.Commands {
			fmt.Fprintf(w, "           fix: %s\n", c)
		}
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// errNoHost marks a --root that does not exist.
var errNoHost = errors.New("no such host root")

// checkRoot reports a --root that does not exist as a clear error.
func checkRoot(root string) error {
	if _, err := os.Stat(root); err != nil {
		return fmt.Errorf("root %s: %w: %w", root, errNoHost, err)
	}
	return nil
}
