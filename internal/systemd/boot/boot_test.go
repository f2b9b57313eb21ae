package boot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

func mfile(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s), Mode: 0o644} }
func mlink(target string) *fstest.MapFile {
	return &fstest.MapFile{Data: []byte(target), Mode: fs.ModeSymlink | 0o777}
}

const (
	lib = "usr/lib/systemd/system/"
	etc = "etc/systemd/system/"
)

// base is a minimal merged-/usr tree: default.target -> multi-user.target,
// which Requires basic.target, which Requires sysinit.target.
func base() fstest.MapFS {
	return fstest.MapFS{
		"lib":                        mlink("usr/lib"),
		lib + "default.target":       mlink("multi-user.target"),
		lib + "multi-user.target":    mfile("[Unit]\nRequires=basic.target\nAllowIsolate=yes\n"),
		lib + "basic.target":         mfile("[Unit]\nRequires=sysinit.target\n"),
		lib + "sysinit.target":       mfile("[Unit]\nDescription=sysinit\n"),
		lib + "rescue.target":        mfile("[Unit]\nDescription=rescue\n"),
		lib + "system.slice":         mfile("[Unit]\nDescription=system\n"),
		lib + "sockets.target":       mfile("[Unit]\nDescription=sockets\n"),
		lib + "getty@.service":       mfile("[Service]\nExecStart=/sbin/agetty %I\n"),
		lib + "autovt@.service":      mlink("getty@.service"),
		etc + "getty.target.wants/x": mfile(""),
	}
}

func with(m fstest.MapFS, kv ...any) fstest.MapFS {
	for i := 0; i < len(kv); i += 2 {
		name := kv[i].(string)
		if kv[i+1] == nil {
			delete(m, name)
			continue
		}
		m[name] = kv[i+1].(*fstest.MapFile)
	}
	return m
}

func load(t *testing.T, m fstest.MapFS) *Graph {
	t.Helper()
	g, err := Load(rootfs.New(m), 0)
	require.NoError(t, err)
	return g
}

const svc0 = "[Service]\nExecStart=/bin/true\n"

func TestBootSets(t *testing.T) {
	core := []string{"basic.target", "multi-user.target", "sysinit.target"}
	plus := func(extra ...string) []string {
		out := append(append([]string{}, core...), extra...)
		sort.Strings(out)
		return out
	}
	tests := []struct {
		name string
		fs   fstest.MapFS
		want []string
	}{
		{"core", base(), core},
		{"wants link", with(base(),
			lib+"a.service", mfile(svc0),
			etc+"multi-user.target.wants/a.service", mlink("/lib/systemd/system/a.service"),
		), plus("a.service")},
		{"wants link dangling still counts", with(base(),
			lib+"a.service", mfile(svc0),
			etc+"multi-user.target.wants/a.service", mlink("/nowhere"),
		), plus("a.service")},
		{"wants regular file ignored", with(base(),
			lib+"a.service", mfile(svc0),
			etc+"multi-user.target.wants/a.service", mfile(svc0),
		), core},
		{"wants link to /dev/null ignored", with(base(),
			lib+"a.service", mfile(svc0),
			etc+"multi-user.target.wants/a.service", mlink("/dev/null"),
		), core},
		{"masked by link", with(base(),
			lib+"a.service", mfile(svc0),
			etc+"a.service", mlink("/dev/null"),
			lib+"multi-user.target.wants/a.service", mlink("../a.service"),
		), core},
		{"masked by empty file", with(base(),
			etc+"a.service", mfile(""),
			etc+"multi-user.target.wants/a.service", mlink("../a.service"),
		), core},
		{"requires masked keeps the job, drops later wants", with(base(),
			etc+"a.service", mfile("[Unit]\nRequires=m.service\nWants=b.service\n"+svc0),
			etc+"b.service", mfile(svc0),
			etc+"m.service", mlink("/dev/null"),
			etc+"multi-user.target.wants/a.service", mlink("../a.service"),
		), plus("a.service")},
		{"requisite does not start", with(base(),
			etc+"a.service", mfile("[Unit]\nRequisite=b.service\n"+svc0),
			etc+"b.service", mfile(svc0),
			etc+"multi-user.target.wants/a.service", mlink("../a.service"),
		), plus("a.service")},
		{"partof and conflicts do not pull", with(base(),
			etc+"a.service", mfile("[Unit]\nPartOf=b.service\nConflicts=c.service\n"+svc0),
			etc+"b.service", mfile(svc0),
			etc+"c.service", mfile(svc0),
			etc+"multi-user.target.wants/a.service", mlink("../a.service"),
		), plus("a.service")},
		{"empty Wants= does not reset", with(base(),
			etc+"a.service", mfile("[Unit]\nWants=b.service\n"+svc0),
			etc+"a.service.d/x.conf", mfile("[Unit]\nWants=\n"),
			etc+"b.service", mfile(svc0),
			etc+"multi-user.target.wants/a.service", mlink("../a.service"),
		), plus("a.service", "b.service")},
		{"drop-in ExecStart reset keeps the unit valid", with(base(),
			etc+"a.service", mfile("[Service]\nExecStart=/bin/a\n"),
			etc+"a.service.d/x.conf", mfile("[Service]\nExecStart=\nExecStart=/bin/b\n"),
			etc+"multi-user.target.wants/a.service", mlink("../a.service"),
		), plus("a.service")},
		{"two ExecStart refused", with(base(),
			etc+"a.service", mfile("[Service]\nExecStart=/bin/a\n"),
			etc+"a.service.d/x.conf", mfile("[Service]\nExecStart=/bin/b\n"),
			etc+"multi-user.target.wants/a.service", mlink("../a.service"),
		), core},
		{"etc drop-in overrides lib drop-in of the same name", with(base(),
			etc+"a.service", mfile(svc0),
			lib+"a.service.d/x.conf", mfile("[Unit]\nWants=b.service\n"),
			etc+"a.service.d/x.conf", mfile("[Unit]\nDescription=override\n"),
			etc+"b.service", mfile(svc0),
			etc+"multi-user.target.wants/a.service", mlink("../a.service"),
		), plus("a.service")},
		{"socket starts, its service does not", with(base(),
			etc+"a.socket", mfile("[Socket]\nListenStream=/run/a\n"),
			etc+"a.service", mfile(svc0),
			etc+"sockets.target.wants/a.socket", mlink("../a.socket"),
			etc+"multi-user.target.wants/sockets.target", mlink("/lib/systemd/system/sockets.target"),
		), plus("a.socket", "sockets.target")},
		{"instance from template with alias name", with(base(),
			etc+"getty.target", mfile("[Unit]\nDescription=g\n"),
			etc+"getty.target.wants/autovt@tty1.service", mlink("/lib/systemd/system/getty@.service"),
			etc+"multi-user.target.wants/getty.target", mlink("../getty.target"),
		), plus("getty.target", "getty@tty1.service", "system-getty.slice")},
		{"alias cycle is not found", with(base(),
			etc+"a.service", mlink("b.service"),
			etc+"b.service", mlink("a.service"),
			etc+"multi-user.target.wants/a.service", mlink("../a.service"),
		), core},
		{"DefaultDependencies=no skips sysinit", with(fstest.MapFS{
			lib + "default.target": mfile("[Unit]\nWants=a.service\n"),
			lib + "a.service":      mfile("[Unit]\nDefaultDependencies=no\n" + svc0),
			lib + "sysinit.target": mfile("[Unit]\n"),
		}), []string{"a.service", "default.target"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := load(t, tc.fs).Boot()
			require.NoError(t, b.Err)
			assert.Equal(t, tc.want, b.Start)
		})
	}
}

func TestLoadSkipsUnreadableSearchDirs(t *testing.T) {
	m := with(base(),
		"run/systemd/system", mfile("not a directory"),
		"etc/systemd/system.control", mlink("system.control"),
		"usr/local/lib/systemd/system", mlink("/dev/null"),
	)
	b := load(t, m).Boot()
	require.NoError(t, b.Err)
	assert.Contains(t, b.Start, "multi-user.target")

	// The same on a real directory, where the errors come from the kernel.
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "run/systemd"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "run/systemd/system"), []byte("x"), 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "etc/systemd"), 0o755))
	require.NoError(t, os.Symlink("system", filepath.Join(dir, "etc/systemd/system")))
	src, err := rootfs.OpenDir(dir)
	require.NoError(t, err)
	defer src.Close()
	_, err = Load(rootfs.New(src), 0)
	require.NoError(t, err)
}

func TestBootFallsBackToRescue(t *testing.T) {
	m := with(base(), lib+"default.target", nil, etc+"default.target", mlink("/dev/null"))
	b := load(t, m).Boot()
	require.NoError(t, b.Err)
	assert.Equal(t, "rescue.target", b.Root)
	assert.Equal(t, "default.target", b.Default)
	assert.Equal(t, "Unit default.target is masked.", b.Fallback)
	assert.Equal(t, []string{"rescue.target"}, b.Start)

	// A missing default.target falls back too, and so does one aliased to
	// a unit whose file is empty (a mask).
	b = load(t, with(base(), lib+"default.target", nil)).Boot()
	assert.Equal(t, "Unit default.target not found.", b.Fallback)
	assert.Equal(t, "rescue.target", b.Root)
	b = load(t, with(base(), lib+"multi-user.target", mfile(""))).Boot()
	assert.Equal(t, "multi-user.target", b.Default)
	assert.Equal(t, "Unit multi-user.target is masked.", b.Fallback)
	assert.Equal(t, "rescue.target", b.Root)

	// There is no fallback after rescue.target: no emergency.target.
	b = load(t, with(base(), lib+"default.target", nil, lib+"emergency.target", mfile("[Unit]\n"),
		etc+"rescue.target", mlink("/dev/null"))).Boot()
	assert.ErrorIs(t, b.Err, ErrTransaction)
	require.NotNil(t, b.Failure)
	assert.Equal(t, "rescue.target masked", b.Failure.Reason)
	assert.Empty(t, b.Start)

	b = load(t, fstest.MapFS{"etc/hostname": mfile("x")}).Boot()
	assert.ErrorIs(t, b.Err, ErrTransaction)
	assert.Equal(t, "Failed to load rescue.target", b.Failure.Reason)
	assert.Empty(t, b.Start)
}

func TestBootRequiredMissingFailsTransaction(t *testing.T) {
	m := with(base(), lib+"multi-user.target", mfile("[Unit]\nRequires=basic.target gone.target\nAllowIsolate=yes\n"))
	b := load(t, m).Boot()
	assert.ErrorIs(t, b.Err, ErrTransaction)
	require.NotNil(t, b.Failure)
	assert.Equal(t, "Failed to isolate default target: Unit gone.target not found.", b.Failure.Reason)
	assert.Equal(t, "gone.target", b.Failure.Unit)
	assert.Empty(t, b.Start)
}

// TestBootFailureChain: the chain names every requirement from
// default.target to the unit that blocks the transaction, through
// aliases and .requires links.
func TestBootFailureChain(t *testing.T) {
	m := with(base(),
		etc+"multi-user.target.requires/agent.service", mlink("/usr/lib/systemd/system/agent.service"),
		lib+"agent.service", mfile("[Unit]\nBindsTo=helper.service\n"+svc0),
		lib+"helper.service", mlink("real-helper.service"),
		lib+"real-helper.service", mfile("[Unit]\nRequires=db.service\n"+svc0),
		etc+"db.service", mlink("/dev/null"),
	)
	// Vendor units are found first in /lib/systemd/system up to systemd 254
	// (Debian's split-usr build), in /usr/lib/systemd/system from 255 on.
	for v, vendor := range map[int]string{252: "/lib/systemd/system/", 257: "/usr/lib/systemd/system/"} {
		g, err := Load(rootfs.New(m), v)
		require.NoError(t, err)
		b := g.Boot()
		require.NotNil(t, b.Failure, "systemd %d", v)
		assert.Equal(t, "Failed to isolate default target: Unit db.service is masked.", b.Failure.Reason)
		assert.Equal(t, "db.service", b.Failure.Unit)
		assert.Equal(t, []unit.Edge{
			{From: "default.target", To: "multi-user.target", Kind: "alias", Source: vendor + "default.target"},
			{From: "multi-user.target", To: "agent.service", Kind: ".requires", Source: "/etc/systemd/system/multi-user.target.requires/agent.service"},
			{From: "agent.service", To: "helper.service", Kind: "BindsTo", Source: vendor + "agent.service"},
			{From: "helper.service", To: "real-helper.service", Kind: "alias", Source: vendor + "helper.service"},
			{From: "real-helper.service", To: "db.service", Kind: "Requires", Source: vendor + "real-helper.service"},
		}, b.Failure.Chain)
		assert.Empty(t, b.Start)
	}
}

// TestBootDropsJobsWithFailedRequirements: a merely wanted unit whose
// requirement is masked starts in systemd 252 and not from 254 on; what it
// pulled in before the failure starts in both.
func TestBootDropsJobsWithFailedRequirements(t *testing.T) {
	m := with(base(),
		etc+"multi-user.target.wants/agent.service", mlink("/usr/lib/systemd/system/agent.service"),
		lib+"agent.service", mfile("[Unit]\nRequires=first.service\nRequires=masked.service\n"+svc0),
		lib+"first.service", mfile(svc0),
		etc+"masked.service", mlink("/dev/null"),
	)
	for v, want := range map[int][]string{
		252: {"agent.service", "basic.target", "first.service", "multi-user.target", "sysinit.target"},
		254: {"basic.target", "first.service", "multi-user.target", "sysinit.target"},
	} {
		g, err := Load(rootfs.New(m), v)
		require.NoError(t, err)
		b := g.Boot()
		require.NoError(t, b.Err)
		assert.Equal(t, want, b.Start, "systemd %d", v)
	}

	// A default target that cannot be isolated is started in job mode
	// replace, which collects garbage: first.service, left only by the
	// dropped job, goes too.
	m = with(m, lib+"multi-user.target", mfile("[Unit]\nRequires=basic.target\n"))
	for v, want := range map[int][]string{
		252: {"agent.service", "basic.target", "first.service", "multi-user.target", "sysinit.target"},
		254: {"basic.target", "multi-user.target", "sysinit.target"},
	} {
		g, err := Load(rootfs.New(m), v)
		require.NoError(t, err)
		assert.Equal(t, want, g.Boot().Start, "systemd %d", v)
	}
	b := load(t, with(m, lib+"multi-user.target", mfile("[Unit]\nRequires=basic.target\nRequires=masked.service\n"))).Boot()
	require.NotNil(t, b.Failure)
	assert.Equal(t, "Failed to start default target: Unit masked.service is masked.", b.Failure.Reason)
}

// TestBootIgnoresRun: at boot /run is an empty tmpfs, so units, links and
// drop-ins an image ships under it (and through /var/run) play no part.
func TestBootIgnoresRun(t *testing.T) {
	m := with(base(),
		"run/systemd/system/runtime.service", mfile(svc0),
		"run/systemd/system/multi-user.target.wants/runtime.service", mlink("../runtime.service"),
		"run/systemd/system/multi-user.target.requires/gone.service", mlink("/nowhere"),
		"run/systemd/generator/multi-user.target.wants/generated.service", mlink("/usr/lib/systemd/system/generated.service"),
		lib+"generated.service", mfile(svc0),
		"run/systemd/system/multi-user.target.d/x.conf", mfile("[Unit]\nWants=generated.service\n"),
		"var/run", mlink("../run"),
		etc+"linked-into-run.service", mlink("/var/run/linked.service"),
		"run/linked.service", mfile(svc0),
		etc+"multi-user.target.wants/linked-into-run.service", mlink("/etc/systemd/system/linked-into-run.service"),
		"run/systemd/system/basic.target", mlink("/dev/null"),
		lib+"vendor.service", mfile(svc0),
		etc+"multi-user.target.wants/vendor.service", mlink("/usr/lib/systemd/system/vendor.service"),
		"run/systemd/system/vendor.service", mfile(""),
		"run/systemd/system/sysinit.target", mfile("[Unit]\nRequires=gone.service\n"),
	)
	g := load(t, m)
	b := g.Boot()
	require.NoError(t, b.Err)
	assert.Equal(t, []string{"basic.target", "multi-user.target", "sysinit.target", "vendor.service"}, b.Start)
	assert.Equal(t, NotFound, g.Unit("runtime.service").State)
	assert.Equal(t, NotFound, g.Unit("linked-into-run.service").State)
	assert.Equal(t, "/lib/systemd/system/vendor.service", g.Unit("vendor.service").Fragment)

	// An offline tool reads /run as the tree has it.
	tree, err := LoadTree(rootfs.New(m), 0)
	require.NoError(t, err)
	assert.Equal(t, Loaded, tree.Unit("runtime.service").State)
	assert.Equal(t, Masked, tree.Unit("vendor.service").State)
}

func TestChainsAndActivation(t *testing.T) {
	m := with(base(),
		etc+"default.target", mlink("/lib/systemd/system/multi-user.target"),
		lib+"ecs.service", mfile("[Unit]\nWants=docker.service\n"+svc0),
		lib+"docker.service", mfile(svc0),
		lib+"docker.socket", mfile("[Socket]\nListenStream=/run/docker.sock\nService=docker.service\n"),
		etc+"multi-user.target.wants/ecs.service", mlink("/lib/systemd/system/ecs.service"),
		etc+"sockets.target.wants/docker.socket", mlink("/lib/systemd/system/docker.socket"),
		lib+"basic.target", mfile("[Unit]\nRequires=sysinit.target\nWants=sockets.target\n"),
		lib+"apt.timer", mfile("[Timer]\nOnCalendar=daily\n"),
		lib+"apt.service", mfile("[Service]\nType=oneshot\nExecStart=/bin/apt\n"),
		lib+"timers.target", mfile("[Unit]\n"),
		lib+"timers.target.wants/apt.timer", mlink("../apt.timer"),
		etc+"multi-user.target.wants/timers.target", mlink("/lib/systemd/system/timers.target"),
		lib+"sshd.service", mlink("ssh.service"),
		lib+"ssh.service", mfile(svc0),
		lib+"multi-user.target.d/ssh.conf", mfile("[Unit]\nWants=sshd.service\n"),
	)
	g := load(t, m)
	b := g.Boot()
	require.NoError(t, b.Err)
	alias := unit.Edge{From: "default.target", To: "multi-user.target", Kind: "alias", Source: "/etc/systemd/system/default.target"}
	assert.Equal(t, []unit.Edge{alias,
		{From: "multi-user.target", To: "ecs.service", Kind: ".wants", Source: "/etc/systemd/system/multi-user.target.wants/ecs.service"},
	}, b.Chain("ecs.service"))
	assert.Equal(t, []unit.Edge{alias,
		{From: "multi-user.target", To: "sshd.service", Kind: "Wants", Source: "/lib/systemd/system/multi-user.target.d/ssh.conf"},
		{From: "sshd.service", To: "ssh.service", Kind: "alias", Source: "/lib/systemd/system/sshd.service"},
	}, b.Chain("ssh.service"))
	assert.Len(t, b.Chain("docker.service"), 3, "via ecs.service Wants=")
	assert.Equal(t, []string{"docker.socket"}, b.ActivatedBy["docker.service"])
	assert.Equal(t, []string{"apt.timer"}, b.ActivatedBy["apt.service"])
	assert.Equal(t, []string{"apt.service"}, b.Activated, "docker.service starts anyway")
	c := b.Chain("apt.service")
	require.NotEmpty(t, c)
	last := c[len(c)-1]
	assert.Equal(t, unit.Edge{From: "apt.timer", To: "apt.service", Kind: "timer", Source: "/lib/systemd/system/apt.timer"}, last)
	assert.False(t, b.StartsAtBoot("apt.service"))
	assert.Nil(t, b.Chain("not-there.service"))
	assert.Equal(t, []unit.Edge{alias}, b.Chain("multi-user.target"))
	assert.Equal(t, 2+3+1+3+2, b.ChainEdges([]string{"ecs.service", "ssh.service", "multi-user.target", "docker.service", "ecs.service", "not-there.service"}),
		"the alias edge of default.target counts in every chain")

	u := g.Unit("sshd.service")
	require.NotNil(t, u)
	assert.Equal(t, "ssh.service", u.Name)
	assert.Equal(t, []string{"ssh.service", "sshd.service"}, u.Names)
	assert.Equal(t, "/lib/systemd/system/ssh.service", u.Fragment)
	assert.Equal(t, Loaded, u.State)
	assert.Same(t, u, g.Unit("ssh.service"))
	assert.Nil(t, g.Unit("not a unit"))
}

func TestUnitLoading(t *testing.T) {
	m := with(base(),
		etc+"a-b-c.service", mfile("[Unit]\nDescription=fragment\n"+svc0),
		etc+"a-b-c.service.d/10-x.conf", mfile("[Unit]\nDescription=name\n"),
		etc+"a-b-.service.d/20-y.conf", mfile("[Unit]\nWants=p.service\n"),
		lib+"a-.service.d/30-z.conf", mfile("[Service]\nExecStart=\nExecStart=/bin/z\n"),
		lib+"service.d/40-t.conf", mfile("[Unit]\nDocumentation=man:type\n"),
		etc+"service.d/40-t.conf", mlink("/dev/null"),
		etc+"masked.service", mlink("/dev/null"),
		etc+"linked.service", mlink("/opt/linked.service"),
		"opt/linked.service", mfile(svc0),
		etc+"nofile.service.d/x.conf", mfile(svc0),
	)
	g := load(t, m)
	u := g.Unit("a-b-c.service")
	require.NotNil(t, u)
	assert.Equal(t, Loaded, u.State)
	assert.Equal(t, []string{
		"/etc/systemd/system/a-b-c.service.d/10-x.conf",
		"/etc/systemd/system/a-b-.service.d/20-y.conf",
		"/lib/systemd/system/a-.service.d/30-z.conf",
		"/etc/systemd/system/service.d/40-t.conf",
	}, u.DropIns)
	d, _ := u.Last("Unit", "Description")
	assert.Equal(t, "name", d)
	assert.Equal(t, []string{"/bin/z"}, u.Values("Service", "ExecStart"))
	assert.Empty(t, u.Values("Unit", "Documentation"), "the masked type-level drop-in overrides lib's")
	assert.Contains(t, u.Deps, Dep{Kind: "Wants", Name: "p.service", Source: "/etc/systemd/system/a-b-.service.d/20-y.conf"})
	assert.Contains(t, u.Deps, Dep{Kind: "default", Name: "sysinit.target", Source: "/etc/systemd/system/a-b-c.service"})
	assert.Contains(t, u.Deps, Dep{Kind: "Slice", Name: "system.slice", Source: "/etc/systemd/system/a-b-c.service"})

	mu := g.Unit("masked.service")
	assert.Equal(t, Masked, mu.State)
	assert.True(t, mu.Masked)
	assert.Equal(t, "/etc/systemd/system/masked.service", mu.Fragment)

	lu := g.Unit("linked.service")
	assert.Equal(t, Loaded, lu.State)
	assert.Equal(t, "/etc/systemd/system/linked.service", lu.Fragment)

	nf := g.Unit("nofile.service")
	assert.Equal(t, NotFound, nf.State)
	assert.ErrorIs(t, nf.LoadError, ErrNoFragment)

	inst := g.Unit("autovt@tty3.service")
	assert.Equal(t, "getty@tty3.service", inst.Name)
	assert.Equal(t, []string{"autovt@tty3.service", "getty@tty3.service"}, inst.Names)
	assert.Contains(t, inst.Deps, Dep{Kind: "Slice", Name: "system-getty.slice", Source: "/lib/systemd/system/getty@.service"})

	tmpl := g.Unit("getty@.service")
	assert.Equal(t, "getty@.service", tmpl.Name)
	assert.Equal(t, []string{"autovt@.service", "getty@.service"}, tmpl.Names)
}

func TestVerify(t *testing.T) {
	tests := []struct {
		name, text string
		ok         bool
	}{
		{"a.service", svc0, true},
		{"a.service", "[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStop=/bin/x\n", true},
		{"a.service", "[Service]\nType=oneshot\nExecStop=/bin/x\n", false},
		{"a.service", "[Service]\n", false},
		{"a.service", "[Service]\nType=simple\nExecStop=/bin/x\n", false},
		{"a.service", "[Service]\nType=oneshot\nRestart=always\nExecStart=/bin/x\n", false},
		{"a.service", "[Service]\nType=dbus\nExecStart=/bin/x\n", false},
		{"a.service", "[Service]\nExecStart=/bin/x\nExecStart=/bin/y\n", false},
		{"a.service", "[Service]\nType=oneshot\nExecStart=/bin/x\nExecStart=/bin/y\n", true},
		{"a.socket", "[Socket]\nListenStream=1\n", true},
		{"a.socket", "[Socket]\n", false},
		{"a.socket", "[Socket]\nListenStream=1\nAccept=yes\nService=b.service\n", false},
		{"a.timer", "[Timer]\nOnBootSec=5\n", true},
		{"a.timer", "[Timer]\nOnBootSec=5\nOnBootSec=\n", false},
		{"a.path", "[Path]\nPathExists=/x\n", true},
		{"a.path", "[Path]\n", false},
		{"var-lib.mount", "[Mount]\nWhat=/dev/x\nWhere=/var/lib\n", true},
		{"var-lib.mount", "[Mount]\nWhat=/dev/x\nWhere=/var/log\n", false},
		{"var-lib.mount", "[Mount]\nWhere=/var/lib\n", false},
		{"a.service", "[Service]\nType=oneshot\nType=bogus\nRemainAfterExit=yes\nExecStop=/bin/x\n", true},
		{"a.service", "[Service]\nType=oneshot\nRestart=always\nRestart=\nExecStart=/bin/x\n", false},
		{"a.service", "[Service]\nType=oneshot\nRemainAfterExit=yes\nRemainAfterExit=\nExecStop=/bin/x\n", true},
		{"a.service", "[Service]\nType=dbus\nBusName=a.b\nBusName=\nExecStart=/bin/x\n", true},
		{"a.service", "[Service]\nType=dbus\nBusName=a.1b\nExecStart=/bin/x\n", false},
		{"a.socket", "[Socket]\nListenStream=1\nAccept=yes\nAccept=\nService=b.service\n", false},
		{"a.service", "[Service]\nType=oneshot\nExitType=cgroup\nExitType=\nExecStart=/bin/x\n", false},
		{"a.service", "[Service]\nExitType=cgroup\nExecStart=/bin/x\n", true},
		{"a.service", "[Service]\nType=oneshot\nRestartForceExitStatus=1\nExecStart=/bin/x\n", false}, // 252
		{"a.service", "[Service]\nType=oneshot\nRestartForceExitStatus=x\nExecStart=/bin/x\n", true},
		{"a.service", "[Service]\nPAMName=login\nKillMode=process\nKillMode=bogus\nExecStart=/bin/x\n", false},
		{"a.service", "[Service]\nPAMName=login\nKillMode=process\nKillMode=\nExecStart=/bin/x\n", true},
		{"a.socket", "[Socket]\nListenStream=1\nPAMName=login\nKillMode=mixed\n", false}, // 252
		{"a.socket", "[Socket]\nListenDatagram=/run/a\nAccept=yes\n", false},
		{"a.socket", "[Socket]\nListenStream=/run/a\nAccept=yes\nMaxConnections=0\n", false},
		{"a.socket", "[Socket]\nListenStream=@a\nSymlinks=/run/b\n", false},
		{"a.socket", "[Socket]\nListenStream=/run/a\nSymlinks=/run/b\n", true},
		{"a.target", "[Unit]\n", true},
	}
	for _, tc := range tests {
		t.Run(tc.name+" "+tc.text, func(t *testing.T) {
			g := load(t, fstest.MapFS{etc + tc.name: mfile(tc.text)})
			u := g.Unit(tc.name)
			if tc.ok {
				assert.Equal(t, Loaded, u.State, "%v", u.LoadError)
			} else {
				assert.Equal(t, BadSetting, u.State)
				assert.ErrorIs(t, u.LoadError, ErrBadSetting)
			}
		})
	}
}

// A unit file whose setting systemd's parser refuses with -ENOEXEC leaves
// the unit bad-setting, one refused with another error (PIDFile=) error;
// either names the file, the setting and why.
func TestFatalSettingStates(t *testing.T) {
	tests := []struct {
		text  string
		state LoadState
		why   string
	}{
		{svc0 + "ExecStartPre=bin/x\n", BadSetting, "ExecStartPre=bin/x: neither a valid executable name nor an absolute path"},
		{svc0 + "DynamicUser=\n", BadSetting, "DynamicUser=: not a boolean"},
		{svc0 + "PIDFile=../x.pid\n", Error, "PIDFile=../x.pid: path is not normalized"},
		{svc0 + "PIDFile=x.pid\nDynamicUser=yes\nExecStartPre=-bin/x\n", Loaded, ""},
	}
	for _, tc := range tests {
		g := load(t, fstest.MapFS{etc + "a.service": mfile(tc.text)})
		u := g.Unit("a.service")
		assert.Equal(t, tc.state, u.State, tc.text)
		if tc.why == "" {
			assert.NoError(t, u.LoadError)
			continue
		}
		assert.ErrorContains(t, u.LoadError, "a.service: ")
		assert.ErrorContains(t, u.LoadError, "/etc/systemd/system/a.service: "+tc.why)
		assert.Equal(t, tc.state == BadSetting, errors.Is(u.LoadError, ErrBadSetting))
	}
}

func TestPrintfName(t *testing.T) {
	tests := []struct{ id, in, want, err string }{
		{"foo-bar@baz.service", "x-%i.service", "x-baz.service", ""},
		{"foo-bar@baz.service", "%p.target", "foo-bar.target", ""},
		{"foo-bar@baz.service", "%j.target", "bar.target", ""},
		{"foo-bar@baz.service", "%N.target", "foo-bar@baz.target", ""},
		{"foo-bar@baz.service", "%n", "foo-bar@baz.service", ""},
		{"a.service", "x%%.service", "x%.service", ""},
		{"a.service", "u-%u-%U.service", "u-root-0.service", ""},
		{"a.service", "%H.service", "", "depends on the running machine"},
		{"a.service", "x%", "", "specifier at end"},
		// UNIT_NAME_MAX bounds the output, so a value of any size costs
		// at most that much.
		{"a.service", strings.Repeat("x", 246) + "%n", strings.Repeat("x", 246) + "a.service", ""},
		{"a.service", strings.Repeat("x", 248) + "%n", "", "expansion too long"},
		{"a.service", strings.Repeat("%n", 1<<20), "", "expansion too long"},
	}
	for _, tc := range tests {
		got, err := printfName(tc.id, tc.in)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, tc.want, got)
	}
}

func TestEscapeAndSlices(t *testing.T) {
	assert.Equal(t, `serial\x2dgetty`, escapeName("serial-getty"))
	assert.Equal(t, `\x2efoo-bar`, escapeName(".foo/bar"))
	assert.Equal(t, "var-lib.mount", pathName("/var//lib/", "mount"))
	assert.Equal(t, "-.mount", pathName("/", "mount"))
	assert.Equal(t, "a-b.slice", parentSlice("a-b-c.slice"))
	assert.Equal(t, "-.slice", parentSlice("system.slice"))
	assert.Equal(t, "", parentSlice("-.slice"))
}

func TestSysv(t *testing.T) {
	exe := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s), Mode: 0o755} }
	m := with(base(),
		"usr/lib/systemd/system-generators/systemd-sysv-generator", exe("#!"),
		lib+"network-online.target", mfile("[Unit]\n"),
		"etc/init.d/agent", exe("#!/bin/sh\n### BEGIN INIT INFO\n# Provides: agent agentd\n# Should-Start: $network\n### END INIT INFO\n"),
		"etc/rc2.d/S05agent", mlink("../init.d/agent"),
		"etc/rc2.d/K01agent", mlink("../init.d/agent"),
		"etc/init.d/plain", mfile("#!/bin/sh\n"),
		"etc/rc2.d/S01plain", mlink("../init.d/plain"),
	)
	g := load(t, m)
	b := g.Boot()
	require.NoError(t, b.Err)
	assert.Contains(t, b.Start, "agent.service")
	assert.Contains(t, b.Start, "network-online.target")
	assert.NotContains(t, b.Start, "plain.service", "not executable")
	assert.Equal(t, []unit.Edge{
		{From: "default.target", To: "multi-user.target", Kind: "alias", Source: "/lib/systemd/system/default.target"},
		{From: "multi-user.target", To: "agent.service", Kind: "sysv", Source: "/etc/rc2.d/S05agent"},
	}, b.Chain("agent.service"))
	u := g.Unit("agentd.service")
	assert.Equal(t, "agent.service", u.Name)
	assert.Equal(t, "/etc/init.d/agent", u.SourcePath)
	assert.Equal(t, "/run/systemd/generator.late/agent.service", u.Fragment)

	masked := with(m, "etc/systemd/system-generators/systemd-sysv-generator", mlink("/dev/null"))
	assert.NotContains(t, load(t, masked).Boot().Start, "agent.service")
}

func TestConflicts(t *testing.T) {
	m := with(base(),
		etc+"e.service", mfile("[Unit]\nConflicts=f.service\n"+svc0),
		etc+"f.service", mfile("[Unit]\nWants=c.service\n"+svc0),
		etc+"c.service", mfile(svc0),
		etc+"d.service", mfile("[Unit]\nRequires=f.service\n"+svc0),
		etc+"multi-user.target.requires/e.service", mlink("../e.service"),
		etc+"multi-user.target.wants/f.service", mlink("../f.service"),
		etc+"multi-user.target.wants/d.service", mlink("../d.service"),
		etc+"g.service", mfile("[Unit]\nConflicts=h.service\n"+svc0),
		etc+"h.service", mfile(svc0),
		etc+"multi-user.target.wants/g.service", mlink("../g.service"),
		etc+"multi-user.target.requires/h.service", mlink("../h.service"),
	)
	b := load(t, m).Boot()
	require.NoError(t, b.Err)
	assert.Equal(t, []string{"basic.target", "c.service", "e.service", "h.service", "multi-user.target", "sysinit.target"}, b.Start)
	assert.Equal(t, map[string]string{"f.service": "e.service", "d.service": "e.service", "g.service": "h.service"}, b.Conflicted)

	both := with(base(),
		etc+"e.service", mfile("[Unit]\nConflicts=h.service\n"+svc0),
		etc+"h.service", mfile(svc0),
		etc+"multi-user.target.requires/e.service", mlink("../e.service"),
		etc+"multi-user.target.requires/h.service", mlink("../h.service"),
	)
	assert.ErrorIs(t, load(t, both).Boot().Err, ErrTransaction)
}

func TestGraphConcurrentUse(t *testing.T) {
	g := load(t, with(base(),
		lib+"a.service", mfile(svc0),
		etc+"multi-user.target.wants/a.service", mlink("/lib/systemd/system/a.service"),
	))
	done := make(chan []string)
	for i := range 8 {
		go func() {
			g.Unit(fmt.Sprintf("getty@tty%d.service", i))
			done <- g.Boot().Start
		}()
	}
	for range 8 {
		assert.Contains(t, <-done, "a.service")
	}
}
