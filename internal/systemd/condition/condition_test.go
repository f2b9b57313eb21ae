package condition

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/fs/tarfs"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

func mfile(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s), Mode: 0o644} }
func mexe(s string) *fstest.MapFile  { return &fstest.MapFile{Data: []byte(s), Mode: 0o755} }
func mdir() *fstest.MapFile          { return &fstest.MapFile{Mode: fs.ModeDir | 0o755} }
func mlink(t string) *fstest.MapFile {
	return &fstest.MapFile{Data: []byte(t), Mode: fs.ModeSymlink | 0o777}
}

// elf is the start of an ELF header: class, data (endianness), machine.
func elf(class64, le bool, machine uint16) *fstest.MapFile {
	h := []byte("\x7fELF\x01\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00")
	if class64 {
		h[4] = 2
	}
	if le {
		h[18], h[19] = byte(machine), byte(machine>>8)
	} else {
		h[5] = 2
		h[18], h[19] = byte(machine>>8), byte(machine)
	}
	return &fstest.MapFile{Data: h, Mode: 0o755}
}

func image() fstest.MapFS {
	return fstest.MapFS{
		"etc/os-release":                          mfile("ID=debian\nVERSION_ID=\"12\"\nPRETTY_NAME=\"Debian GNU/Linux 12\"\n"),
		"etc/ssh/sshd_config":                     mfile("Port 22\n"),
		"etc/empty":                               mfile(""),
		"etc/masked":                              mlink("/dev/null"),
		"etc/link":                                mlink("ssh/sshd_config"),
		"etc/loop":                                mlink("loop"),
		"usr/bin/tool":                            mexe("#!/bin/sh\n"),
		"usr/lib/systemd/systemd":                 elf(true, true, emX8664),
		"var/lib/full/a":                          mfile("x"),
		"var/lib/hidden/.keep":                    mfile(""),
		"var/lib/backup/x.dpkg-old":               mfile(""),
		"var/lib/none":                            mdir(),
		"var/run":                                 mlink("../run"),
		"usr/lib/modules/6.1.0-28-cloud-amd64":    mdir(),
		"boot/grub/grub.cfg":                      mfile("set vt_handoff=vt.handoff=7\nmenuentry 'Debian' {\n\tlinux /boot/vmlinuz root=UUID=x ro console=ttyS0 quiet $vt_handoff \"acpi=off\"\n}\nmenuentry 'recovery' {\n\tlinux /boot/vmlinuz root=UUID=x ro single\n}\n"),
		"usr/lib/systemd/system/x.service":        mfile("[Service]\nExecStart=/bin/true\n"),
		"usr/lib/systemd/system/getty@.service":   mfile("[Service]\nExecStart=/sbin/agetty\n"),
		"etc/machine-id":                          mfile("0123456789abcdef0123456789abcdef\n"),
		"usr/share/doc/pkg/changelog.Debian.gz":   mfile("x"),
		"usr/share/doc/other/changelog.Debian.gz": mfile("x"),
	}
}

func env(t *testing.T, m fstest.MapFS, firstBoot bool, assume ...string) *Env {
	t.Helper()
	a := Assumptions{}
	for _, kv := range assume {
		require.NoError(t, a.Set(kv))
	}
	e, err := NewEnv(rootfs.New(m), firstBoot, a)
	require.NoError(t, err)
	return e
}

// one decides a single assignment of unit id.
func one(e *Env, id, setting, value string) Check {
	cs := e.Unit(id, [][]*unit.Option{{{Section: "Unit", Name: setting, Value: value}}})
	if len(cs) != 1 {
		return Check{Verdict: "ignored"}
	}
	return cs[0]
}

func TestChecks(t *testing.T) {
	e := env(t, image(), false)
	for _, tc := range []struct {
		setting, value string
		want           Verdict
	}{
		{"ConditionPathExists", "/etc/ssh/sshd_config", True},
		{"ConditionPathExists", "!/etc/ssh/sshd_config", False},
		{"ConditionPathExists", "/etc/ssh/ssh_host_rsa_key", False},
		{"ConditionPathExists", "!/etc/ssh/ssh_host_rsa_key", True},
		{"ConditionPathExists", "/etc/masked", True},
		{"ConditionPathExists", "/etc/loop", False},
		{"ConditionPathExists", "/etc//ssh/./sshd_config/", True},
		{"ConditionPathExists", "/run/systemd/first-boot", Unknown},
		{"ConditionPathExists", "/var/run/x.pid", Unknown},
		{"ConditionPathExists", "/sys/firmware/efi", Unknown},
		{"ConditionPathExists", "!/dev/tpm0", Unknown},
		{"ConditionPathExists", "/tmp/x", Unknown},
		{"ConditionPathExists", "relative/path", "ignored"},
		{"ConditionPathIsDirectory", "/var/lib/full", True},
		{"ConditionPathIsDirectory", "/etc/ssh/sshd_config", False},
		{"ConditionPathIsSymbolicLink", "/etc/link", True},
		{"ConditionPathIsSymbolicLink", "/etc/ssh/sshd_config", False},
		{"ConditionFileNotEmpty", "/etc/ssh/sshd_config", True},
		{"ConditionFileNotEmpty", "/etc/empty", False},
		{"ConditionFileNotEmpty", "/etc/link", True},
		{"ConditionFileIsExecutable", "/usr/bin/tool", True},
		{"ConditionFileIsExecutable", "/etc/ssh/sshd_config", False},
		{"ConditionDirectoryNotEmpty", "/var/lib/full", True},
		{"ConditionDirectoryNotEmpty", "/var/lib/hidden", False},
		{"ConditionDirectoryNotEmpty", "/var/lib/backup", False},
		{"ConditionDirectoryNotEmpty", "/var/lib/none", False},
		{"ConditionDirectoryNotEmpty", "/var/lib/missing", False},
		{"ConditionPathExistsGlob", "/usr/share/doc/*/changelog.Debian.gz", True},
		{"ConditionPathExistsGlob", "/usr/share/doc/*/NEWS", False},
		{"ConditionPathExistsGlob", "/usr/share/doc/{a,b}", Unknown},
		{"ConditionPathIsMountPoint", "/", True},
		{"ConditionPathIsMountPoint", "/var", Unknown},
		{"ConditionPathIsReadWrite", "/", Unknown},
		{"ConditionNeedsUpdate", "/etc", True},
		{"ConditionKernelCommandLine", "console", True},
		{"ConditionKernelCommandLine", "console=ttyS0", True},
		{"ConditionKernelCommandLine", "console=tty1", False},
		{"ConditionKernelCommandLine", "vt.handoff=7", True},
		{"ConditionKernelCommandLine", "acpi=off", True},
		{"ConditionKernelCommandLine", "snapd_recovery_mode", False},
		{"ConditionKernelCommandLine", "single", False},
		{"ConditionKernelCommandLine", "|!snapd_recovery_mode", True},
		{"ConditionArchitecture", "x86-64", True},
		{"ConditionArchitecture", "arm64", False},
		{"ConditionArchitecture", "native", True},
		{"ConditionArchitecture", "vax", False},
		{"ConditionFirstBoot", "yes", False},
		{"ConditionFirstBoot", "no", True},
		{"ConditionFirstBoot", "maybe", False},
		{"ConditionOSRelease", "ID=debian", True},
		{"ConditionOSRelease", "ID=ubuntu", False},
		{"ConditionOSRelease", "VERSION_ID>=11 ID!=fedora", True},
		{"ConditionOSRelease", "VERSION_ID<12", False},
		{"ConditionOSRelease", "PRETTY_NAME$=Debian*", True},
		{"ConditionUser", "root", True},
		{"ConditionUser", "@system", True},
		{"ConditionUser", "daemon", False},
		{"ConditionGroup", "0", True},
		{"ConditionGroup", "adm", False},
		{"ConditionKernelVersion", ">=6.1", True},
		{"ConditionKernelVersion", ">=6.1 <6.2", True},
		{"ConditionKernelVersion", "<5.10", False},
		{"ConditionKernelVersion", "6.1.*-cloud-*", True},
		{"ConditionVirtualization", "vm", Unknown},
		{"ConditionVirtualization", "!container", Unknown},
		{"ConditionMemory", ">=4G", Unknown},
		{"ConditionCapability", "CAP_SYS_ADMIN", Unknown},
		{"ConditionMemoryPressure", "20%", Unknown},
		{"AssertPathExists", "/etc/ssh/sshd_config", True},
		{"AssertKernelCommandLine", "quiet", True},
	} {
		c := one(e, "x.service", tc.setting, tc.value)
		assert.Equal(t, tc.want, c.Verdict, "%s=%s: %s", tc.setting, tc.value, c.Reason)
		if c.Verdict != "ignored" {
			assert.NotEmpty(t, c.Reason, "%s=%s says why", tc.setting, tc.value)
		}
	}
}

func TestSpecifiers(t *testing.T) {
	e := env(t, image(), false)
	c := one(e, "getty@ttyS0.service", "ConditionPathExists", "/dev/%i")
	assert.Equal(t, "/dev/ttyS0", c.Value)
	c = one(e, "x.service", "ConditionPathExists", "/etc/%N/x")
	assert.Equal(t, "/etc/x/x", c.Value)
	c = one(e, "x.service", "ConditionPathExists", "%S/full/a")
	assert.Equal(t, "/var/lib/full/a", c.Value)
	c = one(e, "x.service", "ConditionPathExists", "/etc/hosts-%H")
	assert.Equal(t, Unknown, c.Verdict)
	assert.Contains(t, c.Reason, "%H")
	c = one(e, "var-lib-full.mount", "ConditionPathIsDirectory", "%f")
	assert.Equal(t, "/var/lib/full", c.Value)
	assert.Equal(t, True, c.Verdict)
	// %I is unit_name_unescape: "-" is "/" and "\x2d" a "-".
	c = one(e, "backup@var-lib\\x2dx.service", "ConditionPathExists", "/%I")
	assert.Equal(t, "/var/lib-x", c.Value)

	// %s is root's shell: /bin/bash where the image has it.
	c = one(e, "x.service", "ConditionPathExists", "%s")
	assert.Equal(t, "/bin/sh", c.Value)
	m := image()
	m["usr/bin/bash"] = &fstest.MapFile{Data: []byte("#!")}
	m["bin"] = &fstest.MapFile{Data: []byte("usr/bin"), Mode: fs.ModeSymlink}
	c = one(env(t, m, false), "x.service", "ConditionPathExists", "%s")
	assert.Equal(t, "/bin/bash", c.Value)
	assert.Equal(t, True, c.Verdict)
}

// Specifiers expand as specifier_printf does: an unknown one makes systemd
// ignore the assignment, a "%" before anything but a letter or digit stays,
// and so does one ending the value; %D is known from 257.
func TestSpecifierSyntax(t *testing.T) {
	e := env(t, image(), false)
	for _, tc := range []struct {
		version        int
		setting, value string
		want           string // "" ignored
	}{
		{252, "ConditionPathExists", "/a%X", ""},
		{252, "ConditionKernelCommandLine", "quiet%0", ""},
		{252, "ConditionPathExists", "/a%", "/a%"},
		{252, "ConditionPathExists", "/a%-b", "/a%-b"},
		{252, "ConditionKernelCommandLine", "a%", "a%"},
		{252, "ConditionPathExists", "%D/doc", ""},
		{257, "ConditionPathExists", "%D/doc", "/usr/share/doc"},
	} {
		e.Version = tc.version
		c := one(e, "x.service", tc.setting, tc.value)
		if tc.want == "" {
			assert.Equal(t, Verdict("ignored"), c.Verdict, "%d %s=%s", tc.version, tc.setting, tc.value)
			continue
		}
		assert.Equal(t, tc.want, c.Value, "%d %s=%s", tc.version, tc.setting, tc.value)
		assert.NotEqual(t, Unknown, c.Verdict, "%d %s=%s: %s", tc.version, tc.setting, tc.value, c.Reason)
	}
}

// Paths are checked as path_simplify_and_warn checks them: systemd
// ignores one that is not UTF-8, not absolute, has a component over 255
// bytes or a ".." (from 257, ".." right after the root is dropped); blanks
// after "|" and "!" are part of a path, skipped before a string.
func TestPathSyntax(t *testing.T) {
	e := env(t, image(), false)
	long := strings.Repeat("a", 255)
	for _, tc := range []struct {
		version        int
		setting, value string
		want           string // "" ignored
	}{
		{252, "ConditionPathExists", "/etc/../etc", ""},
		{257, "ConditionPathExists", "/etc/../etc", ""},
		{252, "ConditionPathExists", "/../etc", ""},
		{257, "ConditionPathExists", "/./../etc", "ConditionPathExists=/etc"},
		{257, "ConditionPathExists", "//..", "ConditionPathExists=/"},
		{252, "ConditionPathExists", "/etc/./ssh//sshd_config/", "ConditionPathExists=/etc/ssh/sshd_config"},
		{252, "ConditionPathExists", "/..a", "ConditionPathExists=/..a"},
		{252, "ConditionPathExists", "/" + long, "ConditionPathExists=/" + long},
		{252, "ConditionPathExists", "/" + long + "b", ""},
		{252, "ConditionPathExists", "/\xff", ""},
		{252, "ConditionPathExists", "/\uFFFE", ""},
		{252, "ConditionPathExists", "/\uFDD0", ""},
		{252, "ConditionPathExists", "/é", "ConditionPathExists=/é"},
		{252, "ConditionKernelCommandLine", "\xff", "ConditionKernelCommandLine=\xff"},
		{252, "ConditionPathExists", "| /etc", ""},
		{252, "ConditionPathExists", "!\t/etc", ""},
		{252, "ConditionPathExists", "|!/etc", "ConditionPathExists=|!/etc"},
		{252, "ConditionKernelCommandLine", "|\r! quiet", "ConditionKernelCommandLine=|!quiet"},
	} {
		e.Version = tc.version
		c := one(e, "x.service", tc.setting, tc.value)
		if tc.want == "" {
			assert.Equal(t, Verdict("ignored"), c.Verdict, "%d %s=%q", tc.version, tc.setting, tc.value)
			continue
		}
		assert.Equal(t, tc.want, c.String(), "%d %s=%q", tc.version, tc.setting, tc.value)
	}
}

// Expansions are bounded as unit_path_printf (PATH_MAX-1 bytes) and
// unit_full_printf (LONG_LINE_MAX) bound them: longer, the assignment is
// ignored, and the expansion stops there.
func TestSpecifierBounds(t *testing.T) {
	e := env(t, image(), false)
	const id = "x.service"                                                                   // %n is 9 bytes
	path := strings.Repeat("/"+strings.Repeat("a", 199), 20) + "/" + strings.Repeat("a", 90) // 4091 bytes
	for _, tc := range []struct {
		setting, value string
		kept           bool
	}{
		{"ConditionPathExists", path + "bcde", true},
		{"ConditionPathExists", path + "bcdef", false},
		{"ConditionPathExists", path + "bcd%%", true},
		{"ConditionPathExists", path + "bcde%%", false},
		{"ConditionPathExists", path[:4086] + "%n", true},
		{"ConditionPathExists", path[:4087] + "%n", false},
		{"ConditionPathExists", "/" + strings.Repeat("%n", 1<<18), false},
		{"ConditionKernelCommandLine", "xxxx" + strings.Repeat("%n", 1<<20/9), true},
		{"ConditionKernelCommandLine", "xxxxx" + strings.Repeat("%n", 1<<20/9), false},
	} {
		c := one(e, id, tc.setting, tc.value)
		assert.Equal(t, tc.kept, c.Verdict != "ignored", "%s= of %d bytes", tc.setting, len(tc.value))
	}
}

func TestResult(t *testing.T) {
	tr, fa, un := Check{Verdict: True}, Check{Verdict: False}, Check{Verdict: Unknown}
	trig := func(c Check) Check { c.Trigger = true; return c }
	for _, tc := range []struct {
		checks []Check
		want   Verdict
	}{
		{nil, True},
		{[]Check{tr, tr}, True},
		{[]Check{tr, fa}, False},
		{[]Check{un, fa}, False},
		{[]Check{tr, un}, Unknown},
		{[]Check{trig(fa), trig(tr)}, True},
		{[]Check{trig(fa), trig(fa)}, False},
		{[]Check{trig(fa), trig(un)}, Unknown},
		{[]Check{tr, trig(fa), trig(tr)}, True},
		{[]Check{fa, trig(tr)}, False},
		{[]Check{un, trig(tr)}, Unknown},
		{[]Check{tr, trig(un), trig(tr)}, True},
	} {
		assert.Equal(t, tc.want, Result(tc.checks), "%v", tc.checks)
	}
}

// TestEmptyAssignmentResetsTheList: an empty Condition*= empties every
// condition read before it (of any type), as systemd's parser does; an
// empty Assert*= the assertions.
func TestEmptyAssignmentResetsTheList(t *testing.T) {
	e := env(t, image(), false)
	o := func(n, v string) *unit.Option { return &unit.Option{Section: "Unit", Name: n, Value: v} }
	cs := e.Unit("x.service", [][]*unit.Option{
		{o("ConditionPathExists", "/nowhere"), o("ConditionKernelCommandLine", "nowhere"), o("AssertPathExists", "/etc/ssh/sshd_config")},
		{o("ConditionFileNotEmpty", ""), o("ConditionPathExists", "/etc/ssh/sshd_config"), o("Description", "x")},
	})
	require.Len(t, cs, 2)
	assert.Equal(t, "ConditionPathExists=/etc/ssh/sshd_config", cs[0].String())
	assert.True(t, cs[1].Assert())
	assert.Equal(t, True, Result(cs))
	cs = e.Unit("x.service", [][]*unit.Option{{o("AssertPathExists", "/nowhere")}, {o("AssertUser", "")}})
	assert.Empty(t, cs)
}

func TestExplain(t *testing.T) {
	e := env(t, image(), false)
	o := func(n, v string) *unit.Option { return &unit.Option{Section: "Unit", Name: n, Value: v} }
	cs := e.Unit("snapd.recovery-chooser-trigger.service", [][]*unit.Option{{o("ConditionKernelCommandLine", "snapd_recovery_mode")}})
	assert.Equal(t, False, Result(cs))
	assert.Contains(t, Explain(cs), "ConditionKernelCommandLine=snapd_recovery_mode: snapd_recovery_mode is not on the kernel command line the image boots with (/boot/grub/grub.cfg)")
	cs = e.Unit("x.service", [][]*unit.Option{{o("ConditionPathExists", "|/a"), o("ConditionPathExists", "|/b")}})
	assert.Equal(t, "none of ConditionPathExists=|/a, ConditionPathExists=|/b holds", Explain(cs))
}

func TestCmdLineSources(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files fstest.MapFS
		want  []CmdLine
	}{
		{"kernel-install", fstest.MapFS{"etc/kernel/cmdline": mfile("root=/dev/sda1 ro\nquiet\n")},
			[]CmdLine{{Value: "root=/dev/sda1 ro quiet", Source: "/etc/kernel/cmdline"}}},
		{"BLS with grubenv", fstest.MapFS{
			"boot/loader/entries/abc-6.1.conf": mfile("title Fedora\nlinux /vmlinuz\noptions $kernelopts rhgb\n"),
			"boot/grub2/grubenv":               mfile("# GRUB Environment Block\nkernelopts=root=/dev/vda1 ro console=ttyS0\n"),
		}, []CmdLine{{Value: "root=/dev/vda1 ro console=ttyS0 rhgb", Source: "/boot/loader/entries/abc-6.1.conf"}}},
		{"default grub and grub.d", fstest.MapFS{
			"etc/default/grub": mfile("GRUB_CMDLINE_LINUX_DEFAULT=\"quiet splash\"\nGRUB_CMDLINE_LINUX=\"\"\n"),
			"etc/default/grub.d/50-cloudimg-settings.cfg": mfile("GRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT console=tty1 console=ttyS0\"\n# comment\nexport GRUB_TIMEOUT=0\n"),
		}, []CmdLine{{Value: "ro quiet splash console=tty1 console=ttyS0", Source: "/etc/default/grub, /etc/default/grub.d/50-cloudimg-settings.cfg"}}},
		{"grub.cfg wins over /etc/default/grub", fstest.MapFS{
			"etc/default/grub":   mfile("GRUB_CMDLINE_LINUX=\"other\"\n"),
			"boot/grub/grub.cfg": mfile("menuentry x {\n linuxefi /vmlinuz ro net.ifnames=0\n}\n"),
		}, []CmdLine{{Value: "ro net.ifnames=0", Source: "/boot/grub/grub.cfg"}}},
		{"none (a container image)", fstest.MapFS{"etc/os-release": mfile("ID=alpine\n")}, []CmdLine{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readCmdLines(rootfs.New(tc.files))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestCmdLineDisagreementIsUnknown(t *testing.T) {
	m := fstest.MapFS{
		"boot/loader/entries/a.conf": mfile("options root=/dev/vda1 quiet\n"),
		"boot/loader/entries/b.conf": mfile("options root=/dev/vda1 debug\n"),
	}
	e := env(t, m, false)
	assert.Equal(t, True, one(e, "x.service", "ConditionKernelCommandLine", "root").Verdict)
	c := one(e, "x.service", "ConditionKernelCommandLine", "debug")
	assert.Equal(t, Unknown, c.Verdict)
	assert.Contains(t, c.Reason, "disagree")

	e = env(t, fstest.MapFS{}, false)
	c = one(e, "x.service", "ConditionKernelCommandLine", "debug")
	assert.Equal(t, Unknown, c.Verdict)
	assert.Contains(t, c.Reason, "--assume kernel-command-line")
	e = env(t, fstest.MapFS{}, false, "kernel-command-line=ro debug")
	assert.Equal(t, True, one(e, "x.service", "ConditionKernelCommandLine", "debug").Verdict)
}

func TestFirstBoot(t *testing.T) {
	assert.Equal(t, True, one(env(t, image(), true), "x.service", "ConditionFirstBoot", "yes").Verdict)
	assert.Equal(t, False, one(env(t, image(), false), "x.service", "ConditionFirstBoot", "yes").Verdict)
	m := image()
	m["etc/kernel/cmdline"] = mfile("ro systemd.condition-first-boot=yes\n")
	delete(m, "boot/grub/grub.cfg")
	assert.Equal(t, True, one(env(t, m, false), "x.service", "ConditionFirstBoot", "yes").Verdict, "the kernel argument overrides the machine-id")
	m["etc/kernel/cmdline"] = mfile("ro systemd.condition_first_boot=0\n")
	assert.Equal(t, False, one(env(t, m, true), "x.service", "ConditionFirstBoot", "yes").Verdict, "257 spells it with _, the same key")
	assert.Equal(t, False, one(env(t, image(), true, "first-boot=no"), "x.service", "ConditionFirstBoot", "yes").Verdict)
}

func TestArchitectures(t *testing.T) {
	for _, tc := range []struct {
		h    *fstest.MapFile
		want string
	}{
		{elf(true, true, emX8664), "x86-64"},
		{elf(false, true, em386), "x86"},
		{elf(true, true, emAARCH64), "arm64"},
		{elf(true, false, emAARCH64), "arm64-be"},
		{elf(false, true, emARM), "arm"},
		{elf(true, true, emPPC64), "ppc64-le"},
		{elf(true, false, emPPC64), "ppc64"},
		{elf(true, false, emS390), "s390x"},
		{elf(true, true, emRISCV), "riscv64"},
		{elf(true, true, emLOONGARCH), "loongarch64"},
		{mfile("#!/bin/sh\n"), ""},
	} {
		arch, _, err := readArchitecture(rootfs.New(fstest.MapFS{"bin/sh": tc.h}))
		require.NoError(t, err)
		assert.Equal(t, tc.want, arch)
	}
	e := env(t, fstest.MapFS{}, false)
	assert.Equal(t, Unknown, one(e, "x.service", "ConditionArchitecture", "x86-64").Verdict)
	e = env(t, fstest.MapFS{}, false, "architecture=arm64")
	assert.Equal(t, True, one(e, "x.service", "ConditionArchitecture", "arm64").Verdict)
}

func TestAssumed(t *testing.T) {
	e := env(t, image(), false, "virtualization=amazon", "memory=16G", "cpus=4", "ac-power=yes", "security=apparmor,selinux", "host=web-1")
	for _, tc := range []struct {
		setting, value string
		want           Verdict
	}{
		{"ConditionVirtualization", "vm", True},
		{"ConditionVirtualization", "yes", True},
		{"ConditionVirtualization", "container", False},
		{"ConditionVirtualization", "!container", True},
		{"ConditionVirtualization", "amazon", True},
		{"ConditionVirtualization", "kvm", False},
		{"ConditionMemory", ">=4G", True},
		{"ConditionMemory", "<4G", False},
		{"ConditionMemory", "8G", True},
		{"ConditionCPUs", ">1", True},
		{"ConditionCPUs", "=2", False},
		{"ConditionACPower", "true", True},
		{"ConditionSecurity", "apparmor", True},
		{"ConditionSecurity", "tomoyo", False},
		{"ConditionHost", "web-*", True},
		{"ConditionCapability", "CAP_SYS_ADMIN", True},
		{"ConditionFirmware", "uefi", Unknown},
	} {
		c := one(e, "x.service", tc.setting, tc.value)
		assert.Equal(t, tc.want, c.Verdict, "%s=%s: %s", tc.setting, tc.value, c.Reason)
	}
	e = env(t, image(), false, "virtualization=none")
	assert.Equal(t, False, one(e, "x.service", "ConditionVirtualization", "yes").Verdict)
	assert.Equal(t, False, one(e, "x.service", "ConditionVirtualization", "vm").Verdict)
	e = env(t, image(), false, "virtualization=docker")
	assert.Equal(t, Unknown, one(e, "x.service", "ConditionCapability", "CAP_SYS_ADMIN").Verdict)
}

func TestAssumptionsSet(t *testing.T) {
	a := Assumptions{}
	require.NoError(t, a.Set("Kernel-Command-Line=console=ttyS0 quiet"))
	assert.Equal(t, "console=ttyS0 quiet", a["kernelcommandline"])
	require.NoError(t, a.Set("ConditionVirtualization=kvm"))
	assert.Equal(t, "kvm", a["virtualization"])
	for _, bad := range []string{"virtualisation=kvm", "novalue", "=x", "pathexists=/x"} {
		err := a.Set(bad)
		assert.Error(t, err, bad)
	}
	assert.ErrorContains(t, a.Set("virtualisation=kvm"), "kernel-command-line")
}

// TestDebianRoots: the architecture of both cached roots, and the snapd
// unit of the incident: its kernel command line condition is unknown on a
// root without a boot loader, false once the image boots through GRUB
// without snapd_recovery_mode.
func TestDebianRoots(t *testing.T) {
	for _, r := range testenv.DebianRoots {
		t.Run(r.Cache, func(t *testing.T) {
			src, err := rootfs.OpenDir(r.Path(t))
			require.NoError(t, err)
			defer src.Close()
			e, err := NewEnv(rootfs.New(src), false, Assumptions{})
			require.NoError(t, err)
			assert.Equal(t, "x86-64", e.Host.Architecture)
			assert.Equal(t, "/usr/lib/systemd/systemd", e.Host.ArchitectureSource)
			c := one(e, "snapd.recovery-chooser-trigger.service", "ConditionKernelCommandLine", "snapd_recovery_mode")
			assert.Equal(t, Unknown, c.Verdict)
			assert.Equal(t, True, one(e, "x.service", "ConditionOSRelease", "ID=debian").Verdict)
		})
	}
}

func FuzzCmdLine(f *testing.F) {
	f.Add([]byte("set a=b\nmenuentry x {\n linux /v root=x ro $a ${a} \"q w\" ${\n}\n"), []byte("GRUB_CMDLINE_LINUX=\"$X ${Y\"\nexport A=b\n"))
	f.Add([]byte("linux"), []byte("GRUB_CMDLINE_LINUX_DEFAULT='x'"))
	f.Fuzz(func(t *testing.T, cfg, def []byte) {
		m := fstest.MapFS{"boot/grub/grub.cfg": {Data: cfg}, "etc/default/grub": {Data: def},
			"boot/loader/entries/a.conf": {Data: append([]byte("options "), def...)}}
		lines, err := readCmdLines(rootfs.New(m))
		require.NoError(t, err)
		for _, l := range lines {
			_ = hasArg(l.Value, "quiet")
			_ = splitWords(l.Value)
		}
	})
}

func FuzzCheck(f *testing.F) {
	for _, s := range []string{"|!/etc/%i/x", "%", "!", "|", "/a/../../b", "VERSION_ID>=1 ID$=de*", ">=4G", "%f%j%J%P%I", devname, "!/x/%H/%v", "/run/%m", "/etc/%v%%/..%b"} {
		f.Add("ConditionPathExists", s)
		f.Add("ConditionFileNotEmpty", s)
		f.Add("ConditionOSRelease", s)
		f.Add("ConditionKernelVersion", s)
	}
	e, err := NewEnv(rootfs.New(image()), false, Assumptions{"memory": "1G"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, setting, value string) {
		cs := e.Unit("a-b@c\\x2dd.service", [][]*unit.Option{{{Section: "Unit", Name: setting, Value: value}}})
		for _, c := range cs {
			assert.Contains(t, []Verdict{True, False, Unknown}, c.Verdict)
		}
		_ = Result(cs)
		_ = Explain(cs)
	})
}

func FuzzELF(f *testing.F) {
	f.Add([]byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x3e\x00"))
	f.Fuzz(func(t *testing.T, h []byte) {
		a := elfArchitecture(h)
		if a != "" {
			assert.Contains(t, architectures, a)
		}
	})
}

func TestFnmatch(t *testing.T) {
	assert.True(t, fnmatch("Debian*", "Debian GNU/Linux 12"))
	assert.True(t, fnmatch("a/*/c", "a/b/x/c"))
	assert.True(t, fnmatch("a?b", "a/b"))
	assert.False(t, fnmatch("a*c", "a/b"))
	assert.False(t, fnmatch("[", "["))
}

// TestStreamedTarball: a tarball read once from a stream keeps only
// configuration files, so a grubenv or a binary it did not keep leaves the
// command line and the architecture unknown rather than failing or
// deciding from half the configuration.
func TestStreamedTarball(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name, body string, mode int64) {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(body)), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(body))
		require.NoError(t, err)
	}
	add("boot/loader/entries/a.conf", "options $kernelopts\n", 0o644)
	add("boot/grub2/grubenv", "kernelopts=root=/dev/vda1 ro snapd_recovery_mode\n", 0o644)
	add("bin/sh", string(elf(true, true, emX8664).Data), 0o755)
	require.NoError(t, tw.Close())
	src, err := tarfs.OpenStream(&buf, tarfs.StreamOptions{})
	require.NoError(t, err)
	e, err := NewEnv(rootfs.New(src), false, Assumptions{})
	require.NoError(t, err)
	assert.NotEmpty(t, e.Host.CmdLinesUnread)
	assert.Empty(t, e.Host.Architecture)
	c := one(e, "x.service", "ConditionKernelCommandLine", "snapd_recovery_mode")
	assert.Equal(t, Unknown, c.Verdict)
	assert.Contains(t, c.Reason, "stream")
}
