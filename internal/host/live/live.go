// Package live owns the audit of a running host: it runs the collectors
// (cgroup health, per-core CPU, systemd over D-Bus) over one short sample
// and gathers what they say into the live facts, overlays them on the
// static facts of the host's root filesystem (Document), and has the
// policies decide (Host), through the same facts, rules and policies as a
// static scan.
//
// It only reads the host: its root filesystem, /proc, /sys and the system
// bus, under a root prefix that tests and containers set. It never reads
// memory.stat files.
package live

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/amilint/amilint/internal/host/cgroup"
	"github.com/amilint/amilint/internal/host/cpu"
	"github.com/amilint/amilint/internal/systemd/bus"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// Collector names, as --collect spells them.
const (
	CollectCgroup  = "cgroup"
	CollectCPU     = "cpu"
	CollectSystemd = "systemd"
)

// AllCollectors are every collector, the default.
var AllCollectors = []string{CollectCgroup, CollectCPU, CollectSystemd}

// DefaultZombieThreshold is the zombie memcg count at or above which the
// host is reported. A healthy host has a few dozen dying memcgs at most;
// the incident's had ~70,000.
const DefaultZombieThreshold = 1000

// Options configure one audit.
type Options struct {
	// Root is the host's root as seen by this process ("/" when empty);
	// /proc and /sys are read under it.
	Root string
	// FS, when set, is what the collectors read /proc and /sys from
	// instead of Root's directory (a test injects faults through it).
	FS fs.FS
	// MountInfo is the mountinfo file under Root ("proc/self/mountinfo"
	// when empty; a container with hostPID uses "proc/1/mountinfo").
	MountInfo string
	// Bus is the systemd bus: "" for the system bus, a socket path or a
	// D-Bus address (see bus.Address).
	Bus string
	// Sample is how long the CPU sample and the growth checks run (1 s when zero).
	Sample time.Duration
	// Collect lists the collectors to run; AllCollectors when empty.
	Collect []string
	// ZombieThreshold: DefaultZombieThreshold when zero.
	ZombieThreshold int
	// RestartThreshold: bus.DefaultRestartThreshold when zero.
	RestartThreshold uint32
	// Saturation: cpu.DefaultSaturation when zero.
	Saturation float64
}

func (o Options) withDefaults() Options {
	if o.Root == "" {
		o.Root = "/"
	}
	if o.Sample <= 0 {
		o.Sample = time.Second
	}
	if len(o.Collect) == 0 {
		o.Collect = AllCollectors
	}
	if o.ZombieThreshold <= 0 {
		o.ZombieThreshold = DefaultZombieThreshold
	}
	if o.RestartThreshold == 0 {
		o.RestartThreshold = bus.DefaultRestartThreshold
	}
	if o.Saturation <= 0 {
		o.Saturation = cpu.DefaultSaturation
	}
	return o
}

// Validate reports every problem with the options at once.
func (o Options) Validate() error {
	var errs []error
	for _, c := range o.Collect {
		if !slices.Contains(AllCollectors, c) {
			errs = append(errs, fmt.Errorf("unknown collector %q (want %s)", c, strings.Join(AllCollectors, ", ")))
		}
	}
	if !(o.Saturation >= 0 && o.Saturation <= 1) { // NaN too
		errs = append(errs, fmt.Errorf("saturation %v: want a ratio in (0, 1]", o.Saturation))
	}
	if o.ZombieThreshold < 0 {
		errs = append(errs, fmt.Errorf("zombie threshold %d: want 0 (the rule's param) or more", o.ZombieThreshold))
	}
	if o.Sample < 0 {
		errs = append(errs, fmt.Errorf("sample %s: want a positive duration", o.Sample))
	}
	return errors.Join(errs...)
}

// Facts are the live section of the facts document.
type Facts struct {
	Time     time.Time     `json:"time"`
	Hostname string        `json:"hostname,omitempty"`
	Sample   time.Duration `json:"sample_ns"`
	Cgroups  *Cgroups      `json:"cgroups,omitempty"`
	CPU      *cpu.Report   `json:"cpu,omitempty"`
	Systemd  *Systemd      `json:"systemd,omitempty"`
	// Collectors are the collectors that were run.
	Collectors []string `json:"collectors"`
	// Errors are the collectors that could not run, by name.
	Errors map[string]string `json:"errors,omitempty"`
	// Thresholds are the ones the findings were derived with.
	Thresholds Thresholds `json:"thresholds"`
}

// Thresholds are the limits findings are derived with.
type Thresholds struct {
	Zombies    int     `json:"zombies"`
	Restarts   uint32  `json:"restarts"`
	Saturation float64 `json:"saturation"`
}

// Cgroups is the cgroup health: the zombie figure is at
// live.cgroups.memory.zombies.
type Cgroups struct {
	Memory  *cgroup.Memory  `json:"memory,omitempty"`
	Unified *cgroup.Unified `json:"unified,omitempty"`
	// Growth is how the memory controller's counts moved over the sample.
	Growth *Growth `json:"growth,omitempty"`
	// Suspect is the unit most likely leaking memory cgroups, and Why.
	Suspect string `json:"suspect,omitempty"`
	Why     string `json:"why,omitempty"`
}

// Growth is the change of the memcg counts between two readings.
type Growth struct {
	Tracked  int           `json:"tracked"`
	Zombies  int           `json:"zombies"`
	Interval time.Duration `json:"interval_ns"`
}

// Systemd is what the manager says.
type Systemd struct {
	Units []bus.Unit `json:"units"`
	// CrashLooping names the crash-looping units.
	CrashLooping []string `json:"crash_looping"`
	// ContainerPerRestart names the services that create a container per
	// start and are enabled or active.
	ContainerPerRestart []string `json:"container_per_restart"`
}

// Collect runs the collectors over one sample and returns the facts. A
// collector that fails is recorded in Facts.Errors and the others still
// run; the error returned joins those failures (nil when all ran).
func Collect(ctx context.Context, o Options) (*Facts, error) {
	a, err := NewAuditor(o)
	if err != nil {
		return nil, err
	}
	defer a.Close()
	return a.Audit(ctx)
}

// Auditor audits one host again and again, as the exporter does. It keeps
// the systemd connection and each collector's last reading: the first
// audit takes two readings Options.Sample apart, every later one takes one
// reading and compares it with the previous audit's, so a steady exporter
// pays for one reading per interval and never waits.
type Auditor struct {
	o   Options
	cg  *cgroup.Reader
	cpu *cpu.Sampler

	mu      sync.Mutex // one audit at a time
	client  *bus.Client
	last    time.Time
	prevCg  *cgroup.Health
	prevCgT time.Time
	prevCPU *cpu.Reading
	prevSd  *bus.Snapshot
	track   tracker // zombie growth against restarts, across audits
}

// NewAuditor validates o and returns an Auditor; it connects to systemd
// on the first audit.
func NewAuditor(o Options) (*Auditor, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	fsys := o.FS
	if fsys == nil {
		fsys = os.DirFS(o.Root)
	}
	return &Auditor{o: o, cg: &cgroup.Reader{FS: fsys, MountInfo: o.MountInfo},
		cpu: &cpu.Sampler{FS: fsys, Threshold: o.Saturation}}, nil
}

// Close closes the systemd connection, if any.
func (a *Auditor) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.client != nil {
		a.client.Close()
		a.client = nil
	}
}

// Audit runs the collectors once (see Auditor) and returns the facts; a
// failing collector is recorded in Facts.Errors and joined into the error.
func (a *Auditor) Audit(ctx context.Context) (*Facts, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	o := a.o
	now := time.Now()
	f := &Facts{Time: now.UTC(), Sample: o.Sample, Errors: map[string]string{}, Collectors: o.Collect,
		Thresholds: Thresholds{Zombies: o.ZombieThreshold, Restarts: o.RestartThreshold, Saturation: o.Saturation}}
	if !a.last.IsZero() {
		f.Sample = now.Sub(a.last)
	}
	if h, err := os.Hostname(); err == nil && o.Root == "/" {
		f.Hostname = h
	}
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs []error
	)
	fail := func(name string, err error) {
		mu.Lock()
		defer mu.Unlock()
		f.Errors[name] = err.Error()
		errs = append(errs, fmt.Errorf("%s: %w", name, err))
	}
	// The first audit (or the first after systemd's connection was lost)
	// takes the first readings of every collector that has none, together,
	// then waits one sample: the collectors' growths then cover the same
	// interval, so zombie growth and restarts can be compared (a first
	// systemd snapshot over a new connection can take a second alone).
	active := slices.Clone(o.Collect)
	if unprimed := slices.DeleteFunc(slices.Clone(o.Collect), a.primed); len(unprimed) > 0 {
		for _, c := range unprimed {
			wg.Go(func() {
				if err := a.prime(ctx, c); err != nil {
					fail(c, err)
				}
			})
		}
		wg.Wait()
		active = slices.DeleteFunc(active, func(c string) bool { _, failed := f.Errors[c]; return failed })
		if err := sleep(ctx, o.Sample); err != nil {
			for _, c := range active {
				fail(c, err)
			}
			active = nil
		}
	}
	// The collectors then read in parallel; each writes only its own fields.
	if slices.Contains(active, CollectCgroup) {
		wg.Go(func() {
			c, err := a.collectCgroups(ctx)
			if err != nil {
				fail(CollectCgroup, err)
				return
			}
			f.Cgroups = c
		})
	}
	if slices.Contains(active, CollectCPU) {
		wg.Go(func() {
			r, err := a.collectCPU(ctx)
			if err != nil {
				fail(CollectCPU, err)
				return
			}
			f.CPU = r
		})
	}
	if slices.Contains(active, CollectSystemd) {
		wg.Go(func() {
			s, err := a.collectSystemd(ctx)
			if err != nil {
				fail(CollectSystemd, err)
				return
			}
			f.Systemd = s
		})
	}
	wg.Wait()
	a.last = time.Now()
	if f.Cgroups != nil && f.Systemd != nil {
		zombies := 0
		if f.Cgroups.Growth != nil {
			zombies = f.Cgroups.Growth.Zombies
		}
		restarts := map[string]int{}
		for _, u := range f.Systemd.Units {
			if u.CrashLoop != nil && u.CrashLoop.Growth > 0 {
				restarts[u.Name] = int(u.CrashLoop.Growth)
			}
		}
		a.track.add(zombies, restarts)
		f.Cgroups.Suspect, f.Cgroups.Why = suspect(f.Cgroups, f.Systemd, &a.track)
	}
	if len(f.Errors) == 0 {
		f.Errors = nil
	}
	return f, errors.Join(errs...)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// primed says whether the collector has a previous reading to compare with.
func (a *Auditor) primed(collector string) bool {
	switch collector {
	case CollectCgroup:
		return a.prevCg != nil
	case CollectCPU:
		return a.prevCPU != nil
	case CollectSystemd:
		return a.prevSd != nil
	}
	return true
}

// prime takes a collector's first reading.
func (a *Auditor) prime(ctx context.Context, collector string) error {
	switch collector {
	case CollectCgroup:
		h, err := a.cg.Read()
		if err != nil {
			return err
		}
		a.prevCg, a.prevCgT = h, time.Now()
	case CollectCPU:
		r, err := a.cpu.Read()
		if err != nil {
			return err
		}
		a.prevCPU = r
	case CollectSystemd:
		s, err := a.snapshot(ctx)
		if err != nil {
			return err
		}
		a.prevSd = s
	}
	return nil
}

// errUnprimed is a collector asked to compare without a previous reading.
var errUnprimed = errors.New("no previous reading")

func (a *Auditor) collectCgroups(context.Context) (*Cgroups, error) {
	prev, prevT := a.prevCg, a.prevCgT
	if prev == nil {
		return nil, errUnprimed
	}
	cur, err := a.cg.Read()
	if err != nil {
		return nil, err
	}
	a.prevCg, a.prevCgT = cur, time.Now()
	c := &Cgroups{Memory: cur.Memory, Unified: cur.Unified}
	if prev.Memory != nil && cur.Memory != nil {
		c.Growth = &Growth{Tracked: cur.Memory.Tracked - prev.Memory.Tracked, Zombies: cur.Memory.Zombies - prev.Memory.Zombies,
			Interval: a.prevCgT.Sub(prevT)}
	}
	return c, nil
}

func (a *Auditor) collectCPU(context.Context) (*cpu.Report, error) {
	prev := a.prevCPU
	if prev == nil {
		return nil, errUnprimed
	}
	cur, err := a.cpu.Read()
	if err != nil {
		return nil, err
	}
	a.prevCPU = cur
	return a.cpu.Between(prev, cur), nil
}

// snapshot takes one systemd snapshot, connecting first if need be; on an
// error it drops the connection and the previous snapshot, so the next
// audit reconnects and starts over (systemd or the bus may have restarted).
func (a *Auditor) snapshot(ctx context.Context) (*bus.Snapshot, error) {
	if a.client == nil {
		c, err := bus.Dial(ctx, a.o.Bus)
		if err != nil {
			return nil, err
		}
		a.client = c
	}
	s, err := a.client.Snapshot(ctx)
	if err != nil {
		a.client.Close()
		a.client, a.prevSd = nil, nil
	}
	return s, err
}

func (a *Auditor) collectSystemd(ctx context.Context) (*Systemd, error) {
	prev := a.prevSd
	if prev == nil {
		return nil, errUnprimed
	}
	cur, err := a.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	a.prevSd = cur
	s := &Systemd{Units: cur.Units, CrashLooping: bus.Detect(prev, cur, a.o.RestartThreshold), ContainerPerRestart: []string{}}
	if s.CrashLooping == nil {
		s.CrashLooping = []string{}
	}
	for _, u := range cur.Units {
		if u.ContainerPerRestart && (isEnabled(u.FileState) || u.ActiveState == "active" || u.ActiveState == "activating" || u.CrashLoop != nil) {
			s.ContainerPerRestart = append(s.ContainerPerRestart, u.Name)
		}
	}
	return s, nil
}

func isEnabled(state string) bool {
	return state == "enabled" || state == "enabled-runtime"
}

// suspect names the unit most likely leaking memcgs: the v2 hierarchy's
// leaking subtree when it is a unit and the memory controller is on v2; else the service whose restarts track
// the zombie growth over the recent audits; else the service whose
// restarts within the latest interval account for its growth (measured
// restarts beat a guess from the unit's configuration); else a
// crash-looping service that creates a container per restart (its
// containers churn without systemd restarting it); else the service that
// restarted most while the zombies grew.
func suspect(c *Cgroups, s *Systemd, t *tracker) (string, string) {
	// On a hybrid host (memory controller on v1) the unified hierarchy's
	// dying cgroups hold no memory: they say nothing about memcgs.
	if c.Unified != nil && c.Unified.Leaking != "" && (c.Memory == nil || c.Memory.Version == 2) {
		// A delegated subtree's owner names its cgroups as it likes:
		// only a unit's name is a suspect (its fix is a command to run).
		base := path.Base(c.Unified.Leaking)
		if unit.Valid(base) {
			return base, fmt.Sprintf("%s holds most dying cgroups (%s)", c.Unified.Leaking, "cgroup.stat nr_dying_descendants")
		}
	}
	if a, ok := t.correlated(); ok {
		return a.unit, a.why
	}
	if a, ok := t.explained(); ok {
		return a.unit, a.why
	}
	for _, n := range s.CrashLooping {
		if slices.Contains(s.ContainerPerRestart, n) {
			return n, "it crash-loops and creates a new container, hence a new memory cgroup, on every restart"
		}
	}
	if a, ok := t.latest(); ok {
		return a.unit, a.why
	}
	return "", ""
}
