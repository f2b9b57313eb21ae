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
	b, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		tb.Fatalf("read /proc/cgroups: %v", err)
	}
	cs, err := cgroup.ParseCgroups(b)
	if err != nil {
		tb.Fatalf("parse /proc/cgroups: %v", err)
	}
	return cs["memory"].NumCgroups
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

func begin(tb testing.TB) *Zombies {
	tb.Helper()
	z := &Zombies{Hierarchy: Hierarchy(tb), Dir: tb.TempDir()}
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
	end := time.Now().Add(timeout)
	last, still := -1, 0
	for time.Now().Before(end) {
		b, err := os.ReadFile("/proc/cgroups")
		if err != nil {
			return fmt.Errorf("read /proc/cgroups: %w", err)
		}
		cs, err := cgroup.ParseCgroups(b)
		if err != nil {
			return fmt.Errorf("parse /proc/cgroups: %w", err)
		}
		n := cs["memory"].NumCgroups
		if n <= z.base {
			return nil
		}
		if n == last {
			still++
		} else {
			still = 0
		}
		if still >= 5 {
			return nil
		}
		last = n
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}
