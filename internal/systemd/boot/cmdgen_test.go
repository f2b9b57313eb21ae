package boot

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/systemdtest"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// debugCmdlines are kernel command lines for systemd-debug-generator:
// the switches, their "-" spellings, rd. words, runlevels, and values
// unit_name_mangle escapes or refuses (which ends the parse).
var debugCmdlines = []string{
	"",
	"quiet systemd.debug_shell",
	"systemd.debug_shell=1",
	"systemd.debug_shell=0",
	"systemd.debug_shell=no systemd.debug_shell=/dev/ttyS0",
	"systemd.debug_shell=tty9",
	"systemd.debug_shell=//dev/./tty9",
	"systemd.debug_shell=/dev/tty9/",
	"systemd.debug-shell=ttyS1 systemd.debug_shell=yes",
	"systemd.debug_shell=ttyS1 systemd.debug_shell=0",
	"systemd.default_debug_tty=tty3 systemd.debug_shell",
	"systemd.default-debug-tty=/dev/tty9 systemd.debug_shell=1",
	"systemd.default_debug_tty=tty4",
	"systemd.debug_shell= systemd.wants=debug-shell.service",
	"systemd.debug_shell=/dev/ systemd.debug_shell=%n",
	"systemd.mask=ssh.service systemd.mask=ssh systemd.mask=/dev/sda1 systemd.mask=/srv/data systemd.mask=foo@bar",
	"systemd.mask=a.service systemd.mask=a.service systemd.mask=/ systemd.mask=foo.bar systemd.mask=* systemd.mask=x*.service",
	"systemd.mask=/dev/../x systemd.mask=/../dev/sda systemd.mask=/a//b/./c/ systemd.mask=./rel/x",
	"systemd.wants=foo.service systemd.wants=bar.timer systemd.unit=rescue.target",
	"systemd.mask= systemd.mask=after.service",
	"systemd.wants=@x systemd.wants=after.service systemd.debug_shell",
	"systemd.mask systemd.wants 'systemd.wants=a b.service' \"systemd.mask=x\\y\" systemd-mask=z.service",
	"single systemd.wants=a.service",
	"3 emergency systemd.wants=a.service S",
	"systemd.unit= systemd.wants=a.service",
	"systemd.unit=a/b systemd.wants=x.service",
	"systemd.unit=a/../b.target systemd.wants=x.service",
	"systemd.unit=../escape systemd.wants=x.service",
	"systemd.mask=x.service systemd.unit=x.service/y systemd.wants=z.service",
	"rd.systemd.mask=x.service rd.systemd.debug_shell rd.single systemd.mask=rd.service",
	"systemd.wants=" + strings.Repeat("a", 300) + " systemd.wants=b.service",
	"systemd.mask=/" + strings.Repeat("d", 300) + " systemd.mask=c.service",
	"systemd.wants=\"unterminated.service",
	"systemd.wants=multi-user.target systemd.unit=multi-user.target",
}

// runCmdlines are kernel command lines for systemd-run-generator.
var runCmdlines = []string{
	"",
	"systemd.run=/bin/true",
	"systemd.run=\"echo hello world\" systemd.run=/bin/false",
	"systemd.run_success_action=none",
	"systemd.run=x systemd.run_success_action=reboot systemd.run_failure_action=none",
	"systemd.run_failure_action=poweroff",
	"systemd-run=/bin/true",
	"systemd.run-success-action=halt systemd.run=%h/x",
	"systemd.run= systemd.run",
	"systemd.run=\"true\n[Unit]\nWants=x.service\"",
	"rd.systemd.run=/bin/true",
	"systemd.run=echo\\ hi 'systemd.run=a \"b\"'",
	"systemd.run=\"unterminated",
	"systemd.run=a systemd.run=a systemd.run_failure_action=exit-force systemd.run_failure_action=none",
	"systemd.run_success_action= systemd.run=x",
	"systemd.run_success_action systemd.run_failure_action=reboot",
}

// genFiles is what generators wrote into the three directories, by path
// below them ("normal/…", "early/…", "late/…"): "dir", "-> TARGET" or the
// file's text.
type genFiles map[string]string

var genDirNames = map[string]string{genDirNormal: "normal", genDirEarly: "early", genDirLate: "late"}

// realGenerator runs the generator name of sd chrooted in its root with
// the kernel command line cmdline (SYSTEMD_PROC_CMDLINE) and returns what
// it wrote.
func realGenerator(t *testing.T, sd systemdtest.Systemd, name, cmdline string) genFiles {
	t.Helper()
	tree := t.TempDir()
	for _, d := range []string{"normal", "early", "late"} {
		require.NoError(t, os.Mkdir(filepath.Join(tree, d), 0o755))
	}
	o := sd.Run(t, tree, "env", "SYSTEMD_PROC_CMDLINE="+cmdline, "SYSTEMD_LOG_LEVEL=debug",
		"/lib/systemd/system-generators/"+name, systemdtest.Tree+"/normal", systemdtest.Tree+"/early", systemdtest.Tree+"/late")
	t.Logf("%s %q: exit %d\n%s%s", name, cmdline, o.ExitCode(), o.Stderr, o.Stdout)
	return walkGenFiles(t, tree)
}

// walkGenFiles is what the generator wrote into tree's three directories.
func walkGenFiles(t *testing.T, tree string) genFiles {
	t.Helper()
	got := genFiles{}
	for _, d := range []string{"normal", "early", "late"} {
		root := filepath.Join(tree, d)
		require.NoError(t, filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
			require.NoError(t, err)
			if p == root {
				return nil
			}
			rel := d + "/" + filepath.ToSlash(p[len(root)+1:])
			switch {
			case e.Type()&fs.ModeSymlink != 0:
				target, err := os.Readlink(p)
				require.NoError(t, err)
				got[rel] = "-> " + target
			case e.IsDir():
				got[rel] = "dir"
			default:
				data, err := os.ReadFile(p)
				require.NoError(t, err)
				got[rel] = string(data)
			}
			return nil
		}))
	}
	return got
}

// modelGenerator runs the model's port run of the generator name over
// fsys with the kernel command line cmdline and returns what it wrote.
func modelGenerator(t *testing.T, fsys *rootfs.FS, version int, name string, run func(genRun), cmdline string) genFiles {
	t.Helper()
	out := newGenOut()
	for d := range genDirNames {
		out.mkdirAll(d)
	}
	exe := generatorPath(fsys, name)
	require.NotEmpty(t, exe, "the root has no %s", name)
	run(genRun{fsys: fsys, out: out, exe: exe, version: version, cmdline: cmdline})
	return genOutFiles(out)
}

// genOutFiles is what the model wrote into out's three directories.
func genOutFiles(out *genOut) genFiles {
	got := genFiles{}
	for p, n := range out.nodes {
		for d, short := range genDirNames {
			rest, ok := strings.CutPrefix(p, d+"/")
			if !ok {
				continue
			}
			switch {
			case n.mode&fs.ModeSymlink != 0:
				got[short+"/"+rest] = "-> " + n.target
			case n.IsDir():
				got[short+"/"+rest] = "dir"
			default:
				got[short+"/"+rest] = string(n.data)
			}
		}
	}
	return got
}

// TestOracleCmdlineGenerators runs the real systemd-debug-generator and
// systemd-run-generator of each version on each command line and compares
// the trees they write, links, directories and file texts, with the
// model's.
func TestOracleCmdlineGenerators(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		fsys := sd.View(t, "")
		for _, g := range []struct {
			name     string
			run      func(genRun)
			cmdlines []string
		}{{debugGeneratorName, genDebug, debugCmdlines}, {runGeneratorName, genRunCmd, runCmdlines}} {
			for i, cmdline := range g.cmdlines {
				t.Run(fmt.Sprintf("%s/%s/%02d", sd.Name(), g.name, i), func(t *testing.T) {
					t.Parallel()
					want := realGenerator(t, sd, g.name, cmdline)
					got := modelGenerator(t, fsys, sd.Version, g.name, g.run, cmdline)
					assert.Equal(t, want, got, "%q", cmdline)
				})
			}
		}
	}
}

// TestDebugTTYIn reads DEBUGTTY from the generators of both Debian roots
// and from made-up executables.
func TestDebugTTYIn(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		data, err := os.ReadFile(filepath.Join(sd.Path(t), "usr/lib/systemd/system-generators", debugGeneratorName))
		require.NoError(t, err)
		assert.Equal(t, "/dev/tty9", debugTTYIn(data), "systemd %d", sd.Version)
	}
	for in, want := range map[string]string{
		"\x00/dev/tty1\x00/dev/null\x00/dev/\x00":        "/dev/tty1",
		"\x00/dev/tty1\x00/dev/tty2\x00":                 "",
		"\x00/dev/%s\x00/dev/ttyS0\x00":                  "/dev/ttyS0",
		"\x00/dev/tty1":                                  "",
		"/dev/tty1\x00":                                  "",
		"\x00/dev/my tty\x00":                            "",
		"\x00/dev/null\x00":                              "",
		"\x00/dev/tty1\x00/dev/tty1\x00":                 "/dev/tty1",
		"\x00/dev/" + strings.Repeat("t", 5000) + "\x00": "",
	} {
		assert.Equal(t, want, debugTTYIn([]byte(in)), "%q", in)
	}
}

// TestPathHelpers checks skip_dev_prefix and path_equal on the forms the
// generators meet.
func TestPathHelpers(t *testing.T) {
	for in, want := range map[string]string{
		"/dev/tty1": "tty1", "tty1": "tty1", "//dev//./tty1/": "tty1/", "/dev": "", "/dev/": "", "/dev/.": "",
		"/devx/tty1": "/devx/tty1", "dev/tty1": "dev/tty1", "/./dev/../x": "../x", "": "",
		"/dev/" + strings.Repeat("x", 256): "/dev/" + strings.Repeat("x", 256),
	} {
		assert.Equal(t, want, skipDevPrefix(in), "%q", in)
	}
	for _, c := range []struct {
		a, b string
		eq   bool
	}{{"tty9", "tty9", true}, {"tty9/", "tty9", true}, {"./tty9", "tty9", true}, {"tty9/.", "tty9", true},
		{"/tty9", "tty9", false}, {"", "tty9", false}, {"", "", true}, {"a//b", "a/b", true}, {"a/../b", "b", false}} {
		assert.Equal(t, c.eq, pathEqual(c.a, c.b), "%q %q", c.a, c.b)
	}
}

// TestCmdlineGeneratorsModel: the generators run only with their
// executable, and write into the directories PID 1 reads.
func TestCmdlineGeneratorsModel(t *testing.T) {
	gen := &fstest.MapFile{Data: []byte("\x00/dev/tty9\x00"), Mode: 0o755}
	m := fstest.MapFS{
		"usr/lib/systemd/system-generators/" + debugGeneratorName: gen,
		"usr/lib/systemd/system-generators/" + runGeneratorName:   gen,
	}
	cmdline := "systemd.debug_shell=ttyS0 systemd.mask=ssh.service systemd.run=/bin/true"
	out := runGenerators(rootfs.New(m), 257, cmdline, Machine{})
	for _, n := range []string{
		genDirEarly + "/default.target.wants/debug-shell.service",
		genDirEarly + "/debug-shell.service.d/50-tty.conf",
		genDirEarly + "/ssh.service",
		genDirNormal + "/kernel-command-line.service",
		genDirNormal + "/default.target",
	} {
		_, err := out.lstat(n)
		assert.NoError(t, err, n)
	}
	target, err := out.readLink(genDirEarly + "/default.target.wants/debug-shell.service")
	require.NoError(t, err)
	assert.Equal(t, "/usr/lib/systemd/system/debug-shell.service", target)
	delete(m, "usr/lib/systemd/system-generators/"+debugGeneratorName)
	delete(m, "usr/lib/systemd/system-generators/"+runGeneratorName)
	out = runGenerators(rootfs.New(m), 257, cmdline, Machine{})
	assert.Len(t, out.nodes, 1, "no generator, no output")
}

// FuzzCmdlineGenerators runs the ported generators over arbitrary command
// lines (systemd-getty-generator on a Xen guest): they never panic, write
// only into the generator directories, a console is one the command line
// names, and their output loads.
func FuzzCmdlineGenerators(f *testing.F) {
	for _, c := range append(append([]string{}, debugCmdlines...), runCmdlines...) {
		f.Add(c)
	}
	for _, c := range gettyCases {
		f.Add(c.cmdline)
	}
	for _, c := range cmdlineUnitCases {
		f.Add(c.cmdline)
	}
	f.Fuzz(func(t *testing.T, cmdline string) {
		if len(cmdline) > 8<<10 {
			return
		}
		fsys := mapRoot(map[string]string{
			"usr/lib/systemd/system-generators/" + debugGeneratorName: "\x00/dev/tty9\x00",
			"usr/lib/systemd/system-generators/" + runGeneratorName:   "x",
			"usr/lib/systemd/system-generators/" + gettyGeneratorName: "x",
		})
		for p, mf := range fsys.Source().(fstest.MapFS) {
			if strings.HasPrefix(p, "usr/") {
				mf.Mode = 0o755
			}
		}
		for _, v := range []int{252, 257} {
			g, err := LoadWith(fsys, v, Options{CmdLine: cmdline, CmdLineSet: true, Machine: Machine{Virtualization: "xen"}})
			if err != nil {
				t.Fatal(err)
			}
			for _, tty := range kernelConsoles(cmdline) {
				if !strings.Contains(cmdline, tty[:len(tty)-1]) && !strings.HasPrefix(tty, "ttyS") {
					t.Fatalf("console %q not named in %q", tty, cmdline)
				}
			}
			for name := range g.gen.nodes {
				if name != RunDir && name != "run/systemd" && !strings.HasPrefix(name, "run/systemd/generator") {
					t.Fatalf("wrote %q", name)
				}
			}
			b := g.Boot()
			if u := pid1BootUnit(cmdline); u != "" && (!unit.Valid(u) || unit.IsTemplate(u) || b.CmdLineUnit != u) {
				t.Fatalf("boot unit %q (boot's %q) of %q", u, b.CmdLineUnit, cmdline)
			}
		}
	})
}

// cmdlineBootCases are kernel command lines whose generator output changes
// the boot transaction: a debug shell (on tty9, or moved), a masked
// service that was enabled, a unit added to the default target's wants,
// and a command run in place of the default target.
var cmdlineBootCases = map[string]string{
	"debug-shell":      "quiet systemd.debug_shell",
	"mask-ssh":         "systemd.mask=ssh.service systemd.debug_shell=ttyS0",
	"wants-mask":       "systemd.wants=systemd-networkd.service systemd.mask=cron systemd.mask=/var/lib",
	"run":              "systemd.run=/bin/true systemd.run_success_action=none",
	"run-failure-only": "systemd.run_failure_action=reboot systemd.wants=tmp.mount",
	"rd-only":          "rd.systemd.debug_shell rd.systemd.mask=ssh.service rd.systemd.run=/bin/true",
}

// TestOracleCmdlineBoot boots systemd with the real generators and the
// kernel command line of each case and compares the units it starts, and
// the unit default.target names, with the model's, which reads the command
// line from /etc/kernel/cmdline.
func TestOracleCmdlineBoot(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		for name, cmdline := range cmdlineBootCases {
			t.Run(sd.Name()+"/"+name, func(t *testing.T) {
				t.Parallel()
				v := newVariant(t, sd, []op{file("/etc/kernel/cmdline", cmdline)})
				v.machine = systemdtest.Machine{CmdLine: &cmdline}
				want := v.oracle(t)
				require.Empty(t, want.Failed, "systemd fails the transaction")
				got, g := modelStart(t, v)
				onlySystemd, onlyModel := diff(want.Start, got)
				t.Logf("%s: systemd %d starts %d units, the model %d; only systemd: %v; only model: %v",
					name, sd.Version, len(want.Start), len(got), onlySystemd, onlyModel)
				assert.Equal(t, want.Start, got)
				assert.Equal(t, want.Default, g.Boot().Default)
			})
		}
	}
}

// cmdlineUnitCases are kernel command lines naming the unit PID 1 starts
// in default.target's place, with that unit as parse_proc_cmdline_item of
// systemd's main.c takes it (252 and 257 alike): the last systemd.unit=
// naming a plain or instance unit, or runlevel word; a template name, a
// value-less systemd.unit and rd.systemd.unit are ignored outside the
// initrd.
var cmdlineUnitCases = map[string]struct{ cmdline, unit string }{
	"unit-multi-user": {"quiet systemd.unit=multi-user.target", "multi-user.target"},
	"runlevel-3":      {"ro 3", "multi-user.target"},
	"runlevel-last":   {"systemd.unit=emergency.target 2", "multi-user.target"},
	"unit-last":       {"single systemd.unit=multi-user.target", "multi-user.target"},
	"unit-template":   {"systemd.unit=multi-user.target systemd.unit=getty@.service", "multi-user.target"},
	"unit-no-value":   {"3 systemd.unit", "multi-user.target"},
	"unit-rd":         {"rd.systemd.unit=rescue.target", ""},
	"unit-missing":    {"systemd.unit=nothere.target", "nothere.target"},
	"unit-service":    {"systemd.unit=ssh.service systemd.wants=cron.service", "ssh.service"},
	"unit-rescue":     {"systemd.unit=rescue.target", "rescue.target"},
	"unit-emergency":  {"emergency", "emergency.target"},
	"unit-instance":   {"systemd.unit=getty@tty3.service", "getty@tty3.service"},
}

// TestOracleCmdlineBootUnit: the unit PID 1 starts in default.target's
// place. systemd --test does not read the kernel command line (only PID 1
// does), so it is given the unit the case states with --unit=, and the
// model, which reads the command line from /etc/kernel/cmdline, must take
// that unit from it and start what systemd starts, falling back to
// rescue.target alike.
func TestOracleCmdlineBootUnit(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		for name, c := range cmdlineUnitCases {
			t.Run(sd.Name()+"/"+name, func(t *testing.T) {
				t.Parallel()
				require.Equal(t, c.unit, pid1BootUnit(c.cmdline))
				v := newVariant(t, sd, []op{file("/etc/kernel/cmdline", c.cmdline)})
				cmdline := c.cmdline
				v.machine = systemdtest.Machine{CmdLine: &cmdline, Unit: c.unit}
				want := v.oracle(t)
				got, g := modelStart(t, v)
				onlySystemd, onlyModel := diff(want.Start, got)
				t.Logf("%s: systemd %d starts %d units, the model %d (root %s); only systemd: %v; only model: %v",
					name, sd.Version, len(want.Start), len(got), g.Boot().Root, onlySystemd, onlyModel)
				assert.Equal(t, want.Start, got)
				failed := ""
				if f := g.Boot().Failure; f != nil {
					failed = f.Reason
				}
				assert.Equal(t, want.Failed, failed)
				if c.unit == "" {
					assert.Equal(t, "graphical.target", g.Boot().Root)
				}
			})
		}
	}
}

// FuzzMangleUnitName: unit_name_mangle's port gives a valid unit name or
// refuses, and keeps a valid one as it is.
func FuzzMangleUnitName(f *testing.F) {
	for _, s := range []string{"ssh", "ssh.service", "/dev/sda1", "/srv//x/", "@x", "a b", "/", "foo.bar", "/../dev/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 8<<10 {
			return
		}
		for _, v := range []int{252, 257} {
			n, res := mangleUnitName(v, s, ".service")
			if res == mangleOK && !unit.Valid(n) || res != mangleOK && n != "" {
				t.Fatalf("%q: %q %d", s, n, res)
			}
			if unit.Valid(s) && n != s {
				t.Fatalf("%q: mangled to %q", s, n)
			}
		}
	})
}

// gettyCase is a kernel command line and assumed virtualization for the
// model, and the machine the real systemd-getty-generator sees for them:
// /sys/class/tty/console/active as the kernel writes it, and the tty
// devices under /dev (opened by verify_tty, or only checked to exist).
type gettyCase struct {
	cmdline, virt string
	active        string
	devs          []string
}

// gettyCases state the model's assumptions about the kernel: one
// registered console per driver (the first console= naming it), the
// virtual terminals listed but skipped, Xen's hvc0.
var gettyCases = []gettyCase{
	{cmdline: "", active: "tty0"},
	{cmdline: "ro console=ttyS0,115200n8", active: "ttyS0", devs: []string{"ttyS0"}},
	{cmdline: "console=tty0 console=ttyS0,115200 earlyprintk=ttyS0,115200", active: "tty0 ttyS0", devs: []string{"ttyS0"}},
	{cmdline: "console=ttyS0 console=ttyS1", active: "ttyS0", devs: []string{"ttyS0", "ttyS1"}},
	{cmdline: "console=ttyS1 console=tty1 console=ttyS0", active: "ttyS1 tty1", devs: []string{"ttyS0", "ttyS1"}},
	{cmdline: "console=hvc0", virt: "xen", active: "hvc0", devs: []string{"hvc0"}},
	{cmdline: "console=tty0", virt: "xen", active: "tty0", devs: []string{"hvc0"}},
	{cmdline: "console=tty0", virt: "kvm", active: "tty0"},
	{cmdline: "systemd.getty_auto=0 console=ttyS0", virt: "xen", active: "ttyS0", devs: []string{"ttyS0", "hvc0"}},
	{cmdline: "systemd.getty-auto=no systemd.getty_auto console=ttyS0", active: "ttyS0", devs: []string{"ttyS0"}},
	{cmdline: "systemd.getty_auto=bogus console=ttyS0", active: "ttyS0", devs: []string{"ttyS0"}},
	{cmdline: "rd.systemd.getty_auto=0 console=ttyAMA0,115200 console=tty1", active: "ttyAMA0 tty1", devs: []string{"ttyAMA0"}},
	{cmdline: "console=0,9600", active: "ttyS0", devs: []string{"ttyS0"}},
	{cmdline: "console=ttyS", active: "ttyS0", devs: []string{"ttyS0"}},
	{cmdline: "console=ttyS0 console=ttyS0,9600 \"console=hvc1\"", active: "ttyS0 hvc1", devs: []string{"ttyS0", "hvc1"}},
	{cmdline: "console=ttyS0 -- console=ttyS1 systemd.getty_auto=0", active: "ttyS0", devs: []string{"ttyS0"}},
	{cmdline: "console=null console=lp0 console=netcon0", active: ""},
	{cmdline: "console=uart8250,io,0x3f8,115200", active: ""},
}

// TestOracleGetty runs the real systemd-getty-generator of each version
// as PID 1 of a new PID namespace with $container empty (detect_container:
// no container, whatever the test host is), with each case's kernel
// consoles and devices, and compares the links it writes with the
// model's.
func TestOracleGetty(t *testing.T) {
	// In the chroot: a /sys and /dev of the case's own, a devpts for the
	// tty devices (each a ptmx node: it opens as a terminal).
	const script = `set -e
active=$1 devs=$2 cmdline=$3
mount -t tmpfs tmpfs /sys
mkdir -p /sys/class/tty/console
printf '%s\n' "$active" > /sys/class/tty/console/active
mount -t tmpfs tmpfs /dev
mknod /dev/null c 1 3
mkdir /dev/pts
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
for d in $devs; do mkdir -p "$(dirname "/dev/$d")"; mknod "/dev/$d" c 5 2; done
exec unshare --pid --fork env -i container= SYSTEMD_PROC_CMDLINE="$cmdline" SYSTEMD_LOG_LEVEL=debug \
	/lib/systemd/system-generators/systemd-getty-generator ` + systemdtest.TreeMount + `/normal ` + systemdtest.TreeMount + `/early ` + systemdtest.TreeMount + `/late`
	for _, sd := range systemdtest.Versions() {
		fsys := sd.View(t, "")
		for i, c := range gettyCases {
			t.Run(fmt.Sprintf("%s/%02d", sd.Name(), i), func(t *testing.T) {
				t.Parallel()
				tree := t.TempDir()
				for _, d := range []string{"normal", "early", "late"} {
					require.NoError(t, os.Mkdir(filepath.Join(tree, d), 0o755))
				}
				o := sd.Run(t, tree, "sh", "-c", script, "sh", c.active, strings.Join(c.devs, " "), c.cmdline)
				t.Logf("%q: exit %d\n%s%s", c.cmdline, o.ExitCode(), o.Stderr, o.Stdout)
				require.NoError(t, o.Err)
				if !strings.Contains(string(o.Stderr), "Disabled, exiting.") {
					require.Contains(t, string(o.Stderr), "Found container virtualization none")
				}
				want := walkGenFiles(t, tree)
				out := newGenOut()
				for d := range genDirNames {
					out.mkdirAll(d)
				}
				exe := generatorPath(fsys, gettyGeneratorName)
				require.NotEmpty(t, exe)
				genGetty(genRun{fsys: fsys, out: out, exe: exe, version: sd.Version, cmdline: c.cmdline, machine: Machine{Virtualization: c.virt}})
				assert.Equal(t, want, genOutFiles(out), "%q on %q", c.cmdline, c.virt)
			})
		}
	}
}

// TestKernelConsoles checks the kernel's parameter split and console
// names on the forms it meets.
func TestKernelConsoles(t *testing.T) {
	assert.Equal(t, []string{"a", "b=c d", "e=f", "g"}, kernelParams(` a b="c d" "e=f" "g" -- x=y`))
	assert.Equal(t, []string{"h=i --  x"}, kernelParams(`h="i --  x`))
	assert.Equal(t, []string{"x=a\"b"}, kernelParams(`x="a"b"`))
	assert.Equal(t, []string{"ttyS0", "hvc0", "ttyAMA1"},
		kernelConsoles("console=tty0 console=ttyS0,115200 console=hvc0 console=ttyS1 console=ttyAMA1 console=x:0.0 console=brl,ttyS2 console=ttyS99999"))
	assert.Empty(t, kernelConsoles("console=tty1 console="+strings.Repeat("t", 20)+"0"))
	// MAX_CMDLINECONSOLES: the ninth distinct console is not registered.
	assert.Equal(t, []string{"ttyA0", "ttyB0", "ttyC0", "ttyD0", "ttyE0", "ttyF0", "ttyG0", "ttyH0"},
		kernelConsoles("console=ttyA console=ttyB console=ttyC console=ttyD console=ttyE console=ttyF console=ttyG console=ttyH console=ttyI"))
}

// TestGettyBoot: on a Debian root, the serial consoles of the command line
// and Xen's hvc0 start a getty at boot (getty.target is wanted by
// multi-user.target), unless systemd.getty_auto=no.
func TestGettyBoot(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		fsys := sd.View(t, "")
		boot := func(cmdline, virt string) *Boot {
			g, err := LoadWith(fsys, sd.Version, Options{CmdLine: cmdline, CmdLineSet: true, Machine: Machine{Virtualization: virt}})
			require.NoError(t, err)
			b := g.Boot()
			require.NoError(t, b.Err)
			return b
		}
		b := boot("console=tty0 console=ttyS0,115200n8", "xen")
		assert.True(t, b.StartsAtBoot("serial-getty@ttyS0.service"), "systemd %d", sd.Version)
		assert.True(t, b.StartsAtBoot("serial-getty@hvc0.service"), "systemd %d", sd.Version)
		assert.False(t, b.StartsAtBoot("serial-getty@tty0.service"), "systemd %d", sd.Version)
		b = boot("console=ttyS0 systemd.getty_auto=no", "xen")
		assert.False(t, b.StartsAtBoot("serial-getty@ttyS0.service"), "systemd %d", sd.Version)
		assert.False(t, b.StartsAtBoot("serial-getty@hvc0.service"), "systemd %d", sd.Version)
		b = boot("quiet", "")
		assert.False(t, b.StartsAtBoot("serial-getty@hvc0.service"), "systemd %d", sd.Version)
	}
}

// FuzzKernelConsoles: the kernel's parameter split and console names never
// panic, give no parameter longer than the line, and at most
// maxCmdlineConsoles serial consoles, each once.
func FuzzKernelConsoles(f *testing.F) {
	for _, c := range gettyCases {
		f.Add(c.cmdline)
	}
	f.Add(`"console=ttyS0" x="a b" "y -- console=0`)
	f.Fuzz(func(t *testing.T, cmdline string) {
		if len(cmdline) > 8<<10 {
			return
		}
		for _, p := range kernelParams(cmdline) {
			if len(p) > len(cmdline) || p == "--" {
				t.Fatalf("%q: parameter %q", cmdline, p)
			}
		}
		cons := kernelConsoles(cmdline)
		if len(cons) > maxCmdlineConsoles || len(slices.Compact(slices.Sorted(slices.Values(cons)))) != len(cons) {
			t.Fatalf("%q: consoles %q", cmdline, cons)
		}
	})
}
