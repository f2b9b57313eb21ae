package cgroup_test

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/host/cgroup"
	"github.com/amilint/amilint/internal/host/cgroup/cgrouptest"
)

// incidentCgroups is /proc/cgroups as the incident's Ubuntu 20.04 host
// would print it: 68,680 memory cgroups tracked.
const incidentCgroups = `#subsys_name	hierarchy	num_cgroups	enabled
cpuset	8	240	1
cpu	4	240	1
cpuacct	4	240	1
blkio	11	240	1
memory	6	68680	1
devices	5	240	1
freezer	9	2	1
net_cls	3	2	1
perf_event	10	2	1
net_prio	3	2	1
hugetlb	2	2	1
pids	7	245	1
rdma	12	1	1
`

const hybridMountinfo = `22 27 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
23 27 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:13 - proc proc rw
31 22 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
32 31 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
33 31 0:28 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
38 31 0:33 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:19 - cgroup cgroup rw,memory
39 31 0:34 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:20 - cgroup cgroup rw,cpu,cpuacct
`

// incidentFS is a v1 host with 68,680 memory cgroups tracked and 240
// directories in the memory hierarchy.
func incidentFS() fstest.MapFS {
	m := fstest.MapFS{
		"proc/cgroups":                             {Data: []byte(incidentCgroups)},
		"proc/self/mountinfo":                      {Data: []byte(hybridMountinfo)},
		"sys/fs/cgroup/unified/cgroup.stat":        {Data: []byte("nr_descendants 0\nnr_dying_descendants 0\n")},
		"sys/fs/cgroup/memory/memory.stat":         {Data: []byte("cache 0\n")},
		"sys/fs/cgroup/memory/cgroup.procs":        {Data: []byte("1\n")},
		"sys/fs/cgroup/memory/system.slice":        {Mode: fs.ModeDir},
		"sys/fs/cgroup/memory/kubepods":            {Mode: fs.ModeDir},
		"sys/fs/cgroup/memory/user.slice":          {Mode: fs.ModeDir},
		"sys/fs/cgroup/memory/docker":              {Mode: fs.ModeDir},
		"sys/fs/cgroup/memory/kubepods/besteffort": {Mode: fs.ModeDir},
	}
	// 240 directories in all: the root, the five above and 234 pods.
	for i := range 234 {
		m["sys/fs/cgroup/memory/kubepods/besteffort/pod"+strings.Repeat("x", 1)+strconv.Itoa(i)] = &fstest.MapFile{Mode: fs.ModeDir}
	}
	return m
}

// v2FS is a pure cgroup v2 host whose ecs.service leaks dying cgroups.
func v2FS() fstest.MapFS {
	stat := func(desc, dying int) *fstest.MapFile {
		return &fstest.MapFile{Data: []byte("nr_descendants " + strconv.Itoa(desc) + "\nnr_dying_descendants " + strconv.Itoa(dying) + "\n")}
	}
	return fstest.MapFS{
		"proc/cgroups":                                             {Data: []byte("#subsys_name\thierarchy\tnum_cgroups\tenabled\ncpu\t0\t60\t1\nmemory\t0\t1260\t1\npids\t0\t60\t1\n")},
		"proc/self/mountinfo":                                      {Data: []byte("25 30 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n")},
		"sys/fs/cgroup/cgroup.stat":                                stat(58, 1202),
		"sys/fs/cgroup/memory.stat":                                {Data: []byte("anon 0\n")},
		"sys/fs/cgroup/system.slice/cgroup.stat":                   stat(30, 1200),
		"sys/fs/cgroup/system.slice/ecs.service/cgroup.stat":       stat(1, 1190),
		"sys/fs/cgroup/system.slice/ecs.service/agent/cgroup.stat": stat(0, 0),
		"sys/fs/cgroup/system.slice/ssh.service/cgroup.stat":       stat(0, 10),
		"sys/fs/cgroup/user.slice/cgroup.stat":                     stat(27, 2),
		"sys/fs/cgroup/init.scope/cgroup.stat":                     stat(0, 0),
	}
}

// recordFS records every name opened or listed through it.
type recordFS struct {
	fs.FS
	mu    sync.Mutex
	names []string
}

func (r *recordFS) Open(name string) (fs.File, error) {
	r.mu.Lock()
	r.names = append(r.names, name)
	r.mu.Unlock()
	return r.FS.Open(name)
}

func (r *recordFS) ReadDir(name string) ([]fs.DirEntry, error) {
	r.mu.Lock()
	r.names = append(r.names, name)
	r.mu.Unlock()
	return fs.ReadDir(r.FS, name)
}

func (r *recordFS) opened() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.names...)
}

func noMemoryStat(t *testing.T, names []string) {
	t.Helper()
	for _, n := range names {
		require.NotContains(t, n, "memory.stat", "the collector opened %s", n)
	}
}

func TestReadFixtures(t *testing.T) {
	t.Run("v1 incident", func(t *testing.T) {
		rec := &recordFS{FS: incidentFS()}
		h, err := (&cgroup.Reader{FS: rec}).Read()
		require.NoError(t, err)
		require.NotNil(t, h.Memory)
		assert.Equal(t, cgroup.Memory{Version: 1, Hierarchy: "/sys/fs/cgroup/memory", Tracked: 68680, Present: 240, Zombies: 68440}, *h.Memory)
		require.NotNil(t, h.Unified)
		assert.Equal(t, 0, h.Unified.Dying)
		noMemoryStat(t, rec.opened())
	})
	t.Run("v2 names the leaking service", func(t *testing.T) {
		rec := &recordFS{FS: v2FS()}
		h, err := (&cgroup.Reader{FS: rec}).Read()
		require.NoError(t, err)
		require.NotNil(t, h.Memory)
		assert.Equal(t, 2, h.Memory.Version)
		assert.Equal(t, 1202, h.Memory.Zombies)
		assert.Equal(t, 1260, h.Memory.Tracked)
		assert.Equal(t, 7, h.Memory.Present)
		assert.Equal(t, "system.slice/ecs.service", h.Unified.Leaking)
		assert.Equal(t, []cgroup.Subtree{
			{Path: "system.slice", Dying: 1200, Descendants: 30},
			{Path: "system.slice/ecs.service", Dying: 1190, Descendants: 1},
			{Path: "system.slice/ssh.service", Dying: 10, Descendants: 0},
			{Path: "user.slice", Dying: 2, Descendants: 27},
		}, h.Unified.Subtrees)
		noMemoryStat(t, rec.opened())
	})
	t.Run("spread leak names the slice", func(t *testing.T) {
		m := v2FS()
		m["sys/fs/cgroup/system.slice/ecs.service/cgroup.stat"] = &fstest.MapFile{Data: []byte("nr_descendants 1\nnr_dying_descendants 500\n")}
		m["sys/fs/cgroup/system.slice/ssh.service/cgroup.stat"] = &fstest.MapFile{Data: []byte("nr_descendants 1\nnr_dying_descendants 500\n")}
		h, err := (&cgroup.Reader{FS: m}).Read()
		require.NoError(t, err)
		assert.Equal(t, "system.slice", h.Unified.Leaking)
	})
}

func TestReadErrors(t *testing.T) {
	tests := map[string]func(fstest.MapFS){
		"no proc/cgroups": func(m fstest.MapFS) { delete(m, "proc/cgroups") },
		"corrupt cgroups": func(m fstest.MapFS) { m["proc/cgroups"] = &fstest.MapFile{Data: []byte("memory x y z\n")} },
		"no mountinfo":    func(m fstest.MapFS) { delete(m, "proc/self/mountinfo") },
		"memory not mounted": func(m fstest.MapFS) {
			m["proc/self/mountinfo"] = &fstest.MapFile{Data: []byte(strings.Split(hybridMountinfo, "\n")[0] + "\n")}
		},
		"corrupt stat": func(m fstest.MapFS) {
			m["sys/fs/cgroup/unified/cgroup.stat"] = &fstest.MapFile{Data: []byte("nr_dying_descendants -1\n")}
		},
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			m := incidentFS()
			mutate(m)
			_, err := (&cgroup.Reader{FS: m}).Read()
			require.Error(t, err)
		})
	}
}

func TestParseMountInfoEscapes(t *testing.T) {
	ms, err := cgroup.ParseMountInfo([]byte(`40 31 0:37 / /sys/fs/cgroup/my\040mem rw - cgroup cgroup rw,memory,nosuid` + "\n"))
	require.NoError(t, err)
	require.Len(t, ms, 1)
	assert.Equal(t, "/sys/fs/cgroup/my mem", ms[0].Point)
	assert.Equal(t, []string{"memory"}, ms[0].Controllers)
}

// TestReadHost reads this machine's cgroups for real.
func TestReadHost(t *testing.T) {
	rec := &recordFS{FS: os.DirFS("/")}
	h, err := (&cgroup.Reader{FS: rec}).Read()
	require.NoError(t, err)
	require.NotNil(t, h.Memory, "this machine has a memory controller")
	assert.Positive(t, h.Memory.Present)
	assert.GreaterOrEqual(t, h.Memory.Tracked, 1)
	noMemoryStat(t, rec.opened())
}

// TestRealZombies makes real zombie memory cgroups on this machine's v1
// memory hierarchy (a page-cache-holding process in a cgroup removed after
// it exits leaves a zombie), and checks the reader
// counts them, then that they drain when their page cache is dropped.
func TestRealZombies(t *testing.T) {
	cgrouptest.Exclusive(t) // the count is the machine's
	const n = 40
	r := cgroup.NewReader("/")
	before, err := r.Read()
	require.NoError(t, err)
	require.NotNil(t, before.Memory)
	require.Equal(t, 1, before.Memory.Version)

	z := cgrouptest.MakeWithProcesses(t, n, 64<<10)
	require.Equal(t, n, z.Made)

	after, err := r.Read()
	require.NoError(t, err)
	grew := after.Memory.Zombies - before.Memory.Zombies
	t.Logf("zombies %d -> %d (tracked %d -> %d, present %d -> %d)", before.Memory.Zombies, after.Memory.Zombies,
		before.Memory.Tracked, after.Memory.Tracked, before.Memory.Present, after.Memory.Present)
	// Other work on the machine may make or free memory cgroups meanwhile,
	// so the growth is ~n, not exactly n.
	assert.GreaterOrEqual(t, grew, n-n/10)
	assert.LessOrEqual(t, grew, n+n/2)

	require.NoError(t, z.Drain(time.Minute))
	drained, err := r.Read()
	require.NoError(t, err)
	t.Logf("after drain: zombies %d", drained.Memory.Zombies)
	assert.Less(t, drained.Memory.Zombies, after.Memory.Zombies-n/2, "dropping the page cache frees the zombies")
}

func FuzzParseCgroups(f *testing.F) {
	f.Add([]byte(incidentCgroups))
	f.Add([]byte("memory\t0\t1\t1\n"))
	f.Add([]byte("#x\n\nmemory 1 2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cs, err := cgroup.ParseCgroups(b)
		if err == nil {
			for _, c := range cs {
				require.GreaterOrEqual(t, c.NumCgroups, 0)
			}
		}
	})
}

func FuzzParseMountInfo(f *testing.F) {
	f.Add([]byte(hybridMountinfo))
	f.Add([]byte(`1 2 3:4 / /a\040b rw - cgroup2 x rw` + "\n"))
	f.Add([]byte("1 2 - \n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = cgroup.ParseMountInfo(b)
	})
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("nr_descendants 3\nnr_dying_descendants 7\n"))
	f.Add([]byte("x\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := cgroup.ParseStat(b)
		if err == nil {
			for _, v := range st {
				require.GreaterOrEqual(t, v, 0)
			}
		}
	})
}

// TestStraceNoMemoryStat runs one host reading in a child process (this
// test binary) under strace and checks, from the kernel's side, that no
// open(2) of any kind names a memory.stat file.
func TestStraceNoMemoryStat(t *testing.T) {
	if os.Getenv("AMILINT_STRACE_CHILD") == "1" {
		_, err := cgroup.NewReader("/").Read()
		require.NoError(t, err)
		return
	}
	strace := testenv.Tool(t, "strace", "strace")
	trace := filepath.Join(t.TempDir(), "trace")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, strace, "-f", "-e", "trace=open,openat,openat2", "-o", trace,
		os.Args[0], "-test.run=^TestStraceNoMemoryStat$", "-test.count=1")
	cmd.Env = append(os.Environ(), "AMILINT_STRACE_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	b, err := os.ReadFile(trace)
	require.NoError(t, err)
	assert.Contains(t, string(b), "/proc/cgroups", "the trace saw the reader's opens")
	assert.Contains(t, string(b), "cgroup.stat")
	assert.NotContains(t, string(b), "memory.stat")
}

// goneFS is fs with the cgroups below gone as a concurrent rmdir leaves
// them to a walker: a listing fails with ENOENT, a cgroup.stat opened just
// before with ENODEV.
type goneFS struct {
	fs.FS
	gone string
}

func (g goneFS) Open(name string) (fs.File, error) {
	if strings.HasPrefix(name, g.gone) {
		if strings.HasSuffix(name, "/cgroup.stat") {
			return nil, &fs.PathError{Op: "read", Path: name, Err: syscall.ENODEV}
		}
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return g.FS.Open(name)
}

// TestCgroupRemovedWhileWalked: a cgroup removed while the hierarchy is
// walked is not a failure of the reading (ENOENT or ENODEV); the
// hierarchy's own root gone is.
func TestCgroupRemovedWhileWalked(t *testing.T) {
	for _, gone := range []string{"sys/fs/cgroup/system.slice/ecs.service", "sys/fs/cgroup/user.slice"} {
		h, err := (&cgroup.Reader{FS: goneFS{v2FS(), gone}}).Read()
		require.NoError(t, err, gone)
		require.NotNil(t, h.Unified)
		assert.Equal(t, 1202, h.Unified.Dying)
	}
	_, err := (&cgroup.Reader{FS: goneFS{v2FS(), "sys/fs/cgroup/cgroup.stat"}}).Read()
	assert.ErrorIs(t, err, syscall.ENODEV, "the root's statistics are needed")
}
