package cpu

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultSaturation is the share of a core's time in system mode at or
// above which the core is saturated.
const DefaultSaturation = 0.95

// Core is one CPU's utilisation over a sample, as ratios of its ticks.
type Core struct {
	CPU     int     `json:"cpu"`
	User    float64 `json:"user"`
	System  float64 `json:"system"`
	IRQ     float64 `json:"irq"`
	SoftIRQ float64 `json:"softirq"`
	IOWait  float64 `json:"iowait"`
	Steal   float64 `json:"steal"`
	Idle    float64 `json:"idle"`
	// Busy is 1 - idle - iowait.
	Busy float64 `json:"busy"`
	// NetRX is the number of NET_RX softirqs the core ran in the sample.
	NetRX uint64 `json:"net_rx"`
	// NICIRQs is the number of network card interrupts it served in the sample.
	NICIRQs uint64 `json:"nic_irqs"`
	// NICs names the network devices whose interrupts it serves.
	NICs []string `json:"nics,omitempty"`
}

// NIC is a network device and the cores serving its interrupts.
type NIC struct {
	// Name is the interface ("eth0") or, when sysfs is not readable, the
	// device as /proc/interrupts names it ("virtio2", "mlx5_comp").
	Name   string `json:"name"`
	Driver string `json:"driver,omitempty"`
	IRQs   []int  `json:"irqs"`
	// Cores are the CPUs that served its interrupts during the sample, or
	// since boot when none arrived during the sample.
	Cores []int `json:"cores"`
}

// Saturation is a core at or above the saturation threshold of system time.
type Saturation struct {
	CPU    int      `json:"cpu"`
	System float64  `json:"system"`
	NICs   []string `json:"nics,omitempty"`
	// MachineBusy is the whole machine's busy ratio over the same sample.
	MachineBusy float64 `json:"machine_busy"`
	// Statement says it in one sentence.
	Statement string `json:"statement"`
}

// Report is one sample of the host's CPUs.
type Report struct {
	Interval time.Duration `json:"interval_ns"`
	// Busy is the whole machine's busy ratio (1 - idle - iowait).
	Busy      float64      `json:"busy"`
	Cores     []Core       `json:"cores"`
	NICs      []NIC        `json:"nics"`
	Saturated []Saturation `json:"saturated"`
}

// Sampler samples CPU utilisation from a tree laid out like the host's root.
type Sampler struct {
	// FS holds proc/stat, proc/softirqs, proc/interrupts and, optionally,
	// sys/class/net.
	FS fs.FS
	// Threshold is the saturation threshold; DefaultSaturation when zero.
	Threshold float64
}

// Reading is one read of the CPU proc files.
type Reading struct {
	Time time.Time
	stat *Stat
	soft *Table
	intr *Table
}

// Read reads the proc files once.
func (s *Sampler) Read() (*Reading, error) {
	snap := Reading{Time: time.Now()}
	b, err := fs.ReadFile(s.FS, "proc/stat")
	if err != nil {
		return nil, fmt.Errorf("read proc/stat: %w", err)
	}
	if snap.stat, err = ParseStat(b); err != nil {
		return nil, fmt.Errorf("parse proc/stat: %w", err)
	}
	if b, err = fs.ReadFile(s.FS, "proc/softirqs"); err != nil {
		return nil, fmt.Errorf("read proc/softirqs: %w", err)
	}
	if snap.soft, err = ParseTable(b); err != nil {
		return nil, fmt.Errorf("parse proc/softirqs: %w", err)
	}
	if b, err = fs.ReadFile(s.FS, "proc/interrupts"); err != nil {
		return nil, fmt.Errorf("read proc/interrupts: %w", err)
	}
	if snap.intr, err = ParseTable(b); err != nil {
		return nil, fmt.Errorf("parse proc/interrupts: %w", err)
	}
	return &snap, nil
}

// Sample reads the proc files twice, d apart, and computes the report.
func (s *Sampler) Sample(ctx context.Context, d time.Duration) (*Report, error) {
	if d <= 0 {
		return nil, ErrNoSample
	}
	a, err := s.Read()
	if err != nil {
		return nil, err
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("sample cpu: %w", ctx.Err())
	case <-t.C:
	}
	b, err := s.Read()
	if err != nil {
		return nil, err
	}
	return s.Between(a, b), nil
}

// Between computes the report over two readings, a first.
func (s *Sampler) Between(a, b *Reading) *Report {
	return Compute(a.stat, b.stat, a.soft, b.soft, a.intr, b.intr, s.netDevices(), b.Time.Sub(a.Time), s.Threshold)
}

// NetDevice is what sysfs says about one network interface.
type NetDevice struct {
	Name string
	// Bus is the device's name on its bus ("virtio2", "0000:20:03.0").
	Bus    string
	Driver string
	// IRQs are the MSI interrupts of the device or of its PCI parent.
	IRQs []int
	// PCI is the PCI address of the device or of its parent, if any.
	PCI string
}

var pciAddr = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$`) })

// netDevices reads sys/class/net; virtual interfaces (no "device" link)
// are left out. Unreadable sysfs yields none, and matching falls back to
// interrupt names.
func (s *Sampler) netDevices() []NetDevice {
	ents, err := fs.ReadDir(s.FS, "sys/class/net")
	if err != nil {
		return nil
	}
	var out []NetDevice
	for _, e := range ents {
		base := "sys/class/net/" + e.Name()
		dev, err := fs.ReadLink(s.FS, base+"/device")
		if err != nil {
			continue
		}
		d := NetDevice{Name: e.Name(), Bus: path.Base(dev)}
		if drv, err := fs.ReadLink(s.FS, base+"/device/driver"); err == nil {
			d.Driver = path.Base(drv)
		}
		for _, dir := range []string{base + "/device/msi_irqs", base + "/device/../msi_irqs"} {
			irqs, err := fs.ReadDir(s.FS, path.Clean(dir))
			if err != nil {
				continue
			}
			for _, i := range irqs {
				if n, err := strconv.Atoi(i.Name()); err == nil {
					d.IRQs = append(d.IRQs, n)
				}
			}
			break
		}
		// The PCI address is the link target's last component that looks like one.
		for _, c := range slices.Backward(strings.Split(path.Clean(path.Join(path.Dir(base), dev)), "/")) {
			if pciAddr().MatchString(c) {
				d.PCI = c
				break
			}
		}
		out = append(out, d)
	}
	return out
}

// nicAction matches interrupt action names of network cards when sysfs
// cannot say: queue interrupts named after the interface (eth0-Tx-Rx-0,
// ens5-rx-1, enp1s0f0-TxRx-3), virtio-net queues, and drivers' own names.
var nicAction = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?:^|[ ,])((?:eth|ens|enp|eno|enx|em|ib)[0-9a-z]*[0-9])(?:[-@ ,]|$)|(?:^|[ ,])(virtio[0-9]+)-(?:input|output)|(?:^|[ ,])(ena|mlx[45]_(?:comp|async)|mlx4|ixgbe|ixgbevf|i40e|iavf|ice|gve|bnxt_en|hv_netvsc|nfp|qede)[-_0-9]*(?:@|[ ,]|$)`)
})

// nicOf names the network device an interrupt row belongs to, or "".
func nicOf(r Row, devs []NetDevice) string {
	irq, _ := strconv.Atoi(r.Key)
	fields := strings.Fields(r.Desc)
	for _, d := range devs {
		if slices.Contains(d.IRQs, irq) && irq > 0 {
			return d.Name
		}
		for _, f := range fields {
			for _, a := range strings.Split(f, ",") {
				if a == d.Name || strings.HasPrefix(a, d.Name+"-") || strings.HasPrefix(a, d.Bus+"-") ||
					(d.PCI != "" && (strings.HasSuffix(a, "@pci:"+d.PCI) || strings.HasSuffix(a, "-"+d.PCI))) {
					return d.Name
				}
			}
		}
	}
	if len(devs) > 0 {
		return ""
	}
	m := nicAction().FindStringSubmatch(r.Desc)
	for _, g := range m[min(1, len(m)):] {
		if g != "" {
			return g
		}
	}
	return ""
}

func ratio(n, total uint64) float64 {
	if total == 0 {
		return 0
	}
	return float64(n) / float64(total)
}

func delta(a, b uint64) uint64 {
	if b < a {
		return 0 // counter reset (CPU hotplug)
	}
	return b - a
}

func deltaTimes(a, b Times) Times {
	return Times{
		User: delta(a.User, b.User) + delta(a.Nice, b.Nice), System: delta(a.System, b.System),
		Idle: delta(a.Idle, b.Idle), IOWait: delta(a.IOWait, b.IOWait), IRQ: delta(a.IRQ, b.IRQ),
		SoftIRQ: delta(a.SoftIRQ, b.SoftIRQ), Steal: delta(a.Steal, b.Steal),
	}
}

// rowDelta returns per-CPU deltas of the row key between two tables,
// keyed by CPU number.
func rowDelta(a, b *Table, key string) map[int]uint64 {
	out := map[int]uint64{}
	rb, ok := b.Row(key)
	if !ok {
		return out
	}
	ra, _ := a.Row(key)
	for i, n := range rb.Counts {
		var prev uint64
		if i < len(ra.Counts) && i < len(a.CPUs) && a.CPUs[i] == b.CPUs[i] {
			prev = ra.Counts[i]
		}
		out[b.CPUs[i]] = delta(prev, n)
	}
	return out
}

// Compute derives the report from two readings d apart. threshold 0 means
// DefaultSaturation.
func Compute(sa, sb *Stat, softA, softB, intrA, intrB *Table, devs []NetDevice, d time.Duration, threshold float64) *Report {
	if threshold <= 0 {
		threshold = DefaultSaturation
	}
	rep := &Report{Interval: d, Cores: []Core{}, NICs: []NIC{}, Saturated: []Saturation{}}
	all := deltaTimes(sa.All, sb.All)
	rep.Busy = 1 - ratio(all.Idle+all.IOWait, all.Total())

	netrx := rowDelta(softA, softB, "NET_RX")

	// Network interrupts: per NIC, IRQ numbers, per-CPU deltas and totals.
	type nicAcc struct {
		nic    NIC
		dcount map[int]uint64
		total  map[int]uint64
	}
	nics := map[string]*nicAcc{}
	var order []string
	for _, r := range intrB.Rows {
		irq, err := strconv.Atoi(r.Key)
		if err != nil {
			continue // LOC, NMI, …
		}
		name := nicOf(r, devs)
		if name == "" {
			continue
		}
		acc := nics[name]
		if acc == nil {
			acc = &nicAcc{nic: NIC{Name: name}, dcount: map[int]uint64{}, total: map[int]uint64{}}
			for _, dv := range devs {
				if dv.Name == name {
					acc.nic.Driver = dv.Driver
				}
			}
			nics[name] = acc
			order = append(order, name)
		}
		acc.nic.IRQs = append(acc.nic.IRQs, irq)
		for cpu, n := range rowDelta(intrA, intrB, r.Key) {
			acc.dcount[cpu] += n
		}
		for i, n := range r.Counts {
			acc.total[intrB.CPUs[i]] += n
		}
	}
	nicIRQs := map[int]uint64{}
	nicsOf := map[int][]string{}
	slices.Sort(order)
	for _, name := range order {
		acc := nics[name]
		counts := acc.dcount
		var sum uint64
		for _, n := range counts {
			sum += n
		}
		if sum == 0 {
			counts = acc.total
		}
		for cpu, n := range counts {
			if n > 0 {
				acc.nic.Cores = append(acc.nic.Cores, cpu)
				nicsOf[cpu] = append(nicsOf[cpu], name)
			}
		}
		for cpu, n := range acc.dcount {
			nicIRQs[cpu] += n
		}
		slices.Sort(acc.nic.Cores)
		if acc.nic.Cores == nil {
			acc.nic.Cores = []int{}
		}
		rep.NICs = append(rep.NICs, acc.nic)
	}

	cpus := make([]int, 0, len(sb.Cores))
	for c := range sb.Cores {
		cpus = append(cpus, c)
	}
	slices.Sort(cpus)
	for _, c := range cpus {
		dt := deltaTimes(sa.Cores[c], sb.Cores[c])
		tot := dt.Total()
		core := Core{
			CPU: c, User: ratio(dt.User, tot), System: ratio(dt.System, tot), IRQ: ratio(dt.IRQ, tot),
			SoftIRQ: ratio(dt.SoftIRQ, tot), IOWait: ratio(dt.IOWait, tot), Steal: ratio(dt.Steal, tot),
			Idle: ratio(dt.Idle, tot), NetRX: netrx[c], NICIRQs: nicIRQs[c], NICs: nicsOf[c],
		}
		if tot > 0 {
			core.Busy = 1 - ratio(dt.Idle+dt.IOWait, tot)
		}
		rep.Cores = append(rep.Cores, core)
		if tot > 0 && core.System >= threshold {
			rep.Saturated = append(rep.Saturated, Saturation{
				CPU: c, System: core.System, NICs: core.NICs, MachineBusy: rep.Busy,
				Statement: statement(c, core.System, core.NICs, rep.Busy),
			})
		}
	}
	return rep
}

// statement says "core 39 (serving eth0 IRQs) at 100% system while the
// machine is 2% busy".
func statement(cpu int, sys float64, nics []string, busy float64) string {
	serving := ""
	if len(nics) > 0 {
		serving = fmt.Sprintf(" (serving %s IRQs)", strings.Join(nics, ", "))
	}
	return fmt.Sprintf("core %d%s at %.0f%% system while the machine is %.0f%% busy", cpu, serving, 100*sys, 100*busy)
}

// ErrNoSample is returned for a zero sample duration.
var ErrNoSample = errors.New("sample duration must be positive")
