package boot

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/systemdtest"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// The oracles are systemd itself, 252 (Debian 12) and 257 (Debian 13):
// `systemd --test --system` computes the initial boot transaction offline
// and prints its jobs. systemdtest runs it chrooted in a cached Debian
// root with a variant's changes stacked over it (see systemdtest.Boot);
// the model reads the same stack (systemdtest.View).

// op is one change a variant makes to the root.
type op = systemdtest.Entry

func file(p, text string) op   { return systemdtest.File(p, text) }
func link(p, target string) op { return systemdtest.Link(p, target) }
func exe(p, text string) op    { return systemdtest.Exe(p, text) }

// variant is one systemd's root with a variant's changes stacked over it;
// every generator but systemd-sysv-generator and the package generators
// the model runs (pkgGenerators) is masked: the others write units from
// the running machine.
type variant struct {
	sd      systemdtest.Systemd
	upper   string
	machine systemdtest.Machine
}

func newVariant(t *testing.T, sd systemdtest.Systemd, ops []op) variant {
	t.Helper()
	keep := append([]string{sysvGenerator}, pkgGeneratorNames()...)
	return variant{sd: sd, upper: sd.Upper(t, append(sd.MaskGenerators(t, keep...), ops...))}
}

// oracle is systemd's transaction of the variant.
func (v variant) oracle(t *testing.T) systemdtest.Transaction {
	return v.sd.BootWith(t, v.upper, v.machine)
}

// oracleMachine is the machine systemd's transaction runs
// cloud-init-generator on: this host has no DMI (no /sys/class/dmi/id,
// and the roots ship no dmidecode), so ds-identify, on x86-64 with the
// default policy (notfound=disabled), finds no datasource of the roots'
// default list; and systemd --test runs generators as nobody, under
// which ds-identify cannot record one it would find (write_result
// fails). The model is told so rather than left to assume the cloud the
// image is built for.
var oracleMachine = Machine{Datasource: "none"}

// graph loads the variant with the package under test.
func (v variant) graph(t *testing.T) *Graph {
	t.Helper()
	g, err := LoadWith(v.sd.View(t, v.upper), v.sd.Version, Options{Machine: oracleMachine})
	require.NoError(t, err)
	return g
}

// modelStart returns the units the model starts; the transaction must
// succeed.
func modelStart(t *testing.T, v variant) ([]string, *Graph) {
	t.Helper()
	g := v.graph(t)
	b := g.Boot()
	require.NoError(t, b.Err)
	return b.Start, g
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

const svc = "[Service]\nExecStart=/bin/true\n"

// variants are unit trees built inside the Debian root, each exercising
// loader features against systemd.
func variants(t *testing.T) map[string][]op {
	ecs, err := os.ReadFile(filepath.Join("testdata", "ecs.service"))
	require.NoError(t, err)
	vs := map[string][]op{
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
		"ordering-cycles": orderingCycleOps(),
		"bad-settings":    badSettingOps(),
		"verify":          verifyOps(),
		"implicit-mounts": implicitMountOps(),
		// fstab_is_extrinsic: mounts of /, /usr and /etc themselves, below
		// /proc, /sys, /dev and /run/initramfs, and with x-initrd.mount
		// get no default ordering (local-fs-pre.target, local-fs.target);
		// below /usr or /etc they do.
		"extrinsic-mounts": extrinsicMountOps(),
		"listen":           listenOps(),
		"apivfs-workdir":   mountNSOps(),
		"unclean-utf8": {
			// A line that is not UTF-8 clean (a stray byte, a noncharacter,
			// in a value or a section name) fails the unit file, wherever
			// it is; in a drop-in it ends the read there.
			file("/etc/systemd/system/u-ff.service", "[Unit]\nDescription=\xff\n[Service]\nExecStart=/bin/true\n"),
			file("/etc/systemd/system/u-fffe.service", "[Unit]\nDescription=a\uFFFEb\n[Service]\nExecStart=/bin/true\n"),
			file("/etc/systemd/system/u-after.service", "[Service]\nExecStart=/bin/true\n[Unit]\nDescription=\xff\nWants=u-w1.service\n"),
			file("/etc/systemd/system/u-w1.service", svc),
			file("/etc/systemd/system/u-drop.service", svc),
			file("/etc/systemd/system/u-drop.service.d/a.conf", "[Unit]\nWants=u-w2.service\nDescription=\xff\nWants=u-w3.service\n"),
			file("/etc/systemd/system/u-w2.service", svc),
			file("/etc/systemd/system/u-w3.service", svc),
			file("/etc/systemd/system/u-sec.service", "[Unit\xff]\n[Service]\nExecStart=/bin/true\n"),
			file("/etc/systemd/system/u-fffd.service", "[Unit]\nDescription=\uFFFD\n[Service]\nExecStart=/bin/true\n"),
			link("/etc/systemd/system/multi-user.target.wants/u-ff.service", "/etc/systemd/system/u-ff.service"),
			link("/etc/systemd/system/multi-user.target.wants/u-fffe.service", "/etc/systemd/system/u-fffe.service"),
			link("/etc/systemd/system/multi-user.target.wants/u-after.service", "/etc/systemd/system/u-after.service"),
			link("/etc/systemd/system/multi-user.target.wants/u-drop.service", "/etc/systemd/system/u-drop.service"),
			link("/etc/systemd/system/multi-user.target.wants/u-sec.service", "/etc/systemd/system/u-sec.service"),
			link("/etc/systemd/system/multi-user.target.wants/u-fffd.service", "/etc/systemd/system/u-fffd.service"),
		},
	}
	maps.Copy(vs, generatorVariants(t))
	return vs
}

// orderingCycleOps is an ordering cycle systemd breaks the same way on
// every boot: a wanted service in a cycle with a required one loses its
// job, with the job of the service that requires it, while the one it
// wants keeps its job (an isolate collects no garbage).
func orderingCycleOps() []op {
	return []op{
		file("/etc/systemd/system/cyc-req.service", "[Unit]\nAfter=cyc-want.service\n"+svc),
		file("/etc/systemd/system/cyc-want.service", "[Unit]\nAfter=cyc-req.service\nWants=cyc-kept.service\n"+svc),
		file("/etc/systemd/system/cyc-kept.service", svc),
		file("/etc/systemd/system/cyc-needs.service", "[Unit]\nRequires=cyc-want.service\n"+svc),
		link("/etc/systemd/system/multi-user.target.requires/cyc-req.service", "/etc/systemd/system/cyc-req.service"),
		link("/etc/systemd/system/multi-user.target.wants/cyc-want.service", "/etc/systemd/system/cyc-want.service"),
		link("/etc/systemd/system/multi-user.target.wants/cyc-needs.service", "/etc/systemd/system/cyc-needs.service"),
	}
}

// TestOracleCycles compares ordering cycles with systemd's: the one
// systemd breaks the same way every time (see orderingCycleOps); the
// classic one of a service with default dependencies ordered
// Before=sysinit.target (it starts after basic.target, which starts after
// sysinit.target and sockets.target, after which the sockets start):
// systemd deletes the service's job or a socket's, whichever it meets
// first walking back the cycle it found, which depends on hash-table
// order; two merely wanted services ordered after each other, one of
// which systemd deletes; and a cycle of required jobs only, which fails
// the transaction.
func TestOracleCycles(t *testing.T) {
	early := []op{
		file("/etc/systemd/system/cyc-early.service", "[Unit]\nBefore=sysinit.target\n"+svc),
		link("/etc/systemd/system/multi-user.target.wants/cyc-early.service", "/etc/systemd/system/cyc-early.service"),
	}
	cases := map[string]struct {
		ops []op
		// deletable are units the model's cycles must have as
		// candidates, uncertain units it must leave uncertain.
		deletable, uncertain []string
		certain              bool // the model applies every deletion
	}{
		"deterministic": {ops: orderingCycleOps(), deletable: []string{"cyc-want.service"}, certain: true},
		"early": {ops: early, deletable: []string{"cyc-early.service", "sockets.target"},
			uncertain: []string{"cyc-early.service", "sockets.target"}},
		"wanted": {ops: []op{
			file("/etc/systemd/system/cyc-w1.service", "[Unit]\nAfter=cyc-w2.service\n"+svc),
			file("/etc/systemd/system/cyc-w2.service", "[Unit]\nAfter=cyc-w1.service\n"+svc),
			link("/etc/systemd/system/multi-user.target.wants/cyc-w1.service", "/etc/systemd/system/cyc-w1.service"),
			link("/etc/systemd/system/multi-user.target.wants/cyc-w2.service", "/etc/systemd/system/cyc-w2.service"),
		}, deletable: []string{"cyc-w1.service", "cyc-w2.service"}, uncertain: []string{"cyc-w1.service", "cyc-w2.service"}},
		"requires": {ops: []op{
			file("/etc/systemd/system/cyc-r1.service", "[Unit]\nRequires=cyc-r2.service\nAfter=cyc-r2.service\n"+svc),
			file("/etc/systemd/system/cyc-r2.service", "[Unit]\nAfter=cyc-r1.service\n"+svc),
			link("/etc/systemd/system/multi-user.target.requires/cyc-r1.service", "/etc/systemd/system/cyc-r1.service"),
		}, certain: true},
	}
	for _, sd := range systemdtest.Versions() {
		for name, c := range cases {
			t.Run(sd.Name()+"/"+name, func(t *testing.T) {
				v := newVariant(t, sd, c.ops)
				b := v.graph(t).Boot()
				require.NotEmpty(t, b.Cycles)
				var deletable []string
				for _, cy := range b.Cycles {
					deletable = append(deletable, cy.Deletable...)
				}
				for _, d := range c.deletable {
					assert.Contains(t, deletable, d)
				}
				for _, u := range c.uncertain {
					assert.Contains(t, b.Uncertain, u)
				}
				if c.certain {
					assert.Empty(t, b.Uncertain)
				}
				strip := func(l []string) []string {
					return slices.DeleteFunc(slices.Clone(l), func(u string) bool { return slices.Contains(b.Uncertain, u) })
				}
				got := modelOutcome(b)
				// Several runs: systemd's choice changes from run to run.
				for range 4 {
					tr := v.oracle(t)
					assert.NotEmpty(t, tr.Cycles, "systemd found no ordering cycle")
					for _, d := range tr.CycleDeleted {
						assert.Contains(t, deletable, d, "systemd deleted it to break a cycle")
					}
					want := oracleOutcome(tr)
					assert.Equal(t, want.failed, got.failed)
					assert.Equal(t, strip(want.start), strip(got.start))
				}
			})
		}
	}
}

// sameStart asserts that the model starts exactly the units systemd's
// transaction of the variant does, which must succeed, and returns both
// and the model's graph.
func sameStart(t *testing.T, sd systemdtest.Systemd, name string, ops []op) (systemdtest.Transaction, []string, *Graph) {
	t.Helper()
	v := newVariant(t, sd, ops)
	want := v.oracle(t)
	require.Empty(t, want.Failed, "systemd fails the transaction")
	got, g := modelStart(t, v)
	onlySystemd, onlyModel := diff(want.Start, got)
	t.Logf("%s: systemd %d starts %d units, the model %d; only systemd: %v; only model: %v",
		name, sd.Version, len(want.Start), len(got), onlySystemd, onlyModel)
	assert.Equal(t, want.Start, got)
	return want, got, g
}

// TestOracle compares the units the model starts at boot with the start
// jobs of systemd's own initial transaction, on each Debian root and on
// variants of it. Generators are hidden from systemd (see newVariant);
// TestOracleGenerators measures what they add.
func TestOracle(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		for name, ops := range variants(t) {
			t.Run(sd.Name()+"/"+name, func(t *testing.T) {
				want, got, g := sameStart(t, sd, name, ops)

				// Activation: every started trigger unit triggers, per
				// systemd, exactly the loadable units the model says.
				b := g.Boot()
				for _, u := range got {
					for _, tr := range want.Triggers[u] {
						if tu := g.Unit(tr); tu != nil && tu.State == Loaded {
							assert.Contains(t, b.ActivatedBy[tu.Name], u, "%s triggers %s", u, tr)
						}
					}
				}
			})
		}
	}
}

// TestOracleChains checks the chains of the DLAMI-like variant: the
// incident unit starts because default.target is an alias of
// multi-user.target, whose .wants directory links ecs.service.
func TestOracleChains(t *testing.T) {
	sd := systemdtest.Bookworm
	_, g := modelStart(t, variant{sd: sd, upper: sd.Upper(t, append(sd.MaskGenerators(t), variants(t)["ecs-dlami"]...))})
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

// TestOracleGenerators runs systemd with every generator of the root and
// checks that the model, which runs the generators it ports
// (pkgGenerators) and systemd-sysv-generator, starts exactly the units
// systemd starts. The machine-dependent generators add nothing on the
// Debian roots (systemd-ssh-generator's vsock listener needs a vsock
// device the test machine does not give systemd). On a root with
// the packages (AMILINT_DEBIAN_ROOT and AMILINT_TRIXIE_ROOT set to roots
// built by make wide-root), it proves their clusters, tunnels, instances
// and rpc_pipefs mount start as they do under systemd.
func TestOracleGenerators(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		t.Run(sd.Name(), func(t *testing.T) {
			v := variant{sd: sd}
			want := v.oracle(t)
			got, _ := modelStart(t, v)
			onlySystemd, onlyModel := diff(want.Start, got)
			t.Logf("with generators systemd %d starts %d units, the model %d; only systemd: %v",
				sd.Version, len(want.Start), len(got), onlySystemd)
			assert.Empty(t, onlyModel)
			assert.Empty(t, onlySystemd, "a generator's unit the model misses")
		})
	}
}

// BenchmarkBootDebian measures Load and Boot on the cached Debian root
// (compare: systemd --test on the same root, printed once per run).
func BenchmarkBootDebian(b *testing.B) {
	dir := systemdtest.Bookworm.Root.Path(b)
	src, err := rootfs.OpenDir(dir)
	require.NoError(b, err)
	defer src.Close()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		g, err := Load(rootfs.New(src), 0)
		require.NoError(b, err)
		n = len(g.Boot().Start)
	}
	b.ReportMetric(float64(n), "units")
}

// TestOracleLoadErrors compares the failed transaction when
// multi-user.target requires a unit systemd leaves in the error state:
// the message names the error number of the cause (a line that is not
// UTF-8 clean, a bad section header, a PID file path or an image policy
// systemd refuses), not the model's account of it.
func TestOracleLoadErrors(t *testing.T) {
	cases := map[string]string{
		"utf8":      "[Unit]\nDescription=\xff\n" + svc,
		"section":   "[Unit\n" + svc,
		"pidfile":   svc + "PIDFile=/a/../b\n",
		"ip-dup":    svc + "RootImagePolicy=root=open:root=open\n",
		"ip-part":   svc + "RootImagePolicy=rooot=open\n",
		"ip-flag":   svc + "RootImagePolicy=root=sined\n",
		"ip-syntax": svc + "RootImagePolicy=root\n",
	}
	for _, sd := range systemdtest.Versions() {
		for name, text := range cases {
			t.Run(sd.Name()+"/"+name, func(t *testing.T) {
				v := newVariant(t, sd, []op{
					file("/etc/systemd/system/le.service", text),
					link("/etc/systemd/system/multi-user.target.requires/le.service", "/etc/systemd/system/le.service"),
				})
				want := oracleOutcome(v.oracle(t))
				got := modelOutcome(v.graph(t).Boot())
				assert.Equal(t, want.failed, got.failed)
				assert.Equal(t, want.start, got.start)
			})
		}
	}
}

// extrinsicMountOps are tmpfs mounts multi-user.target wants, each where
// fstab_is_extrinsic does or does not leave it out of the default
// ordering.
func extrinsicMountOps() []op {
	var ops []op
	for name, opts := range map[string]string{
		"proc-fs-x.mount":       "",
		"sys-kernel-x.mount":    "",
		"dev-x.mount":           "",
		"run-initramfs-x.mount": "",
		"etc.mount":             "",
		"usr.mount":             "",
		"usr-local.mount":       "",
		"etc-x.mount":           "",
		"srv-initrd.mount":      "Options=x-initrd.mount\n",
		"srv-plain.mount":       "Options=mode=0755\n",
		"procx.mount":           "",
		"mnt-nfs.mount":         "",
		"proc-nfs.mount":        "",
	} {
		where := "/" + strings.ReplaceAll(strings.TrimSuffix(name, ".mount"), "-", "/")
		if name == "etc.mount" || name == "usr.mount" || name == "procx.mount" {
			where = "/" + strings.TrimSuffix(name, ".mount")
		}
		// A network mount wants network-online.target by default, an
		// extrinsic one does not.
		what, fstype := "tmpfs", "tmpfs"
		if strings.Contains(name, "nfs") {
			what, fstype = "srv:/export", "nfs"
		}
		ops = append(ops,
			file("/etc/systemd/system/"+name, "[Mount]\nWhat="+what+"\nWhere="+where+"\nType="+fstype+"\n"+opts),
			link("/etc/systemd/system/multi-user.target.wants/"+name, "/etc/systemd/system/"+name))
	}
	return ops
}
