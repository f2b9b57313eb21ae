// Package metrics owns amilint's Prometheus exporter: the metrics of the
// live audit (zombie memcgs, unit restarts and crash loops, per-core busy
// ratios, findings) served on /metrics, and /healthz, over an HTTP server
// hardened as exporters are (timeouts on every connection, a connection
// cap, TLS and basic auth from an exporter-toolkit web configuration).
//
// Audits run in the background at a fixed interval and scrapes read the
// latest result, so a scrape costs a few microseconds and the host pays
// one audit per interval whatever the number of scrapers. The audit is
// the live package's, which never reads memory.stat.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/exporter-toolkit/web"
	"golang.org/x/net/netutil"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/audit/policy"
	"github.com/amilint/amilint/internal/host/live"
)

// AuditFunc runs one live audit.
type AuditFunc func(ctx context.Context) (*live.Facts, []finding.Finding, error)

// Exporter caches the latest audit and exposes it as metrics.
type Exporter struct {
	audit    AuditFunc
	interval time.Duration
	log      *slog.Logger

	mu       sync.RWMutex
	facts    *live.Facts
	findings []finding.Finding
	err      error
	took     time.Duration
	at       time.Time
	// okAt is when the audit whose facts are served ended; before at
	// when the last audit failed and its predecessor's result is served.
	okAt     time.Time
	failures map[string]float64 // by reason
}

// Failure reasons of amilint_audit_failures_total.
const (
	ReasonPolicyTimeout = "policy_timeout"
	ReasonPolicyMemory  = "policy_memory"
	ReasonError         = "error"
)

// DefaultInterval is the time between two audits: Prometheus' usual
// scrape interval.
const DefaultInterval = 15 * time.Second

// New returns an exporter running audit every interval (DefaultInterval
// when zero).
func New(audit AuditFunc, interval time.Duration, log *slog.Logger) *Exporter {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Exporter{audit: audit, interval: interval, log: log}
}

// Refresh runs one audit now and caches its result. An audit that
// produces no facts (a policy out of time, an error) is counted as failed
// and the last good result stays served, marked stale. The audit is
// bounded (auditTimeout): a collector that hangs, a bus that stopped
// answering, fails it rather than stall the exporter. The error returned
// is that of an audit given up (policy.IsStuck): a policy's built-in call
// that cannot be interrupted still runs, and only the process ending
// stops it.
func (e *Exporter) Refresh(ctx context.Context) error {
	// A policy's memory budget counts from what the process holds when
	// the evaluation starts, garbage included: collect the previous
	// audit's first (25-30 ms of CPU on a 50 MiB heap; deploy/README.md).
	runtime.GC()
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, e.auditTimeout())
	defer cancel()
	facts, fs, err := e.audit(ctx)
	took := time.Since(start)
	if err != nil {
		e.log.Warn("live audit", "err", err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.err, e.took, e.at = err, took, time.Now()
	if facts != nil {
		e.facts, e.findings, e.okAt = facts, fs, e.at
		return nil
	}
	reason := ReasonError
	switch {
	case errors.Is(err, policy.ErrTimeout):
		reason = ReasonPolicyTimeout
	case errors.Is(err, policy.ErrMemory):
		reason = ReasonPolicyMemory
	}
	if reason != ReasonError && !policy.IsStuck(err) {
		// A policy stopped by its budget may have grown the heap by
		// hundreds of megabytes: hand it back to the node now, not when
		// the scavenger gets to it.
		defer debug.FreeOSMemory()
	}
	if e.failures == nil {
		e.failures = map[string]float64{}
	}
	e.failures[reason]++
	if policy.IsStuck(err) {
		return err
	}
	return nil
}

// overdue is how old the served result may be before it is marked stale
// even without a failed audit (one still running): three intervals, as
// Healthy allows.
func (e *Exporter) overdue() time.Duration { return 3 * e.interval }

// auditTimeout bounds one audit: three intervals, and at least
// minAuditTimeout (a first audit primes every collector and waits a
// sample).
func (e *Exporter) auditTimeout() time.Duration { return max(e.overdue(), minAuditTimeout) }

// minAuditTimeout is the least time an audit is given.
const minAuditTimeout = 10 * time.Second

// Run audits every interval until ctx is done, or an audit is given up
// (Refresh), whose error it returns.
func (e *Exporter) Run(ctx context.Context) error {
	t := time.NewTicker(e.interval)
	defer t.Stop()
	for {
		if err := e.Refresh(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

var (
	descZombies   = prometheus.NewDesc("amilint_memcg_zombies", "Memory cgroups removed from cgroupfs but still tracked by the kernel (dying, zombie memcgs).", nil, nil)
	descTracked   = prometheus.NewDesc("amilint_memcg_tracked", "Memory cgroups the kernel tracks, live and dying (/proc/cgroups num_cgroups).", nil, nil)
	descPresent   = prometheus.NewDesc("amilint_memcg_present", "Directories in the memory cgroup hierarchy.", nil, nil)
	descSuspect   = prometheus.NewDesc("amilint_memcg_leak_suspect", "The unit the zombie memory cgroups are attributed to (1); the why is in the live report.", []string{"unit"}, nil)
	descDying     = prometheus.NewDesc("amilint_cgroup_dying_descendants", "Dying descendants of a cgroup v2 subtree (cgroup.stat nr_dying_descendants).", []string{"path"}, nil)
	descRestarts  = prometheus.NewDesc("amilint_unit_restarts_total", "Automatic restarts of a loaded service (systemd NRestarts).", []string{"unit"}, nil)
	descLooping   = prometheus.NewDesc("amilint_unit_crashlooping", "Whether a loaded service is crash-looping (1) or not (0).", []string{"unit"}, nil)
	descBusy      = prometheus.NewDesc("amilint_core_busy_ratio", "Share of a core's time in a mode over the last sample.", []string{"cpu", "mode"}, nil)
	descNICCore   = prometheus.NewDesc("amilint_nic_irq_core", "A core (1) that served a network device's interrupts in the last sample.", []string{"nic", "cpu"}, nil)
	descFindings  = prometheus.NewDesc("amilint_findings", "Live findings by rule and severity.", []string{"rule_id", "severity"}, nil)
	descDuration  = prometheus.NewDesc("amilint_scrape_duration_seconds", "Wall time of the last live audit, its sample included.", nil, nil)
	descLast      = prometheus.NewDesc("amilint_last_audit_timestamp_seconds", "When the last live audit ended, in Unix time.", nil, nil)
	descCollector = prometheus.NewDesc("amilint_collector_up", "Whether a collector of the last audit succeeded (1) or failed (0).", []string{"collector"}, nil)
	descSuccess   = prometheus.NewDesc("amilint_audit_success", "Whether the last live audit produced a result (1) or failed (0), a policy out of time for instance.", nil, nil)
	descStale     = prometheus.NewDesc("amilint_audit_stale", "Whether the live metrics served are those of an earlier audit (1) because the last one failed or none ended for three intervals.", nil, nil)
	descLastOK    = prometheus.NewDesc("amilint_last_success_timestamp_seconds", "When the audit whose metrics are served ended, in Unix time.", nil, nil)
	descFailures  = prometheus.NewDesc("amilint_audit_failures_total", "Live audits that produced no result, by reason (policy_timeout, policy_memory, error).", []string{"reason"}, nil)
)

// Describe implements prometheus.Collector.
func (e *Exporter) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descZombies, descTracked, descPresent, descSuspect, descDying, descRestarts, descLooping,
		descBusy, descNICCore, descFindings, descDuration, descLast, descCollector, descSuccess, descStale, descLastOK, descFailures} {
		ch <- d
	}
}

// Collect implements prometheus.Collector from the cached audit.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.at.IsZero() {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		for i, l := range labels {
			labels[i] = label(l)
		}
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	gauge(descDuration, e.took.Seconds())
	gauge(descLast, float64(e.at.UnixNano())/1e9)
	ok, stale := 0.0, 0.0
	if e.okAt.Equal(e.at) {
		ok = 1
	}
	// Stale: the last audit failed, or none ended for three intervals
	// (one hangs): what is served is older than it looks.
	if e.facts != nil && (!e.okAt.Equal(e.at) || time.Since(e.okAt) > e.overdue()) {
		stale = 1
	}
	gauge(descSuccess, ok)
	gauge(descStale, stale)
	for _, r := range []string{ReasonPolicyTimeout, ReasonPolicyMemory, ReasonError} {
		ch <- prometheus.MustNewConstMetric(descFailures, prometheus.CounterValue, e.failures[r], r)
	}
	f := e.facts
	if f == nil {
		return
	}
	gauge(descLastOK, float64(e.okAt.UnixNano())/1e9)
	for _, c := range f.Collectors {
		up := 1.0
		if _, failed := f.Errors[c]; failed {
			up = 0
		}
		gauge(descCollector, up, c)
	}
	if c := f.Cgroups; c != nil {
		if m := c.Memory; m != nil {
			gauge(descZombies, float64(m.Zombies))
			gauge(descTracked, float64(m.Tracked))
			gauge(descPresent, float64(m.Present))
		}
		if c.Suspect != "" {
			gauge(descSuspect, 1, c.Suspect)
		}
		if u := c.Unified; u != nil {
			seen := map[string]bool{}
			for _, s := range u.Subtrees {
				// Two names may read the same once valid UTF-8: the
				// first (most dying) is kept, as a duplicate would fail
				// the scrape.
				if p := label(s.Path); !seen[p] {
					seen[p] = true
					gauge(descDying, float64(s.Dying), p)
				}
			}
		}
	}
	if s := f.Systemd; s != nil {
		for _, u := range s.Units {
			if !u.Loaded || u.LoadState != "loaded" || len(u.Name) < 8 || u.Name[len(u.Name)-8:] != ".service" {
				continue
			}
			ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.CounterValue, float64(u.NRestarts), u.Name)
			v := 0.0
			if u.CrashLoop != nil {
				v = 1
			}
			gauge(descLooping, v, u.Name)
		}
	}
	if r := f.CPU; r != nil {
		for _, c := range r.Cores {
			cpu := strconv.Itoa(c.CPU)
			for mode, v := range map[string]float64{"user": c.User, "system": c.System, "irq": c.IRQ,
				"softirq": c.SoftIRQ, "iowait": c.IOWait, "steal": c.Steal} {
				gauge(descBusy, v, cpu, mode)
			}
		}
		seen := map[[2]string]bool{}
		for _, n := range r.NICs {
			for _, c := range n.Cores {
				k := [2]string{label(n.Name), strconv.Itoa(c)}
				if !seen[k] {
					seen[k] = true
					gauge(descNICCore, 1, k[0], k[1])
				}
			}
		}
	}
	counts := map[[2]string]int{}
	for _, fd := range e.findings {
		if !fd.Waived {
			counts[[2]string{fd.RuleID, fd.Severity.String()}]++
		}
	}
	for k, n := range counts {
		gauge(descFindings, float64(n), k[0], k[1])
	}
}

// label makes s a label value: Prometheus refuses one that is not valid
// UTF-8, and that fails the whole scrape. Cgroup and network device names
// are bytes, not text (a user may mkdir any name in a delegated subtree).
func label(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// Healthy says whether the last audit ran within three intervals and
// produced facts.
func (e *Exporter) Healthy() error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	switch {
	case e.at.IsZero():
		return errors.New("no audit yet")
	case e.facts == nil:
		return fmt.Errorf("last audit failed: %w", e.err)
	case time.Since(e.at) > 3*e.interval:
		return fmt.Errorf("last audit %s ago", time.Since(e.at).Round(time.Second))
	}
	return nil
}

// Ready says whether the exporter is healthy, the last audit produced a
// result and every collector of it ran: a pod whose systemd or cgroup
// collector fails (a missing mount or bus socket), or whose policies run
// out of time, is alive, since restarting it fixes nothing, but not
// ready.
func (e *Exporter) Ready() error {
	if err := e.Healthy(); err != nil {
		return err
	}
	e.mu.RLock()
	defer e.mu.RUnlock()
	if !e.okAt.Equal(e.at) {
		return fmt.Errorf("last audit failed: %w; serving the result of the audit of %s (stale)", e.err, e.okAt.UTC().Format(time.RFC3339))
	}
	var down []string
	for _, c := range e.facts.Collectors {
		if msg, failed := e.facts.Errors[c]; failed {
			down = append(down, c+": "+msg)
		}
	}
	if len(down) > 0 {
		slices.Sort(down)
		return fmt.Errorf("collectors failing: %s", strings.Join(down, "; "))
	}
	return nil
}

// Handler serves /metrics, /healthz (liveness: audits are running) and
// /readyz (readiness: and every collector works).
func (e *Exporter) Handler() http.Handler {
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(e.log.Handler(), slog.LevelError)}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := e.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := e.Ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Server limits: every connection is cut when it trickles its headers
// (ReadHeaderTimeout, which also bounds a TLS handshake), its body
// (ReadTimeout), reads its response slowly (WriteTimeout) or idles
// between requests (IdleTimeout); past DefaultMaxConnections, new
// connections wait in the kernel's backlog until one of those frees a
// slot. A scrape is a few kilobytes: none of these bites a real client.
const (
	ReadHeaderTimeout     = 5 * time.Second
	ReadTimeout           = 10 * time.Second
	WriteTimeout          = 20 * time.Second
	IdleTimeout           = 30 * time.Second
	MaxHeaderBytes        = 16 << 10
	DefaultMaxConnections = 256
)

// ServeOptions configure the HTTP server.
type ServeOptions struct {
	// WebConfigFile is a Prometheus exporter-toolkit web configuration
	// (--web.config.file): TLS and basic auth; "" serves plain HTTP.
	WebConfigFile string
	// MaxConnections caps the connections served at once (0:
	// DefaultMaxConnections).
	MaxConnections int
}

// CheckWebConfig validates a web configuration file (its users' bcrypt
// hashes, certificates and keys), so a bad one fails at start.
func CheckWebConfig(file string) error {
	if err := web.Validate(file); err != nil {
		return fmt.Errorf("web config %s: %w", file, err)
	}
	return nil
}

// Serve audits in the background and serves the handler on ln until ctx
// is done, then shuts the server down.
func (e *Exporter) Serve(ctx context.Context, ln net.Listener, o ServeOptions) error {
	if err := CheckWebConfig(o.WebConfigFile); err != nil {
		return err
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := &http.Server{
		Handler:           e.Handler(),
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		WriteTimeout:      WriteTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(e.log.Handler(), slog.LevelDebug),
	}
	var wg sync.WaitGroup
	given := make(chan error, 1)
	wg.Go(func() { given <- e.Run(ctx) })
	errc := make(chan error, 1)
	noSocket := false
	flags := &web.FlagConfig{WebListenAddresses: &[]string{ln.Addr().String()}, WebSystemdSocket: &noSocket, WebConfigFile: &o.WebConfigFile}
	go func() { errc <- web.Serve(netutil.LimitListener(ln, o.MaxConnections), srv, flags, e.log) }()
	var err, stuck error
	select {
	case <-ctx.Done():
	case err = <-errc:
	case stuck = <-given:
	}
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer scancel()
	_ = srv.Shutdown(sctx)
	cancel()
	wg.Wait()
	if stuck == nil {
		select {
		case stuck = <-given: // given up as the server stopped
		default:
		}
	}
	if stuck != nil {
		// Serving on would serve a stale result forever beside a core
		// the policy holds: exit, so that the supervisor restarts it.
		return fmt.Errorf("stopped serving: %w", stuck)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	}
	return nil
}
