package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/host/live"
	"github.com/amilint/amilint/internal/host/npd"
	"github.com/amilint/amilint/internal/report"
)

// liveReport is the amilint/v1 report of a live audit, with the live facts.
type liveReport struct {
	*finding.Report
	Live *live.Facts `json:"live"`
}

// liveFlags are the flags `amilint live` and `amilint fix --live` share:
// which host, which collectors, and the thresholds of the live rules.
type liveFlags struct {
	root, mountinfo, bus, collect string
	sample                        time.Duration
	zombies                       int
	restarts                      uint
	saturation                    float64
	policy                        policyFlags
}

// register registers every live flag; registerHost those of the host
// alone (fix --live takes the policy flags from the audit flags).
func (l *liveFlags) register(fs *flag.FlagSet) {
	l.registerHost(fs)
	l.policy.register(fs)
}

func (l *liveFlags) registerHost(fs *flag.FlagSet) {
	fs.DurationVar(&l.sample, "sample", time.Second, "length of the CPU sample and of the growth checks")
	fs.StringVar(&l.root, "root", "/", "the host's root as this process sees it: its unit files and configuration are read as a scan reads an image, /proc and /sys under it")
	fs.StringVar(&l.mountinfo, "mountinfo", "", "mountinfo file under --root (default proc/self/mountinfo; proc/1/mountinfo in a hostPID pod)")
	fs.StringVar(&l.bus, "bus", "", "systemd's bus: a socket path or a D-Bus address (default: the system bus)")
	fs.StringVar(&l.collect, "collect", strings.Join(live.AllCollectors, ","), "collectors to run, comma-separated")
	fs.IntVar(&l.zombies, "zombie-threshold", 0, "zombie memory cgroups at or above which the host is reported (0: the live-memcg-zombies rule's param, 1000)")
	fs.UintVar(&l.restarts, "restart-threshold", 0, "service restarts at or above which a unit is crash-looping (0: the live-unit-crashloop rule's param, 3)")
	fs.Float64Var(&l.saturation, "saturation", 0, "share of system time at or above which a core is saturated (0: the live-core-saturated rule's param, 0.95)")
}

// host validates the flags and prepares the live audit of the host with
// the rules and policies of cfg.
func (l *liveFlags) host(e *env, cfg audit.Config) (*live.Host, string, error) {
	opts := live.Options{Root: l.root, MountInfo: l.mountinfo, Bus: l.bus, Sample: l.sample,
		ZombieThreshold: l.zombies, RestartThreshold: uint32(l.restarts), Saturation: l.saturation}
	for _, c := range strings.Split(l.collect, ",") {
		if c = strings.TrimSpace(c); c != "" {
			opts.Collect = append(opts.Collect, c)
		}
	}
	if err := errors.Join(opts.Validate(), checkRoot(opts.Root)); err != nil {
		return nil, "", err
	}
	name := l.root
	if h, err := os.Hostname(); err == nil && l.root == "/" {
		name = h
	}
	h, err := live.NewHost(e.ctx, opts, cfg, name)
	if err != nil {
		return nil, "", err
	}
	return h, name, nil
}

// runLive audits the running host: `amilint live [-o FORMAT]
// [--serve ADDR [--web.config.file FILE]] [--npd] [--sample DURATION] …`, through the same facts,
// rules and policies as a scan, with the live rules on top.
// minServeInterval is the shortest --interval: an audit takes tens of
// milliseconds of CPU, so a shorter one is a busy loop whose results are
// always stale.
const minServeInterval = 100 * time.Millisecond

// modeFlags refuses two modes at once, and a flag that the mode live
// runs in would ignore: a flag of the exporter's without --serve (an
// --interval meant for it would go unused), and a report's flag where no
// report is written.
func modeFlags(fs *flag.FlagSet, serve, npd bool) error {
	// A node-problem-detector plugin prints one line and exits; --serve
	// never does.
	if npd && serve {
		return errors.New("--npd and --serve: choose one (a node-problem-detector plugin exits, an exporter serves until stopped)")
	}
	if !serve {
		for _, name := range []string{"interval", "web.config.file", "web.max-connections"} {
			if flagSet(fs, name) {
				return fmt.Errorf("--%s applies only with --serve", name)
			}
		}
	}
	switch {
	case serve && flagSet(fs, "o"):
		return errors.New("-o applies to a report: --serve serves metrics instead")
	case serve && flagSet(fs, "fail-on"):
		return errors.New("--fail-on applies to a report's exit code: --serve serves metrics until stopped")
	case npd && flagSet(fs, "o"):
		return errors.New("-o applies to a report: --npd prints one line for node-problem-detector")
	}
	return nil
}

func runLive(e *env, args []string) int {
	fs := newFlags(e, "live")
	var lf liveFlags
	lf.register(fs)
	out := fs.String("o", "text", "output format: "+strings.Join(report.Formats, ", "))
	serve := fs.String("serve", "", "serve Prometheus metrics and /healthz on `ADDR` (e.g. :9847) until stopped")
	npdMode := fs.Bool("npd", false, "node-problem-detector custom plugin mode: one line, exit 0 OK, 1 problem, 2 unknown")
	interval := fs.Duration("interval", defaultServeInterval, "with --serve, time between two audits")
	webConfig := fs.String("web.config.file", "", "with --serve, a Prometheus exporter-toolkit web configuration `FILE`: TLS and basic auth")
	maxConns := fs.Int("web.max-connections", defaultMaxConnections, "with --serve, connections served at once; more wait until slow or idle ones are cut")
	failOn := fs.String("fail-on", "high", "exit 1 when a finding is at or above this severity")
	if _, err := parse(fs, args); errors.Is(err, flag.ErrHelp) {
		return usageOf(e, fs, "amilint live [-o FORMAT] [--fail-on SEVERITY] [--serve ADDR] [--npd] [--sample DURATION] [--collect LIST] [--bus ADDR] [--root DIR] [--profile NAME] [--trait NAME] [--rules DIR] [--policy DIR] [--data FILE] [--waivers FILE]")
	} else if err != nil {
		return fail(e, "live", err)
	}
	sev, err := finding.ParseSeverity(*failOn)
	if err != nil {
		return fail(e, "live", err)
	}
	if !slices.Contains(report.Formats, *out) {
		return fail(e, "live", fmt.Errorf("output %q: want one of %s", *out, strings.Join(report.Formats, ", ")))
	}
	if *serve == "" && flagSet(fs, "serve") {
		return fail(e, "live", errors.New(`--serve "": want an address to listen on, such as :9847`))
	}
	if err := modeFlags(fs, *serve != "", *npdMode); err != nil {
		return fail(e, "live", err)
	}
	// The exporter reads 0 or less as its defaults: refuse them here, as
	// any other bad value.
	if *interval < minServeInterval {
		return fail(e, "live", fmt.Errorf("--interval %s: want %s or more (each audit costs tens of milliseconds of CPU)", *interval, minServeInterval))
	}
	if *maxConns < 1 {
		return fail(e, "live", fmt.Errorf("--web.max-connections %d: want 1 or more", *maxConns))
	}
	cfg, err := lf.policy.config()
	if err != nil {
		return fail(e, "live", err)
	}
	host, name, err := lf.host(e, cfg)
	if err != nil {
		return fail(e, "live", err)
	}
	defer host.Close()

	if *serve != "" {
		cfg := serveConfig{addr: *serve, interval: *interval, webConfig: *webConfig, maxConns: *maxConns}
		if err := serveMetrics(e, host, cfg); err != nil {
			return fail(e, "live", err)
		}
		return ExitOK
	}

	doc, fs2, err := host.Audit(e.ctx)
	if *npdMode {
		code, msg := npd.Status(fs2, err, sev, npd.MaxMessage)
		fmt.Fprintln(e.stdout, msg)
		return code
	}
	if doc == nil {
		return fail(e, "live", err)
	}
	facts := doc.Live
	if facts.Hostname != "" {
		name = facts.Hostname
	}
	rep := finding.NewReport(finding.Target{Name: name, Kind: "live", OS: doc.Image.OSRelease["PRETTY_NAME"]}, fs2)
	rep.Generated = generatedAt()
	if werr := writeLive(e, *out, sev, host, rep, facts); werr != nil {
		return fail(e, "live", werr)
	}
	if err != nil {
		for _, c := range live.AllCollectors {
			if msg, ok := facts.Errors[c]; ok {
				fmt.Fprintf(e.stderr, "amilint live: %s: %s\n", c, report.Printable(msg))
			}
		}
		return ExitError
	}
	return finding.ExitCode(rep.Findings, sev)
}

// writeLive writes the live report: text and JSON carry every live fact
// (JSON under "live", as the facts document has it); the other formats are
// the report package's, with its live section.
func writeLive(e *env, format string, sev finding.Severity, host *live.Host, rep *finding.Report, facts *live.Facts) error {
	switch format {
	case "json":
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(liveReport{Report: rep, Live: facts})
	case "text":
		writeLiveText(e.stdout, rep, facts)
		return nil
	}
	w, err := report.Get(format, report.WithFailOn(sev), report.WithRules(ruleMeta(host.Auditor())),
		report.WithVersion(version()), report.WithLive(reportLive(rep.Target.Name, facts)))
	if err != nil {
		return err
	}
	return w.Write(e.stdout, rep)
}

// reportLive is the live section of the report package's writers.
func reportLive(name string, f *live.Facts) *report.Live {
	l := &report.Live{Host: name, Cores: []report.Core{}}
	if f.CPU != nil {
		for _, c := range f.CPU.Cores {
			l.Cores = append(l.Cores, report.Core{CPU: c.CPU, User: c.User, System: c.System, IRQ: c.IRQ, SoftIRQ: c.SoftIRQ, NICs: c.NICs})
		}
	}
	if c := f.Cgroups; c != nil && c.Memory != nil {
		l.Memcg = &report.Memcg{Tracked: c.Memory.Tracked, Present: c.Memory.Present, Zombies: c.Memory.Zombies, Leaking: c.Suspect}
		if c.Unified != nil && c.Unified.Leaking != "" {
			l.Memcg.Leaking = c.Unified.Leaking
		}
	}
	return l
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

// listenAddr makes an address with a bare IPv6 host ("fd00::12:9847",
// what "$(POD_IP):9847" gives in a Kubernetes manifest on an IPv6 pod)
// the bracketed form net.Listen takes; any other address is returned as
// is.
func listenAddr(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		return addr
	}
	if ip := net.ParseIP(addr[:i]); ip != nil && ip.To4() == nil {
		return net.JoinHostPort(addr[:i], addr[i+1:])
	}
	return addr
}
