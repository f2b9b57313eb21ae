package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/host/cgroup"
	"github.com/amilint/amilint/internal/host/cgroup/cgrouptest"
	"github.com/amilint/amilint/internal/host/live"
	"github.com/amilint/amilint/internal/host/metrics"
	"github.com/amilint/amilint/internal/systemd/bus/bustest"
)

// faultFS is the host's root as the collectors read it, with faults the
// test turns on and off: files /proc denies (EACCES), and cgroups that
// vanish under the reader while it walks (ENOENT on a listing, ENODEV on
// a file opened just before the rmdir).
type faultFS struct {
	fs.FS
	mu     sync.Mutex
	deny   map[string]bool
	vanish string // cgroups below this directory vanish at random
	rng    *rand.Rand
}

func (f *faultFS) Open(name string) (fs.File, error) {
	f.mu.Lock()
	denied := f.deny[name]
	gone := f.vanish != "" && strings.HasPrefix(name, f.vanish+"/") && f.rng.IntN(4) == 0
	f.mu.Unlock()
	switch {
	case denied:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
	case gone && strings.HasSuffix(name, "/cgroup.stat"):
		return nil, &fs.PathError{Op: "read", Path: name, Err: syscall.ENODEV}
	case gone:
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return f.FS.Open(name)
}

func (f *faultFS) set(deny []string, vanish string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deny = map[string]bool{}
	for _, d := range deny {
		f.deny[d] = true
	}
	f.vanish = vanish
}

// overdueRE is the whole of what /healthz and /readyz answer when no
// audit ended for three intervals.
var overdueRE = regexp.MustCompile(`^last audit \S+ ago\n?$`)

// settled gets url, again while the answer is only that no audit ended for
// three intervals: at TestServeFaults' interval of 100 ms, a machine
// loaded by a full test run can take that long between two audits, which
// the exporter rightly reports but is not the fault under test. It tries
// for 30 s at most, and then returns what it got.
func settled(t *testing.T, url string) (int, string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get(t, url)
		if !overdueRE.Match(body) || time.Now().After(deadline) {
			return code, string(body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeFaults runs the exporter on loopback over a host whose systemd
// bus (a real dbus-daemon with a fake manager) vanishes, comes back and
// restarts, whose /proc denies files, and whose cgroups vanish while they
// are walked. Through each fault the exporter keeps serving; the failing
// collector is labelled down (amilint_collector_up 0, /readyz names it)
// and none of its metrics is served from an earlier audit; the next audit
// after the fault ends brings it back.
func TestServeFaults(t *testing.T) {
	root := t.TempDir()
	for name, body := range map[string]string{
		"etc/os-release":                       "ID=debian\n",
		"lib/systemd/system/default.target":    "[Unit]\nRequires=multi-user.target\n",
		"lib/systemd/system/multi-user.target": "[Unit]\nDescription=Multi-User\n",
	} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, name), []byte(body), 0o644))
	}
	require.NoError(t, os.Symlink("/proc", filepath.Join(root, "proc")))
	require.NoError(t, os.Symlink("/sys", filepath.Join(root, "sys")))
	units := func(restarts uint32) []bustest.Unit {
		return []bustest.Unit{
			{Name: "ecs.service", FileState: "enabled", ActiveState: "activating", SubState: "auto-restart", NRestarts: restarts, Result: "exit-code", Restart: "always"},
			{Name: "ssh.service", FileState: "enabled", ActiveState: "active", SubState: "running", Result: "success", Restart: "on-failure"},
		}
	}
	b := bustest.New(t, units(5))
	fault := &faultFS{FS: os.DirFS(root), rng: rand.New(rand.NewPCG(1, 2))}
	opts := live.Options{Root: root, FS: fault, Bus: b.Socket(), Sample: 20 * time.Millisecond, ZombieThreshold: 1 << 30}
	host, err := live.NewHost(context.Background(), opts, audit.Config{}, "faulty-host")
	require.NoError(t, err)
	defer host.Close()
	e := metrics.New(host.AuditLive, 100*time.Millisecond, nil)
	base := serve(t, e)
	waitHealthy(t, base)

	up := func(fams map[string]*dto.MetricFamily, c string) float64 {
		return value(t, fams, "amilint_collector_up", map[string]string{"collector": c})
	}
	// until scrapes until cond holds of a scrape, bounded.
	until := func(what string, cond func(fams map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
		t.Helper()
		var last map[string]*dto.MetricFamily
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			fams, _ := scrape(t, base)
			if last = fams; cond(fams) {
				return fams
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("%s: not seen in 30s; last scrape has %d families", what, len(last))
		return nil
	}
	restarts := func(fams map[string]*dto.MetricFamily) (float64, bool) {
		f, ok := fams["amilint_unit_restarts_total"]
		if !ok {
			return 0, false
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "unit" && l.GetValue() == "ecs.service" {
					return m.GetCounter().GetValue(), true
				}
			}
		}
		return 0, false
	}
	healthy := func(fams map[string]*dto.MetricFamily) bool {
		_, ok := restarts(fams)
		return up(fams, live.CollectSystemd) == 1 && up(fams, live.CollectCgroup) == 1 && up(fams, live.CollectCPU) == 1 && ok
	}
	readyz := func() (int, string) { return settled(t, base+"/readyz") }

	fams := until("every collector up", healthy)
	n, _ := restarts(fams)
	assert.Equal(t, 5.0, n)
	code, body := readyz()
	assert.Equal(t, http.StatusOK, code, body)

	t.Run("bus vanishes", func(t *testing.T) {
		b.Stop()
		fams := until("systemd down", func(f map[string]*dto.MetricFamily) bool { return up(f, live.CollectSystemd) == 0 })
		_, stale := restarts(fams)
		assert.False(t, stale, "no unit metric is served from before the bus vanished")
		assert.NotContains(t, fams, "amilint_unit_crashlooping")
		assert.Equal(t, 1.0, up(fams, live.CollectCgroup), "the other collectors run on")
		code, body := readyz()
		assert.Equal(t, http.StatusServiceUnavailable, code)
		assert.Contains(t, body, "systemd")
		code, body = settled(t, base+"/healthz")
		assert.Equal(t, http.StatusOK, code, "alive: restarting the exporter fixes nothing: %s", body)
	})
	t.Run("bus comes back", func(t *testing.T) {
		b.SetUnits(units(8))
		b.Start()
		fams := until("systemd up with fresh values", func(f map[string]*dto.MetricFamily) bool {
			n, ok := restarts(f)
			return healthy(f) && ok && n == 8
		})
		assert.Equal(t, 1.0, up(fams, live.CollectSystemd))
	})
	t.Run("bus restarts between audits", func(t *testing.T) {
		b.Stop()
		b.SetUnits(units(11))
		b.Start()
		until("systemd up again, with the restarted manager's values", func(f map[string]*dto.MetricFamily) bool {
			n, ok := restarts(f)
			return healthy(f) && ok && n == 11
		})
	})
	t.Run("proc denies a file", func(t *testing.T) {
		for _, tc := range []struct {
			file, collector string
			gone            []string // metric families that must not be served meanwhile
		}{
			{"proc/cgroups", live.CollectCgroup, []string{"amilint_memcg_tracked", "amilint_memcg_zombies"}},
			{"proc/stat", live.CollectCPU, []string{"amilint_core_busy_ratio"}},
		} {
			fault.set([]string{tc.file}, "")
			fams := until(tc.file+" denied: "+tc.collector+" down", func(f map[string]*dto.MetricFamily) bool { return up(f, tc.collector) == 0 })
			for _, g := range tc.gone {
				assert.NotContains(t, fams, g, "%s is not served from before %s was denied", g, tc.file)
			}
			code, body := readyz()
			assert.Equal(t, http.StatusServiceUnavailable, code)
			assert.Contains(t, body, tc.collector)
			assert.Contains(t, body, "permission denied")
			fault.set(nil, "")
			until(tc.file+" readable again: every collector up", healthy)
		}
	})
	t.Run("cgroups vanish while walked", func(t *testing.T) {
		fams := until("cgroup up", healthy)
		mem := "sys/fs/cgroup/memory"
		if _, err := os.Stat("/" + mem); err != nil {
			mem = "sys/fs/cgroup" // a cgroup v2 only host
		}
		// Real churn as well, where the test may make cgroups.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		if os.Geteuid() == 0 {
			// Other packages' tests count the machine's memory cgroups.
			cgrouptest.Lock(t)
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					d := fmt.Sprintf("/%s/amilint-churn-%d-%d", mem, os.Getpid(), i%8)
					if err := os.Mkdir(d, 0o755); err == nil {
						_ = os.Remove(d)
					}
				}
			})
		}
		fault.set(nil, mem)
		last := value(t, fams, "amilint_last_audit_timestamp_seconds", nil)
		for audits := 0; audits < 10; {
			fams, _ := scrape(t, base)
			if at := value(t, fams, "amilint_last_audit_timestamp_seconds", nil); at != last {
				last = at
				audits++
				assert.Equal(t, 1.0, up(fams, live.CollectCgroup), "a cgroup removed while walked is not a failure")
			}
			time.Sleep(20 * time.Millisecond)
		}
		fault.set(nil, "")
		close(stop)
		wg.Wait()
	})
}

// TestNoStaleFacts: nothing old is served as current. An audit that
// fails whole leaves the last good result served, marked stale
// (amilint_audit_stale 1, /readyz says why); one that hangs is marked
// stale once no audit ended for three intervals, and is cut off, counted
// as a failure, rather than stall the exporter.
func TestNoStaleFacts(t *testing.T) {
	good := &live.Facts{Collectors: []string{live.CollectCgroup, live.CollectSystemd},
		Cgroups: &live.Cgroups{Memory: &cgroup.Memory{Version: 1, Tracked: 70000, Present: 240, Zombies: 69760}}}
	var mu sync.Mutex
	mode := "good"
	setMode := func(m string) { mu.Lock(); mode = m; mu.Unlock() }
	audit := func(ctx context.Context) (*live.Facts, []finding.Finding, error) {
		mu.Lock()
		m := mode
		mu.Unlock()
		switch m {
		case "fail":
			return nil, nil, errors.New("host root unreadable")
		case "hang":
			<-ctx.Done() // a bus that stopped answering
			return nil, nil, ctx.Err()
		}
		return good, []finding.Finding{{RuleID: live.RuleMemcgZombies, Severity: finding.High}}, nil
	}
	stale := func(fams map[string]*dto.MetricFamily) float64 { return value(t, fams, "amilint_audit_stale", nil) }

	e := metrics.New(audit, time.Hour, nil)
	base := serve(t, e)
	waitHealthy(t, base)
	fams, _ := scrape(t, base)
	assert.Equal(t, 69760.0, value(t, fams, "amilint_memcg_zombies", nil))
	assert.Equal(t, 0.0, stale(fams))

	setMode("fail")
	e.Refresh(context.Background())
	fams, _ = scrape(t, base)
	assert.Equal(t, 1.0, stale(fams), "the earlier result is served marked stale")
	assert.Equal(t, 0.0, value(t, fams, "amilint_audit_success", nil))
	assert.Equal(t, 69760.0, value(t, fams, "amilint_memcg_zombies", nil), "the earlier values are what is served")
	assert.Less(t, value(t, fams, "amilint_last_success_timestamp_seconds", nil), value(t, fams, "amilint_last_audit_timestamp_seconds", nil),
		"the served values are dated by the audit that produced them, before the last one")
	code, body := get(t, base+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, string(body), "host root unreadable")
	assert.Contains(t, string(body), "(stale)")
	code, _ = get(t, base+"/healthz")
	assert.Equal(t, http.StatusOK, code, "alive: audits are running")

	// The next good audit clears it.
	setMode("good")
	e.Refresh(context.Background())
	fams, _ = scrape(t, base)
	assert.Equal(t, 0.0, stale(fams))
	assert.Equal(t, 1.0, value(t, fams, "amilint_audit_success", nil))
	assert.Equal(t, value(t, fams, "amilint_last_success_timestamp_seconds", nil), value(t, fams, "amilint_last_audit_timestamp_seconds", nil))
	code, body = get(t, base+"/readyz")
	assert.Equal(t, http.StatusOK, code, string(body))

	// A hung audit: marked stale once three intervals passed with no
	// audit ending, then cut off and counted.
	setMode("good")
	h := metrics.New(audit, 20*time.Millisecond, nil)
	hb := serve(t, h)
	waitHealthy(t, hb)
	setMode("hang")
	require.Eventually(t, func() bool {
		fams, _ := scrape(t, hb)
		return stale(fams) == 1
	}, 10*time.Second, 10*time.Millisecond, "a result over three intervals old is marked stale while an audit hangs")
	require.Eventually(t, func() bool {
		fams, _ := scrape(t, hb)
		return value(t, fams, "amilint_audit_failures_total", map[string]string{"reason": metrics.ReasonError}) >= 1
	}, time.Minute, 50*time.Millisecond, "the hung audit is cut off and counted")
	// The audit hanging now, if one started before the bus answered
	// again, is cut off in its turn; the one after it is fresh.
	setMode("good")
	require.Eventually(t, func() bool {
		fams, _ := scrape(t, hb)
		return stale(fams) == 0 && value(t, fams, "amilint_audit_success", nil) == 1
	}, time.Minute, 10*time.Millisecond, "the audit after the hang ends serves fresh values again")
}
