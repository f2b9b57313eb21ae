package policy

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"path"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultMemory is the budget the CLI gives an evaluation unless told
// otherwise: a quarter of the memory the process may use, at most
// MaxDefaultMemory. A policy that runs away is then stopped by three
// quarters of it at most (a step of OPA can double what the heap holds
// before the evaluation stops), short of the kernel killing the process:
// on a small
// Packer guest, in a pod with a memory limit, under a CI runner's cgroup.
// The catalog holds 6 to 8 KiB a unit (measured with --policy-memory: 16
// to 20 MiB on 2,500 units, 160 to 200 MiB on 25,000).
func DefaultMemory() uint64 {
	return defaultMemory(os.ReadFile, debug.SetMemoryLimit(-1))
}

// AutoMemory as Config.Memory is DefaultMemory(), worked out when the
// policies are prepared: a command that evaluates none (facts) reads no
// cgroup file for it.
const AutoMemory = math.MaxUint64

// memoryBudget is the budget Config.Memory names.
func memoryBudget(m uint64) uint64 {
	if m == AutoMemory {
		return DefaultMemory()
	}
	return m
}

func defaultMemory(readFile func(string) ([]byte, error), goLimit int64) uint64 {
	avail := uint64(math.MaxUint64)
	if n, ok := memTotal(readFile); ok {
		avail = n
	}
	if n, ok := cgroupLimit(readFile); ok {
		avail = min(avail, n)
	}
	if goLimit > 0 && goLimit < math.MaxInt64 {
		avail = min(avail, uint64(goLimit))
	}
	return min(avail/4, MaxDefaultMemory)
}

// memTotal is MemTotal of /proc/meminfo, in bytes.
func memTotal(readFile func(string) ([]byte, error)) (uint64, bool) {
	b, err := readFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 3 && f[0] == "MemTotal:" && f[2] == "kB" {
			n, err := strconv.ParseUint(f[1], 10, 64)
			if err != nil || n == 0 || n > math.MaxUint64>>10 {
				return 0, false
			}
			return n << 10, true
		}
	}
	return 0, false
}

// cgroupLimit is the lowest memory limit of the process's cgroups and
// their parents, cgroup v2 (memory.max) or v1 (the memory controller's
// hierarchical_memory_limit, which counts the parents'), in bytes; false
// when none is set.
func cgroupLimit(readFile func(string) ([]byte, error)) (uint64, bool) {
	b, err := readFile("/proc/self/cgroup")
	if err != nil {
		return 0, false
	}
	best, found := uint64(math.MaxUint64), false
	take := func(n uint64, ok bool) {
		// v1 writes "no limit" as the largest page-aligned int64.
		if ok && n > 0 && n < 1<<62 && n < best {
			best, found = n, true
		}
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// hierarchy-ID:controllers:path
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 || !strings.HasPrefix(f[2], "/") {
			continue
		}
		p := path.Clean(f[2])
		switch {
		case f[0] == "0" && f[1] == "":
			for _, mount := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
				for dir := p; ; dir = path.Dir(dir) {
					take(readLimit(readFile, path.Join(mount, dir, "memory.max")))
					if dir == "/" {
						break
					}
				}
			}
		case hasController(f[1], "memory"):
			// hierarchical_memory_limit is already the lowest of the
			// cgroup's and its parents': the first cgroup found up the
			// path is enough. Up to the mount's root, since in a container
			// that shares the host's cgroup namespace (Docker, a kubelet
			// on v1) the path is the host's and the mount is the
			// container's own cgroup.
			for dir := p; ; dir = path.Dir(dir) {
				n, ok := hierarchicalLimit(readFile, path.Join("/sys/fs/cgroup/memory", dir, "memory.stat"))
				if ok {
					take(n, true)
					break
				}
				if dir == "/" {
					break
				}
			}
		}
	}
	return best, found
}

// hasController reports whether the comma-separated list holds name.
func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// readLimit reads a limit file: a number of bytes, or "max".
func readLimit(readFile func(string) ([]byte, error), file string) (uint64, bool) {
	b, err := readFile(file)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}

// hierarchicalLimit reads hierarchical_memory_limit of a v1 memory.stat.
func hierarchicalLimit(readFile func(string) ([]byte, error), file string) (uint64, bool) {
	b, err := readFile(file)
	if err != nil {
		return 0, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "hierarchical_memory_limit "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
