package boot

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// The oracle is systemd 252 itself: `systemd --test --system` computes the
// initial boot transaction offline and prints its jobs. It refuses to run
// as root, needs /proc and a cgroup hierarchy, and must not see the host's
// /run, so it runs chrooted in a copy of the Debian root built by
// fixtures/debian/build.sh, as nobody, in a private mount namespace.

// debianRoot returns the Debian root the oracle tests use (testenv says
// what happens when it or a tool the oracle runs is missing).
func debianRoot(t *testing.T) string {
	t.Helper()
	testenv.Root(t, "the systemd oracle (unshare, mount, chroot)")
	for _, tool := range []string{"unshare", "chroot", "mount"} {
		testenv.Tool(t, tool, "util-linux/coreutils")
	}
	return testenv.Bookworm.Path(t)
}

// variantRoot is a Debian root plus a variant's changes: the changes live
// in an upper directory that an overlay mount stacks on the cached root for
// systemd, and that union stacks on it for the model, so the cached root
// is never written and no copy of it is made.
type variantRoot struct {
	lower, upper, work string
}

func newVariant(t *testing.T, lower string, ops []op) variantRoot {
	t.Helper()
	parent := t.TempDir()
	v := variantRoot{lower: lower, upper: filepath.Join(parent, "upper"), work: filepath.Join(parent, "work")}
	require.NoError(t, os.Mkdir(v.upper, 0o755))
	require.NoError(t, os.Mkdir(v.work, 0o755))
	for _, o := range ops {
		// An upper directory shadows a lower link (overlayfs does not
		// merge them), so a variant must name real directories.
		parts := strings.Split(strings.Trim(o.path, "/"), "/")
		for i := 1; i < len(parts); i++ {
			fi, err := os.Lstat(filepath.Join(lower, filepath.Join(parts[:i]...)))
			require.False(t, err == nil && fi.Mode()&fs.ModeSymlink != 0, "variant path %s crosses a link in the root", o.path)
		}
	}
	apply(t, v.upper, ops)
	return v
}

// union is a rootfs.Source of upper stacked on lower, as overlayfs stacks
// them (the variants only add entries, so no whiteouts are needed).
type union struct{ upper, lower *rootfs.Dir }

func (u union) pick(name string) *rootfs.Dir {
	if _, err := u.upper.Lstat(name); err == nil {
		return u.upper
	}
	return u.lower
}

func (u union) Open(name string) (fs.File, error)      { return u.pick(name).Open(name) }
func (u union) Lstat(name string) (fs.FileInfo, error) { return u.pick(name).Lstat(name) }
func (u union) ReadLink(name string) (string, error)   { return u.pick(name).ReadLink(name) }
func (u union) ReadFile(name string) ([]byte, error)   { return u.pick(name).ReadFile(name) }
func (u union) ReadDir(name string) ([]fs.DirEntry, error) {
	up, errUp := u.upper.ReadDir(name)
	if fi, err := u.upper.Lstat(name); err == nil && !fi.IsDir() {
		return up, errUp
	}
	low, errLow := u.lower.ReadDir(name)
	if errUp != nil {
		return low, errLow
	}
	seen := map[string]bool{}
	for _, e := range up {
		seen[e.Name()] = true
	}
	for _, e := range low {
		if !seen[e.Name()] {
			up = append(up, e)
		}
	}
	slices.SortFunc(up, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return up, nil
}

var jobLine = regexp.MustCompile(`^\t\tAction: (\S+) -> start$`)

// oracle is what systemd --test says about a root.
type oracle struct {
	// start are the units with a start job in the initial transaction.
	start []string
	// triggers maps a unit to the units it triggers ("Triggers:" lines).
	triggers map[string][]string
	// failed reports that systemd could not queue the default target's job.
	failed bool
}

// runOracle runs systemd --test in the variant root.
func runOracle(t *testing.T, v variantRoot) oracle {
	t.Helper()
	root := v.lower
	stack := ""
	if v.upper != "" {
		root = filepath.Join(filepath.Dir(v.upper), "merged")
		require.NoError(t, os.MkdirAll(root, 0o755))
		require.NoError(t, os.RemoveAll(v.work))
		require.NoError(t, os.Mkdir(v.work, 0o755))
		stack = fmt.Sprintf("mount -t overlay overlay -o lowerdir=%s,upperdir=%s,workdir=%s \"$r\"\n", v.lower, v.upper, v.work)
	}
	script := `set -e
r=$1
` + stack + `mount -t proc proc "$r/proc"
mount -t sysfs -o ro sysfs "$r/sys"
mount --rbind /sys/fs/cgroup "$r/sys/fs/cgroup"
mount -t tmpfs tmpfs "$r/run"
mount -t tmpfs tmpfs "$r/tmp"
exec chroot --userspec=65534:65534 "$r" /lib/systemd/systemd --test --system --no-pager --log-target=console --log-level=notice`
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", root)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		// In test mode systemd logs "Failed to isolate default target" to
		// the console and exits 1 without dumping jobs.
		require.NotContains(t, stdout.String(), "-> By jobs:", "systemd --test: %v: %s", err, stderr.String())
		return oracle{failed: true}
	}
	o := oracle{triggers: map[string][]string{}}
	inJobs := false
	cur := ""
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		if l == "-> By jobs:" {
			inJobs = true
			continue
		}
		if m := unitLine.FindStringSubmatch(l); !inJobs && m != nil {
			cur = m[1]
		}
		if m := triggersLine.FindStringSubmatch(l); !inJobs && m != nil {
			o.triggers[cur] = append(o.triggers[cur], m[1])
		}
		if m := jobLine.FindStringSubmatch(l); inJobs && m != nil {
			o.start = append(o.start, m[1])
		}
	}
	require.True(t, inJobs, "systemd --test printed no jobs section; stderr: %s", stderr.String())
	sort.Strings(o.start)
	o.start = slices.Compact(o.start)
	return o
}

var (
	unitLine     = regexp.MustCompile(`^\t-> Unit (\S+):$`)
	triggersLine = regexp.MustCompile(`^\t\tTriggers: (\S+) \(`)
)

// modelStart loads root with the package under test and returns the units
// Boot starts; the transaction must succeed.
func modelStart(t *testing.T, v variantRoot) ([]string, *Graph) {
	t.Helper()
	g := modelGraph(t, v)
	b := g.Boot()
	require.NoError(t, b.Err)
	return b.Start, g
}

// modelGraph loads root with the package under test.
func modelGraph(t *testing.T, v variantRoot) *Graph {
	t.Helper()
	var src rootfs.Source
	lower, err := rootfs.OpenDir(v.lower)
	require.NoError(t, err)
	t.Cleanup(func() { lower.Close() })
	src = lower
	if v.upper != "" {
		upper, err := rootfs.OpenDir(v.upper)
		require.NoError(t, err)
		t.Cleanup(func() { upper.Close() })
		src = union{upper: upper, lower: lower}
	}
	g, err := Load(rootfs.New(src))
	require.NoError(t, err)
	return g
}

// diff returns what only a has and what only b has.
func diff(a, b []string) (onlyA, onlyB []string) {
	for _, x := range a {
		if !slices.Contains(b, x) {
			onlyA = append(onlyA, x)
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			onlyB = append(onlyB, x)
		}
	}
	return onlyA, onlyB
}

// op is one change a variant makes to its copy of the root.
type op struct {
	path string // image path
	link string // symlink target, or
	text string // file content
	exec bool   // executable
}

func file(p, text string) op   { return op{path: p, text: text} }
func link(p, target string) op { return op{path: p, link: target} }
func exe(p, text string) op    { return op{path: p, text: text, exec: true} }

func apply(t *testing.T, root string, ops []op) {
	t.Helper()
	for _, o := range ops {
		p := filepath.Join(root, o.path)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.RemoveAll(p)) // a later op replaces an earlier one
		switch {
		case o.link != "":
			require.NoError(t, os.Symlink(o.link, p))
		default:
			mode := os.FileMode(0o644)
			if o.exec {
				mode = 0o755
			}
			require.NoError(t, os.WriteFile(p, []byte(o.text), mode))
		}
	}
}

const svc = "[Service]\nExecStart=/bin/true\n"

// maskGenerators masks every generator of the root but keep, as
// /etc/systemd/system-generators/NAME -> /dev/null does. The model covers
// systemd-sysv-generator; the others write units from the running machine
// (fstab, the kernel command line, the cloud's data source), which an
// image at rest does not determine.
func maskGenerators(t *testing.T, root string, keep ...string) []op {
	ents, err := os.ReadDir(filepath.Join(root, "usr/lib/systemd/system-generators"))
	require.NoError(t, err)
	var ops []op
	for _, e := range ents {
		if !slices.Contains(keep, e.Name()) {
			ops = append(ops, link("/etc/systemd/system-generators/"+e.Name(), "/dev/null"))
		}
	}
	return ops
}

// variants are unit trees built inside the Debian root, each exercising
// loader features against systemd.
func variants(t *testing.T) map[string][]op {
	ecs, err := os.ReadFile(filepath.Join("testdata", "ecs.service"))
	require.NoError(t, err)
	return map[string][]op{
		"debian": nil,
		"sysv": {
			// An init script with an LSB header enabled by an rc link; one
			// not enabled whose Provides: alias another unit wants and
			// whose $facility it pulls in; one without a header; one
			// shadowed by a native unit; one not executable.
			exe("/etc/init.d/legacy-agent", "#!/bin/sh\n### BEGIN INIT INFO\n# Provides: legacy-agent agent-alias\n# Required-Start: $network $remote_fs\n# Default-Start: 2 3 4 5\n### END INIT INFO\n"),
			link("/etc/rc3.d/S20legacy-agent", "../init.d/legacy-agent"),
			exe("/etc/init.d/dormant", "#!/bin/sh\n### BEGIN INIT INFO\n# Provides: dormant dormant-alias $dormant-facility\n### END INIT INFO\n"),
			file("/etc/systemd/system/needs-alias.service", "[Unit]\nWants=dormant-alias.service\n"+svc),
			link("/etc/systemd/system/multi-user.target.wants/needs-alias.service", "/etc/systemd/system/needs-alias.service"),
			exe("/etc/init.d/bare.sh", "#!/bin/sh\nexit 0\n"),
			link("/etc/rc5.d/S01bare.sh", "../init.d/bare.sh"),
			exe("/etc/init.d/shadowed", "#!/bin/sh\n"),
			link("/etc/rc2.d/S01shadowed", "../init.d/shadowed"),
			file("/etc/systemd/system/shadowed.service", "[Service]\nExecStart=/bin/true\n"),
			file("/etc/systemd/system/dormant-facility.target", "[Unit]\nDescription=facility\n"),
			file("/etc/init.d/noexec", "#!/bin/sh\n"),
			link("/etc/rc2.d/S01noexec", "../init.d/noexec"),
		},
		"conflicts": {
			// e, required by the target, conflicts with f, only wanted: f's
			// start goes, d (Requires=f) with it, c (wanted by f) stays.
			// g, only wanted, conflicts with h, required: g's start goes.
			// (Two units both only wanted that conflict are resolved by
			// systemd in random order; that case is not compared.)
			file("/etc/systemd/system/e.service", "[Unit]\nConflicts=f.service\n"+svc),
			file("/etc/systemd/system/f.service", "[Unit]\nWants=c.service\n"+svc),
			file("/etc/systemd/system/c.service", svc),
			file("/etc/systemd/system/d.service", "[Unit]\nRequires=f.service\n"+svc),
			link("/etc/systemd/system/multi-user.target.requires/e.service", "/etc/systemd/system/e.service"),
			link("/etc/systemd/system/multi-user.target.wants/f.service", "/etc/systemd/system/f.service"),
			link("/etc/systemd/system/multi-user.target.wants/d.service", "/etc/systemd/system/d.service"),
			file("/etc/systemd/system/g.service", "[Unit]\nConflicts=h.service\n"+svc),
			file("/etc/systemd/system/h.service", svc),
			link("/etc/systemd/system/multi-user.target.wants/g.service", "/etc/systemd/system/g.service"),
			link("/etc/systemd/system/multi-user.target.requires/h.service", "/etc/systemd/system/h.service"),
		},
		"sysv-generator-masked": {
			link("/etc/systemd/system-generators/systemd-sysv-generator", "/dev/null"),
		},
		"ecs-dlami": {
			// The incident: a vendor unit enabled through
			// multi-user.target.wants and default.target aliased to
			// multi-user.target, as on the DLAMI.
			file("/usr/lib/systemd/system/ecs.service", string(ecs)),
			link("/etc/systemd/system/multi-user.target.wants/ecs.service", "/lib/systemd/system/ecs.service"),
			link("/etc/systemd/system/default.target", "/lib/systemd/system/multi-user.target"),
		},
		"activation": {
			// A socket-activated service, an Accept=yes socket, a timer and
			// a path unit: the trigger starts at boot, its unit does not.
			file("/etc/systemd/system/demo.socket", "[Socket]\nListenStream=/run/demo.sock\n[Install]\nWantedBy=sockets.target\n"),
			file("/etc/systemd/system/demo.service", svc),
			link("/etc/systemd/system/sockets.target.wants/demo.socket", "/etc/systemd/system/demo.socket"),
			file("/etc/systemd/system/echo.socket", "[Socket]\nListenStream=7777\nAccept=yes\n"),
			file("/etc/systemd/system/echo@.service", "[Service]\nExecStart=/bin/cat\nStandardInput=socket\n"),
			link("/etc/systemd/system/sockets.target.wants/echo.socket", "/etc/systemd/system/echo.socket"),
			file("/etc/systemd/system/nightly.timer", "[Timer]\nOnCalendar=daily\nUnit=nightly-job.service\n"),
			file("/etc/systemd/system/nightly-job.service", "[Service]\nType=oneshot\nExecStart=/bin/true\n"),
			link("/etc/systemd/system/timers.target.wants/nightly.timer", "/etc/systemd/system/nightly.timer"),
			file("/etc/systemd/system/watch.path", "[Path]\nPathExists=/etc/watched\n"),
			file("/etc/systemd/system/watch.service", svc),
			link("/etc/systemd/system/paths.target.wants/watch.path", "/etc/systemd/system/watch.path"),
			file("/etc/systemd/system/sockuser.service", "[Service]\nExecStart=/bin/true\nSockets=extra.socket\n"),
			file("/etc/systemd/system/extra.socket", "[Socket]\nListenStream=/run/extra.sock\nService=sockuser.service\n"),
			link("/etc/systemd/system/multi-user.target.wants/sockuser.service", "/etc/systemd/system/sockuser.service"),
		},
		"masks-and-failures": {
			// A masked started unit, a masked .wants link, Requires= on a
			// masked and on a missing unit, Requisite=, a unit refused for
			// its settings, an empty (masking) unit file, a .wants regular
			// file (ignored), templates named without an
			// instance (systemd instantiates them with the depending unit's
			// instance or prefix).
			link("/etc/systemd/system/cron.service", "/dev/null"),
			link("/etc/systemd/system/multi-user.target.wants/rsyslog.service", "/dev/null"),
			file("/etc/systemd/system/needs-masked.service", "[Unit]\nRequires=cron.service\nWants=wanted-by-needs-masked.service\n"+svc),
			file("/etc/systemd/system/wanted-by-needs-masked.service", svc),
			link("/etc/systemd/system/multi-user.target.wants/needs-masked.service", "/etc/systemd/system/needs-masked.service"),
			file("/etc/systemd/system/needs-missing.service", "[Unit]\nRequires=no-such-unit.service\n"+svc),
			link("/etc/systemd/system/multi-user.target.wants/needs-missing.service", "/etc/systemd/system/needs-missing.service"),
			file("/etc/systemd/system/wants-missing.service", "[Unit]\nWants=no-such-unit.service\n"+svc),
			link("/etc/systemd/system/multi-user.target.wants/wants-missing.service", "/etc/systemd/system/wants-missing.service"),
			file("/etc/systemd/system/requisite.service", "[Unit]\nRequisite=never-started.service\n"+svc),
			file("/etc/systemd/system/never-started.service", svc),
			link("/etc/systemd/system/multi-user.target.wants/requisite.service", "/etc/systemd/system/requisite.service"),
			file("/etc/systemd/system/no-exec.service", "[Service]\nType=simple\n"),
			link("/etc/systemd/system/multi-user.target.wants/no-exec.service", "/etc/systemd/system/no-exec.service"),
			file("/etc/systemd/system/empty.service", ""),
			link("/etc/systemd/system/multi-user.target.wants/empty.service", "/etc/systemd/system/empty.service"),
			file("/etc/systemd/system/multi-user.target.wants/regular.service", svc),
			file("/etc/systemd/system/regular.service", svc),
			link("/etc/systemd/system/multi-user.target.wants/dangling.service", "/nowhere/dangling.service"),
			file("/etc/systemd/system/tmpl@.service", svc),
			link("/etc/systemd/system/multi-user.target.wants/tmpl@.service", "/etc/systemd/system/tmpl@.service"),
			file("/etc/systemd/system/wants-template.service", "[Unit]\nWants=tmpl@.service\n"+svc),
			link("/etc/systemd/system/multi-user.target.wants/wants-template.service", "/etc/systemd/system/wants-template.service"),
			file("/etc/systemd/system/requires-template.service", "[Unit]\nRequires=tmpl@.service\nWants=after-template.service\n"+svc),
			file("/etc/systemd/system/after-template.service", svc),
			link("/etc/systemd/system/multi-user.target.wants/requires-template.service", "/etc/systemd/system/requires-template.service"),
			file("/etc/systemd/system/dangling.service", svc),
		},
		"aliases-templates-dropins": {
			// An alias enabled under its alias name, a linked unit file, an
			// alias of a template, instances with %i/%p/%n specifiers, a
			// drop-in adding Wants=, a prefix drop-in, a type-level
			// drop-in, a template .wants directory, a .requires
			// directory, an .upholds directory (ignored by systemd 252),
			// Upholds=, BindsTo=, DefaultDependencies=no,
			// Type=dbus and a Slice=.
			file("/etc/systemd/system/real.service", svc),
			link("/etc/systemd/system/nick.service", "real.service"),
			link("/etc/systemd/system/multi-user.target.wants/nick.service", "/etc/systemd/system/nick.service"),
			file("/opt/vendor/linked.service", svc),
			link("/etc/systemd/system/linked.service", "/opt/vendor/linked.service"),
			link("/etc/systemd/system/multi-user.target.wants/linked.service", "/etc/systemd/system/linked.service"),
			file("/etc/systemd/system/worker@.service", "[Unit]\nWants=helper-%i.service %p-side@%i.service\nRequires=tagged-%j.target\n"+svc),
			link("/etc/systemd/system/labourer@.service", "worker@.service"),
			link("/etc/systemd/system/multi-user.target.wants/labourer@alpha.service", "/etc/systemd/system/worker@.service"),
			link("/etc/systemd/system/multi-user.target.wants/worker@beta.service", "/etc/systemd/system/worker@.service"),
			file("/etc/systemd/system/helper-alpha.service", svc),
			file("/etc/systemd/system/helper-beta.service", svc),
			file("/etc/systemd/system/worker-side@.service", svc),
			file("/etc/systemd/system/tagged-worker.target", "[Unit]\nDescription=tag\n"),
			link("/etc/systemd/system/worker@.service.wants/from-template.service", "/etc/systemd/system/from-template.service"),
			file("/etc/systemd/system/from-template.service", svc),
			file("/etc/systemd/system/multi-user.target.d/50-extra.conf", "[Unit]\nWants=systemd-networkd.service\nWants=\nWants=dropin-wanted.service\n"),
			file("/etc/systemd/system/dropin-wanted.service", svc),
			file("/etc/systemd/system/app-web.service", svc),
			link("/etc/systemd/system/multi-user.target.wants/app-web.service", "/etc/systemd/system/app-web.service"),
			file("/etc/systemd/system/app-.service.d/prefix.conf", "[Unit]\nWants=prefix-wanted.service\n"),
			file("/etc/systemd/system/prefix-wanted.service", svc),
			file("/etc/systemd/system/timer.d/type-level.conf", "[Unit]\nWants=every-timer-wants.service\n"),
			file("/etc/systemd/system/every-timer-wants.service", svc),
			link("/etc/systemd/system/multi-user.target.requires/required-by-dir.service", "/etc/systemd/system/required-by-dir.service"),
			file("/etc/systemd/system/required-by-dir.service", svc),
			link("/etc/systemd/system/multi-user.target.upholds/upheld.service", "/etc/systemd/system/upheld.service"),
			file("/etc/systemd/system/upheld.service", svc),
			file("/etc/systemd/system/upholder.service", "[Unit]\nUpholds=upheld-by-setting.service\n"+svc),
			file("/etc/systemd/system/upheld-by-setting.service", svc),
			link("/etc/systemd/system/multi-user.target.wants/upholder.service", "/etc/systemd/system/upholder.service"),
			file("/etc/systemd/system/binder.service", "[Unit]\nBindsTo=bound.service\nPartOf=not-pulled.service\nConflicts=conflicted.service\n"+svc),
			file("/etc/systemd/system/bound.service", svc),
			file("/etc/systemd/system/not-pulled.service", svc),
			link("/etc/systemd/system/multi-user.target.wants/binder.service", "/etc/systemd/system/binder.service"),
			file("/etc/systemd/system/early.service", "[Unit]\nDefaultDependencies=no\n[Service]\nExecStart=/bin/true\nSlice=custom-deep.slice\n"),
			link("/etc/systemd/system/multi-user.target.wants/early.service", "/etc/systemd/system/early.service"),
			file("/etc/systemd/system/busy.service", "[Service]\nType=dbus\nBusName=org.example.Busy\nExecStart=/bin/true\n"),
			link("/etc/systemd/system/multi-user.target.wants/busy.service", "/etc/systemd/system/busy.service"),
			file("/etc/systemd/system/multi-line.service", "[Unit]\nWants=cont-one.service \\\n  cont-two.service\nno equals sign here\n"+svc),
			file("/etc/systemd/system/cont-one.service", svc),
			file("/etc/systemd/system/cont-two.service", svc),
			link("/etc/systemd/system/multi-user.target.wants/multi-line.service", "/etc/systemd/system/multi-line.service"),
		},
	}
}

// TestOracle compares the units the model starts at boot with the start
// jobs of systemd's own initial transaction, on the Debian root and on
// variants of it. Generators are hidden from systemd (see runOracle);
// TestOracleGenerators measures what they add.
func TestOracle(t *testing.T) {
	root := debianRoot(t)
	for name, ops := range variants(t) {
		t.Run(name, func(t *testing.T) {
			v := newVariant(t, root, append(maskGenerators(t, root, "systemd-sysv-generator"), ops...))
			want := runOracle(t, v)
			got, g := modelStart(t, v)
			onlySystemd, onlyModel := diff(want.start, got)
			t.Logf("%s: systemd starts %d units, the model %d; only systemd: %v; only model: %v",
				name, len(want.start), len(got), onlySystemd, onlyModel)
			assert.Equal(t, want.start, got)

			// Activation: every started trigger unit triggers, per
			// systemd, exactly the loadable units the model says.
			b := g.Boot()
			for _, u := range got {
				for _, tr := range want.triggers[u] {
					if tu := g.Unit(tr); tu != nil && tu.State == Loaded {
						assert.Contains(t, b.ActivatedBy[tu.Name], u, "%s triggers %s", u, tr)
					}
				}
			}
		})
	}
}

// TestOracleChains checks the chains of the DLAMI-like variant: the
// incident unit starts because default.target is an alias of
// multi-user.target, whose .wants directory links ecs.service.
func TestOracleChains(t *testing.T) {
	root := debianRoot(t)
	_, g := modelStart(t, newVariant(t, root, append(maskGenerators(t, root), variants(t)["ecs-dlami"]...)))
	b := g.Boot()
	assert.Equal(t, "multi-user.target", b.Root)
	assert.Equal(t, []unit.Edge{
		{From: "default.target", To: "multi-user.target", Kind: "alias", Source: "/etc/systemd/system/default.target"},
		{From: "multi-user.target", To: "ecs.service", Kind: ".wants", Source: "/etc/systemd/system/multi-user.target.wants/ecs.service"},
	}, b.Chain("ecs.service"))
	// ecs.service Wants= docker.service, but docker is enabled on its own
	// too: the shortest chain is the .wants link.
	assert.Equal(t, []unit.Edge{
		{From: "default.target", To: "multi-user.target", Kind: "alias", Source: "/etc/systemd/system/default.target"},
		{From: "multi-user.target", To: "docker.service", Kind: ".wants", Source: "/etc/systemd/system/multi-user.target.wants/docker.service"},
	}, b.Chain("docker.service"))
	assert.False(t, b.StartsAtBoot("graphical.target"))
}

// TestOracleGenerators runs systemd with the image's generators and checks
// that they only add units: everything the model starts, systemd starts.
// The units only systemd starts come from generator output (sysv-generator
// for init scripts without a unit, fstab-generator's remount of /, ...);
// they are logged, not modelled.
func TestOracleGenerators(t *testing.T) {
	root := debianRoot(t)
	v := newVariant(t, root, nil)
	want := runOracle(t, v)
	got, _ := modelStart(t, v)
	onlySystemd, onlyModel := diff(want.start, got)
	t.Logf("with generators systemd starts %d units, the model %d; added by generators: %v",
		len(want.start), len(got), onlySystemd)
	assert.Empty(t, onlyModel)
}

// BenchmarkBootDebian measures Load and Boot on the cached Debian root
// (compare: systemd --test on the same root, printed once per run).
func BenchmarkBootDebian(b *testing.B) {
	dir := testenv.Bookworm.Path(b)
	src, err := rootfs.OpenDir(dir)
	require.NoError(b, err)
	defer src.Close()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		g, err := Load(rootfs.New(src))
		require.NoError(b, err)
		n = len(g.Boot().Start)
	}
	b.ReportMetric(float64(n), "units")
}

// randomVariant generates a unit tree from seed: services, sockets and
// timers wanted from multi-user.target or by each other through every
// dependency setting and directory, aliases, masks, templates with
// specifiers, drop-ins at name, prefix and type level, missing and refused
// units. It avoids what systemd itself resolves in random order (Conflicts=
// between merely wanted units) and ordering settings (cycle breaking is
// outside the model), and specifiers in units with several names: systemd
// expands them with the name its LIFO load queue dispatches first, which
// the model does not replay (it uses the name it is first asked for).
func randomVariant(seed uint64) []op {
	r := rand.New(rand.NewPCG(seed, 7))
	const dir = "/etc/systemd/system/"
	names := []string{"r-a.service", "r-b.service", "r-c.service", "r-d-e.service", "r-f.service",
		"r-g@.service", "r-h.socket", "r-i.timer", "r-j.service", "r-k.service"}
	pick := func() string {
		n := names[r.IntN(len(names))]
		if unit.IsTemplate(n) {
			// Not %p or %i: in a unit known by several names they expand
			// with the name systemd happens to load first (see below).
			return unit.WithInstance(n, []string{"one", "two"}[r.IntN(2)])
		}
		if r.IntN(8) == 0 {
			return "r-missing.service"
		}
		return n
	}
	var ops []op
	for _, n := range names {
		var b strings.Builder
		b.WriteString("[Unit]\n")
		for range r.IntN(4) {
			key := []string{"Wants", "Wants", "Requires", "Requisite", "BindsTo", "Upholds", "PartOf"}[r.IntN(7)]
			fmt.Fprintf(&b, "%s=%s\n", key, pick())
		}
		if r.IntN(6) == 0 {
			b.WriteString("DefaultDependencies=no\n")
		}
		switch unit.Type(n) {
		case "socket":
			fmt.Fprintf(&b, "[Socket]\nListenStream=/run/%s\n", n)
			if r.IntN(2) == 0 {
				b.WriteString("Service=r-j.service\n")
			}
		case "timer":
			b.WriteString("[Timer]\nOnBootSec=5\n")
			if r.IntN(2) == 0 {
				b.WriteString("Unit=r-k.service\n")
			}
		default:
			switch r.IntN(8) {
			case 0:
				b.WriteString("[Service]\nType=simple\n") // refused: no ExecStart=
			case 1:
				b.WriteString("[Service]\nType=oneshot\nExecStart=/bin/true\nExecStart=/bin/true\n")
			default:
				b.WriteString("[Service]\nExecStart=/bin/true\n")
			}
		}
		switch r.IntN(10) {
		case 0:
			ops = append(ops, link(dir+n, "/dev/null"))
		case 1:
			ops = append(ops, file(dir+n, ""))
		default:
			ops = append(ops, file(dir+n, b.String()))
		}
		if r.IntN(3) == 0 {
			ops = append(ops, link(dir+"multi-user.target.wants/"+n, dir+n))
		}
	}
	for i := range 1 + r.IntN(3) {
		alias := fmt.Sprintf("r-alias%d.service", i)
		target := names[r.IntN(len(names))]
		if unit.Type(target) != "service" || unit.IsTemplate(target) {
			continue
		}
		ops = append(ops, link(dir+alias, target))
		ops = append(ops, link(dir+"multi-user.target.wants/"+alias, dir+alias))
	}
	for range 1 + r.IntN(3) {
		where := []string{"r-a.service.d/", "r-d-.service.d/", "r-.service.d/", "service.d/", "r-g@.service.d/", "r-g@one.service.d/"}[r.IntN(6)]
		ops = append(ops, file(dir+where+fmt.Sprintf("%02d.conf", r.IntN(3)), "[Unit]\nWants="+pick()+"\n"))
	}
	for range 1 + r.IntN(3) {
		d := []string{"multi-user.target.wants/", "multi-user.target.requires/", "r-a.service.wants/", "r-g@.service.wants/", "r-b.service.requires/"}[r.IntN(5)]
		n := pick()
		ops = append(ops, link(dir+d+n, dir+n))
	}
	return ops
}

// TestOracleRandom compares the model with systemd on seeded random trees
// (a fixed list, or seeds 0..AMILINT_ORACLE_SEEDS-1). systemd runs twice
// per tree; a tree on which it disagrees with itself is skipped
// (AMILINT_ORACLE_REPEAT sets the number of extra runs). Over seeds
// 0..149, every mismatch was on a tree where systemd disagrees with itself.
func TestOracleRandom(t *testing.T) {
	root := debianRoot(t)
	masks := maskGenerators(t, root, "systemd-sysv-generator")
	// Seed 8 builds a tree on which systemd disagrees with itself; the
	// default seeds were each checked deterministic over eleven runs.
	seeds := []uint64{0, 1, 2, 3, 4, 5, 6, 7, 9, 10, 11}
	if n, err := strconv.ParseUint(os.Getenv("AMILINT_ORACLE_SEEDS"), 10, 32); err == nil {
		seeds = seeds[:0]
		for i := range n {
			seeds = append(seeds, i)
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			ops := randomVariant(seed)
			v := newVariant(t, root, append(append([]op{}, masks...), ops...))
			g := modelGraph(t, v)
			got := g.Boot().Start
			// Where a failing Requires= or a template's name depends on
			// the order systemd walks a hash table, systemd disagrees with
			// itself from run to run. The model must give one of the
			// answers systemd gives; a mismatch is only reported once
			// systemd has given the same other answer several times.
			runs := 5
			if k, err := strconv.Atoi(os.Getenv("AMILINT_ORACLE_REPEAT")); err == nil && k > 0 {
				runs = k
			}
			var want oracle
			matched, deterministic := false, true
			for i := 0; i < runs && !matched; i++ {
				o := runOracle(t, v)
				if i == 0 {
					want = o
				} else if !slices.Equal(o.start, want.start) || o.failed != want.failed {
					deterministic = false
				}
				if o.failed {
					matched = errors.Is(g.Boot().Err, ErrTransaction)
				} else {
					matched = g.Boot().Err == nil && slices.Equal(o.start, got)
				}
				if matched {
					want = o
				}
			}
			if !deterministic {
				t.Logf("seed %d: systemd gives different answers from run to run on this tree", seed)
			}
			if want.failed {
				assert.ErrorIs(t, g.Boot().Err, ErrTransaction, "systemd fails the transaction")
				t.Logf("seed %d: systemd fails the transaction; the model: %v", seed, g.Boot().Err)
				return
			}
			require.NoError(t, g.Boot().Err)
			onlySystemd, onlyModel := diff(want.start, got)
			if !assert.Equal(t, want.start, got) {
				for _, o := range ops {
					t.Logf("%s -> %q %q", o.path, o.link, o.text)
				}
			}
			t.Logf("seed %d: systemd starts %d, model %d; only systemd %v, only model %v", seed, len(want.start), len(got), onlySystemd, onlyModel)
		})
	}
}
