// Package cgrouptest makes real zombie memory cgroups on this machine's
// cgroup v1 memory hierarchy, for tests and benchmarks of package cgroup
// and of the live auditor, and removes them afterwards. It needs root and
// a writable v1 memory hierarchy; without them the test
// stops as package testenv says (a failure under CI=true).
package cgrouptest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/host/cgroup"
)

// Zombies are memory cgroups made and removed, kept alive by the page
// cache their processes wrote to Files.
type Zombies struct {
	// Hierarchy is the v1 memory hierarchy's mount point.
	Hierarchy string
	// Dir holds the files whose page cache pins the zombies.
	Dir string
	// Made is how many were made.
	Made int
	// Refused is the kernel's refusal to make more, when it stopped
	// MakeWithThread early (ENOSPC: no memcg id left).
	Refused error
	// base is the kernel's count of memory cgroups before any was made.
	base int
}

// Hierarchy returns the mount point of this host's v1 memory hierarchy,
// found in /proc/self/mountinfo, or skips tb when there is none or it is
// not writable by this process.
func Hierarchy(tb testing.TB) string {
	tb.Helper()
	testenv.Root(tb, "making memory cgroups")
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		tb.Fatalf("read mountinfo: %v", err)
	}
	ms, err := cgroup.ParseMountInfo(b)
	if err != nil {
		tb.Fatalf("parse mountinfo: %v", err)
	}
	for _, m := range ms {
		if m.Version != 1 {
			continue
		}
		for _, c := range m.Controllers {
			if c == "memory" {
				if unix.Access(m.Point, unix.W_OK) != nil {
					testenv.Missing(tb, "memory hierarchy %s is not writable", m.Point)
				}
				return m.Point
			}
		}
	}
	testenv.Missing(tb, "no cgroup v1 memory hierarchy on this host")
	return ""
}

// Tracked returns /proc/cgroups' num_cgroups for memory.
func Tracked(tb testing.TB) int {
	tb.Helper()
	n, err := tracked()
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// MakeWithProcesses makes n zombies exactly as an operator would by hand:
// for each, mkdir a memory cgroup, run `sh` that joins it and writes size
// bytes of page cache to a file, then rmdir the cgroup. It registers the
// cleanup with tb.
func MakeWithProcesses(tb testing.TB, n, size int) *Zombies {
	tb.Helper()
	z := begin(tb)
	for i := range n {
		cg := filepath.Join(z.Hierarchy, fmt.Sprintf("amilint-z%d-%d", os.Getpid(), i))
		if err := os.Mkdir(cg, 0o755); err != nil {
			tb.Fatalf("make %d: %v", i, err)
		}
		file := filepath.Join(z.Dir, strconv.Itoa(i))
		script := fmt.Sprintf(`echo $$ > %s/cgroup.procs && head -c %d /dev/urandom > %s`, cg, size, file)
		cmd := exec.Command("sh", "-c", script)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			_ = os.Remove(cg)
			tb.Fatalf("make %d: sh: %v: %s", i, err, stderr.String())
		}
		if err := os.Remove(cg); err != nil {
			tb.Fatalf("make %d: rmdir: %v", i, err)
		}
		z.Made++
	}
	return z
}

// MakeWithThread makes n zombies without forking, for the incident's
// scale: one locked OS thread moves itself (cgroup v1 "tasks" takes a
// thread id) into a new memory cgroup, writes size bytes of page cache,
// moves back to the root and removes the cgroup. The kernel charges the
// page cache to the thread's memcg, so each removed cgroup stays tracked,
// exactly as with MakeWithProcesses. It stops early when deadline passes
// or the kernel refuses more memory cgroups (Refused), and reports how
// many it made.
func MakeWithThread(tb testing.TB, n, size int, deadline time.Time) *Zombies {
	tb.Helper()
	z := begin(tb)
	errc := make(chan error, 1)
	go func() {
		// The thread ends with this goroutine (no UnlockOSThread), so a
		// thread left in a cgroup by an error is never reused.
		runtime.LockOSThread()
		tid := []byte(strconv.Itoa(unix.Gettid()))
		rootTasks := filepath.Join(z.Hierarchy, "tasks")
		data := bytes.Repeat([]byte{'z'}, size)
		for i := range n {
			if i%256 == 0 && time.Now().After(deadline) {
				break
			}
			cg := filepath.Join(z.Hierarchy, fmt.Sprintf("amilint-t%d-%d", os.Getpid(), i))
			if err := os.Mkdir(cg, 0o755); err != nil {
				if errors.Is(err, unix.ENOSPC) {
					// The kernel's memcg id space (64k) is full.
					z.Refused = err
					break
				}
				errc <- fmt.Errorf("make %d: %w", i, err)
				return
			}
			err := os.WriteFile(filepath.Join(cg, "tasks"), tid, 0)
			if err == nil {
				err = os.WriteFile(filepath.Join(z.Dir, strconv.Itoa(i)), data, 0o600)
				if err2 := os.WriteFile(rootTasks, tid, 0); err == nil {
					err = err2
				}
			}
			if err2 := os.Remove(cg); err == nil {
				err = err2
			}
			if err != nil {
				errc <- fmt.Errorf("make %d: %w", i, err)
				return
			}
			z.Made++
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		tb.Fatalf("make zombies: %v (made %d)", err, z.Made)
	}
	return z
}

// lockFile is the machine-wide lock of the tests that make memory
// cgroups or count how many the kernel tracks (Exclusive).
const lockFile = "/run/amilint-memcg-tests.lock"

// lockWait is how long Exclusive waits for another test process.
const lockWait = 5 * time.Minute

var (
	heldMu sync.Mutex
	held   = map[testing.TB]bool{}
)

// Exclusive returns Hierarchy(tb) once tb holds Lock.
func Exclusive(tb testing.TB) string {
	tb.Helper()
	h := Hierarchy(tb)
	Lock(tb)
	return h
}

// Lock makes tb hold, until it ends, the machine-wide lock of the tests
// that make memory cgroups or count them. The kernel's count is the
// machine's: `go test ./...` runs two packages at once, and one package's
// cgroups would be counted as another's (40 zombies made were once
// counted as 339 while a test of the exporter churned cgroups). A test
// that counts takes it before its first reading (Exclusive); the makers
// here take it themselves; a second call by tb does nothing. A subtest
// of a holder must not call it: the lock is a file's, and the subtest's
// call would wait on its own process until lockWait runs out.
func Lock(tb testing.TB) {
	tb.Helper()
	heldMu.Lock()
	already := held[tb]
	heldMu.Unlock()
	if already {
		return
	}
	f, err := os.OpenFile(lockFile, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		tb.Fatalf("memory cgroup test lock: %v", err)
	}
	for deadline := time.Now().Add(lockWait); ; time.Sleep(50 * time.Millisecond) {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			tb.Fatalf("memory cgroup test lock %s: %v (waited up to %s)", lockFile, err, lockWait)
		}
	}
	heldMu.Lock()
	held[tb] = true
	heldMu.Unlock()
	base, baseErr := tracked()
	tb.Cleanup(func() {
		// Cgroups removed under the lock may still be counted a moment
		// (an emptied one about a second): the next holder's first
		// reading would count them, and its second see them go.
		if baseErr == nil {
			if err := settle(base, 30*time.Second, 2*time.Second); err != nil {
				tb.Logf("memory cgroup test lock: %v", err)
			}
		}
		heldMu.Lock()
		delete(held, tb)
		heldMu.Unlock()
		f.Close() // releases the lock
	})
}

func begin(tb testing.TB) *Zombies {
	tb.Helper()
	z := &Zombies{Hierarchy: Exclusive(tb), Dir: tb.TempDir()}
	z.base = Tracked(tb)
	tb.Cleanup(func() {
		if err := z.Drain(2 * time.Minute); err != nil {
			tb.Logf("drain zombies: %v", err)
		}
	})
	return z
}

// Drain removes the files pinning the zombies, drops the page cache and
// waits, at most timeout, until the kernel's count of memory cgroups is
// back to what it was before, or has not moved for a second. It returns
// an error only if the files cannot be removed.
func (z *Zombies) Drain(timeout time.Duration) error {
	ents, err := os.ReadDir(z.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("list %s: %w", z.Dir, err)
	}
	for _, e := range ents {
		if err := os.Remove(filepath.Join(z.Dir, e.Name())); err != nil {
			return fmt.Errorf("remove %s: %w", e.Name(), err)
		}
	}
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
		return fmt.Errorf("drop caches: %w", err)
	}
	return settle(z.base, timeout, time.Second)
}

// tracked is /proc/cgroups' num_cgroups for memory.
func tracked() (int, error) {
	b, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		return 0, fmt.Errorf("read /proc/cgroups: %w", err)
	}
	cs, err := cgroup.ParseCgroups(b)
	if err != nil {
		return 0, fmt.Errorf("parse /proc/cgroups: %w", err)
	}
	return cs["memory"].NumCgroups, nil
}

// settle waits, at most timeout, until the kernel's count of memory
// cgroups is back to base, or has not moved for quiet.
func settle(base int, timeout, quiet time.Duration) error {
	const every = 100 * time.Millisecond
	end := time.Now().Add(timeout)
	last, still := -1, 0
	for time.Now().Before(end) {
		n, err := tracked()
		if err != nil {
			return err
		}
		if n <= base {
			return nil
		}
		if n == last {
			still++
		} else {
			still = 0
		}
		if time.Duration(still)*every >= quiet {
			return nil
		}
		last = n
		time.Sleep(every)
	}
	return nil
}
