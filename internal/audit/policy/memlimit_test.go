package policy

import (
	"context"
	"errors"
	"io/fs"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// files is a fake /proc and /sys: a path's content, missing otherwise.
type files map[string]string

func (f files) read(name string) ([]byte, error) {
	if s, ok := f[name]; ok {
		return []byte(s), nil
	}
	return nil, fs.ErrNotExist
}

const meminfo24G = "MemTotal:       25165824 kB\nMemFree:        1000 kB\n"

func TestDefaultMemory(t *testing.T) {
	for name, c := range map[string]struct {
		files   files
		goLimit int64
		want    uint64
	}{
		"a large machine: the cap":          {files{"/proc/meminfo": meminfo24G}, math.MaxInt64, MaxDefaultMemory},
		"a small machine: a quarter of RAM": {files{"/proc/meminfo": "MemTotal: 2097152 kB\n"}, math.MaxInt64, 512 << 20},
		"cgroup v2 in a pod (cgroup namespace)": {files{
			"/proc/meminfo": meminfo24G, "/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/memory.max": "134217728\n",
		}, math.MaxInt64, 32 << 20},
		"cgroup v2: a parent's limit": {files{
			"/proc/meminfo": meminfo24G, "/proc/self/cgroup": "0::/kubepods/pod1/ctr\n",
			"/sys/fs/cgroup/kubepods/pod1/ctr/memory.max": "max\n", "/sys/fs/cgroup/kubepods/pod1/memory.max": "268435456\n",
			"/sys/fs/cgroup/kubepods/memory.max": "max\n",
		}, math.MaxInt64, 64 << 20},
		"cgroup v2 under a hybrid mount": {files{
			"/proc/meminfo": meminfo24G, "/proc/self/cgroup": "4:memory:/\n0::/ci\n", "/sys/fs/cgroup/unified/ci/memory.max": "1073741824\n",
		}, math.MaxInt64, 256 << 20},
		"cgroup v1: the hierarchical limit": {files{
			"/proc/meminfo": meminfo24G, "/proc/self/cgroup": "9:name=systemd:/\n4:cpu,memory:/runner/job\n",
			"/sys/fs/cgroup/memory/runner/job/memory.stat": "cache 0\nhierarchical_memory_limit 3221225472\ntotal_rss 0\n",
		}, math.MaxInt64, 768 << 20},
		"cgroup v1 in a container sharing the host's namespace": {files{
			"/proc/meminfo": meminfo24G, "/proc/self/cgroup": "4:memory:/docker/0123abcd\n",
			"/sys/fs/cgroup/memory/memory.stat": "hierarchical_memory_limit 1073741824\n",
		}, math.MaxInt64, 256 << 20},
		"cgroup v1 without a limit": {files{
			"/proc/meminfo": meminfo24G, "/proc/self/cgroup": "4:memory:/\n",
			"/sys/fs/cgroup/memory/memory.stat": "hierarchical_memory_limit 9223372036854771712\n",
		}, math.MaxInt64, MaxDefaultMemory},
		"GOMEMLIMIT below the rest": {files{"/proc/meminfo": meminfo24G}, 400 << 20, 100 << 20},
		"nothing readable: the cap": {files{}, math.MaxInt64, MaxDefaultMemory},
		"garbage files: ignored": {files{
			"/proc/meminfo": "MemTotal: lots kB\n", "/proc/self/cgroup": "nonsense\n0::relative\n",
			"/sys/fs/cgroup/memory.max": "-5\n",
		}, math.MaxInt64, MaxDefaultMemory},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, c.want, defaultMemory(c.files.read, c.goLimit))
		})
	}
	assert.LessOrEqual(t, DefaultMemory(), uint64(MaxDefaultMemory))
	assert.Positive(t, DefaultMemory())
}

// TestAutoMemory: AutoMemory is the machine's default, worked out when
// the engine is prepared; other budgets are themselves.
func TestAutoMemory(t *testing.T) {
	assert.Equal(t, DefaultMemory(), memoryBudget(AutoMemory))
	assert.Equal(t, uint64(0), memoryBudget(0))
	assert.Equal(t, uint64(5<<20), memoryBudget(5<<20))
	e, err := New(context.Background(), Config{Memory: AutoMemory})
	require.NoError(t, err)
	assert.Equal(t, DefaultMemory(), e.budget.memory)
}

// TestPartsFailed: a budget that stopped both parts of a split evaluation
// names both packages; a single failure is itself.
func TestPartsFailed(t *testing.T) {
	a := &MemoryError{Package: "package amilint.rules.exposure", Files: []string{"embedded:e.rego"}, Limit: 1 << 20}
	b := &MemoryError{Package: "package amilint.rules.missing_exec", Files: []string{"embedded:m.rego"}, Limit: 1 << 20}
	err := partsFailed([]error{a, b})
	var me *MemoryError
	if assert.ErrorAs(t, err, &me) {
		assert.Equal(t, "package amilint.rules.exposure and package amilint.rules.missing_exec", me.Package)
		assert.Equal(t, []string{"embedded:e.rego", "embedded:m.rego"}, me.Files)
	}
	assert.Equal(t, "evaluate policies: package amilint.rules.exposure and package amilint.rules.missing_exec (embedded:e.rego, embedded:m.rego) ran out of memory: held more than 1MiB of heap (--policy-memory)", err.Error())

	ta := &TimeoutError{Package: "package x", Limit: time.Second}
	tb := &TimeoutError{Package: "package y", Limit: time.Second}
	var te *TimeoutError
	if assert.ErrorAs(t, partsFailed([]error{ta, nil, tb}), &te) {
		assert.Equal(t, "package x and package y", te.Package)
	}
	assert.Same(t, a, partsFailed([]error{nil, a}))
	plain := errors.New("boom")
	assert.Same(t, plain, partsFailed([]error{plain, a}))
	assert.NoError(t, partsFailed([]error{nil, nil}))
}
