package boot

import (
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
)

// fstabCase is one /etc/fstab and kernel command line the real
// systemd-fstab-generator reads under systemd (a VM boot: /sys
// writable, the command line bound over /proc/cmdline) and the model
// reads from the image (/etc/kernel/cmdline).
type fstabCase struct {
	fstab, cmdline string
	ops            []op
}

// fstabUnits are units the fstab cases' options name.
var fstabUnits = []op{
	// Ordered before local-fs.target's mounts: no default dependencies.
	file("/etc/systemd/system/dep-a.service", "[Unit]\nDefaultDependencies=no\n"+svc),
	file("/etc/systemd/system/dep-b.service", "[Unit]\nDefaultDependencies=no\n"+svc),
	file("/etc/systemd/system/dep-w.service", "[Unit]\nDefaultDependencies=no\n"+svc),
	file("/etc/systemd/system/custom.target", "[Unit]\nDescription=custom\n"),
	link("/etc/systemd/system/multi-user.target.wants/custom.target", "/etc/systemd/system/custom.target"),
	file("/etc/systemd/system/unpulled.target", "[Unit]\nDescription=not pulled in\n"),
}

// fstabCases cover the entries cloud images ship and the generator's
// options, helpers and command line switches.
func fstabCases() map[string]fstabCase {
	ubuntu := "LABEL=cloudimg-rootfs\t/\t ext4\tdiscard,errors=remount-ro\t0 1\nLABEL=UEFI\t/boot/efi\tvfat\tumask=0077\t0 1\n"
	amazon := "#\nUUID=0a1b2c3d-4e5f-6789-abcd-ef0123456789     /           xfs    defaults,noatime  1   1\n" +
		"UUID=ABCD-1234        /boot/efi       vfat    defaults,noatime,uid=0,gid=0,umask=0077,shortname=winnt,x-systemd.automount 0 2\n" +
		"fs-0123456789abcdef0.efs.us-east-1.amazonaws.com:/ /mnt/efs nfs4 nfsvers=4.1,rsize=1048576,wsize=1048576,hard,timeo=600,retrans=2,noresvport,_netdev 0 0\n"
	swaps := "/swapfile none swap sw 0 0\n/dev/sdb1 /data ext4 nofail,x-systemd.device-timeout=5s,x-systemd.mount-timeout=10s,x-systemd.rw-only 0 2\n/dev/sdc1 /scratch ext4 noauto 0 0\n" +
		"/dev/sdd1 none swap sw,nofail 0 0\n/dev/sdd2 none swap noauto 0 0\n/dev/sdd3 /auto-nofail ext4 x-systemd.automount,nofail,x-systemd.idle-timeout=30 0 0\n"
	return map[string]fstabCase{
		"ubuntu":  {fstab: ubuntu},
		"amazon":  {fstab: amazon},
		"swap":    {fstab: swaps},
		"no-swap": {fstab: swaps, cmdline: "quiet systemd.swap=no"},
		"no-fstab": {fstab: swaps + "/dev/sdb9 /var/lib/x ext4 defaults 0 2\n",
			cmdline: "fstab=no"},
		"rd-fstab": {fstab: ubuntu, cmdline: "rd.fstab=0"},
		"volatile": {fstab: ubuntu, cmdline: "systemd.volatile=state"},
		"extra":    {fstab: ubuntu, cmdline: "systemd.mount-extra=/dev/sdz1:/extra:ext4:nofail systemd.swap-extra=/dev/sdy1 systemd.mount-extra=LABEL=x:/more"},
		"nfs": {fstab: "srv:/export /mnt/nfs nfs defaults 0 0\nsrv:/bg /mnt/bg nfs bg 0 0\n/dev/sde9 /mnt/net ext4 _netdev 0 2\n" +
			"//srv/share /mnt/cifs cifs credentials=/etc/c 0 0\nsshfs#u@h:/ /mnt/fuse fuse.sshfs defaults 0 0\n"},
		"deps": {fstab: "/dev/sde1 /srv/a ext4 x-systemd.requires=dep-a.service,x-systemd.before=local-fs.target,x-systemd.after=dep-b.service 0 0\n" +
			"/dev/sdf1 /srv/b ext4 x-systemd.wanted-by=multi-user.target 0 0\n" +
			"/dev/sdg1 /srv/c xfs x-systemd.required-by=custom.target,x-systemd.requires-mounts-for=/srv/a,noauto 0 0\n" +
			"/dev/sdg2 /srv/d xfs x-systemd.wanted-by=unpulled.target 0 0\n" +
			"/dev/sdg3 /srv/e xfs x-systemd.requires=/dev/sdq1,x-systemd.wants=dep-w.service 0 0\n" +
			"/dev/sdg4 / ext4 x-systemd.wanted-by=unpulled.target,nofail 0 1\n", ops: fstabUnits},
		"makefs-growfs": {fstab: "/dev/sdh1 /var/cache ext4 x-systemd.makefs,x-systemd.growfs 0 2\n/dev/sdi1 none swap x-systemd.makefs 0 0\n" +
			"LABEL=root / ext4 x-systemd.growfs 0 1\n/dev/sdh2 /var/tmp auto x-systemd.makefs 0 0\n"},
		// systemd-ssh-generator (257): sshd-unix-local.socket unless
		// systemd.ssh_auto=no, sshd is missing or sshd@.service masked; a
		// missing sshd@.service makes it write a template of its own.
		"ssh-auto-off":    {cmdline: "systemd.ssh_auto=no"},
		"ssh-auto-dash":   {cmdline: "systemd.ssh-auto=0"},
		"ssh-auto-on":     {cmdline: "systemd.ssh_auto=no systemd.ssh_auto"},
		"ssh-no-sshd":     {ops: []op{systemdtest.Remove("/usr/sbin/sshd")}},
		"ssh-masked":      {ops: []op{link("/etc/systemd/system/sshd@.service", "/dev/null")}},
		"ssh-no-template": {ops: []op{systemdtest.Remove("/usr/lib/systemd/system/sshd@.service")}},
		"ssh-rd":          {cmdline: "rd.systemd.ssh_auto=no"},
		"quota":           {fstab: "LABEL=r / ext4 usrquota 0 1\n/dev/sdm1 /home ext4 usrquota,grpquota 0 2\n/dev/sdm2 /srv/xq xfs prjquota 0 0\n"},
		"fsck": {fstab: "/dev/sdj1 /p0 ext4 defaults 0 0\n/dev/sdj2 /p1 ext4 defaults 0 1\n/dev/sdj3 /p2 xfs defaults 0 2\n" +
			"/dev/sdj4 /p3 vfat defaults 0 2\n/dev/sdj5 /p4 auto defaults 0 2\n/dev/sdj6 /usr ext4 defaults 0 2\n" +
			"srv:/x /p5 nfs defaults 0 2\n/dev/sdj7 /p6 btrfs defaults 0 -1\n",
			ops: []op{exe("/usr/local/sbin/fsck.vfat", "#!/bin/sh\n"), link("/usr/local/sbin/fsck.xfs", "/usr/bin/true"),
				link("/usr/local/sbin/fsck.btrfs", "/usr/bin/false")}},
		"symlinks": {fstab: "/dev/sdk1 /srv/link/data ext4 defaults 0 0\n/dev/sdk2 /srv/dangling ext4 defaults 0 0\n" +
			"/dev/sdk3 /srv//real/./x/ ext4 defaults 0 0\n/dev/sdk4 /srv/abs ext4 defaults 0 0\n",
			ops: []op{link("/srv/link", "real"), file("/srv/real/.keep", ""), link("/srv/dangling", "/nowhere/mnt"),
				link("/srv/abs", "/opt/abs")}},
		"garbage": {fstab: "# comment\n\n   \n\t# indented comment\n/dev/sdl1 /with\\040space ext4 defaults 0 0\n" +
			"/dev/sdl2\n/dev/sdl3 /only-two\n/dev/sdl4 relative ext4\nproc /proc proc defaults 0 0\n" +
			"tmpfs /tmp tmpfs defaults 0 0\n/dev/sdl5 /dup ext4 defaults 0 0\n/dev/sdl6 /dup ext4 nofail 0 0\n" +
			"auto.x /auto autofs defaults 0 0\nsysfs /sys sysfs defaults 0 0\n/dev/sdl7 /bad ext4 x-systemd.requires= 0 0\n" +
			"/dev/sdl8 /trailing ext4 defaults 0 0   \t\n/dev/sdl9 /x%i ext4 defaults 0 0\nnone /run/x tmpfs defaults 0 0\n" +
			"/dev/sdl10 dir/sub ext4 defaults 0 0\n" +
			// getmntent reads 4095 bytes of a line: the passno is cut off.
			"/dev/sdl12 /long ext4 defaults" + strings.Repeat(" ", 4100) + "0 2\n/dev/sdl13 /after ext4 defaults 0 2\n" +
			"/dev/sdl11 /noeol ext4 defaults 0 2"},
	}
}

// fstabVariant is the variant of a case.
func fstabVariant(t *testing.T, sd systemdtest.Systemd, c fstabCase) variant {
	ops := append([]op{file("/etc/fstab", c.fstab), file("/etc/kernel/cmdline", c.cmdline)}, c.ops...)
	// The real generator runs whatever the model runs.
	keep := append([]string{sysvGenerator, "systemd-fstab-generator", "systemd-ssh-generator"}, pkgGeneratorNames()...)
	cmdline := c.cmdline
	return variant{sd: sd, upper: sd.Upper(t, append(sd.MaskGenerators(t, keep...), ops...)),
		machine: systemdtest.Machine{CmdLine: &cmdline}}
}

// TestOracleFstab runs systemd-fstab-generator under systemd on each case
// and compares the units systemd starts, and their order, with the
// model's.
func TestOracleFstab(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		for name, c := range fstabCases() {
			t.Run(sd.Name()+"/"+name, func(t *testing.T) {
				t.Parallel()
				v := fstabVariant(t, sd, c)
				want := v.oracle(t)
				require.Empty(t, want.Failed, "systemd fails the transaction")
				got, g := modelStart(t, v)
				compareOrder(t, g, want, got)
				onlySystemd, onlyModel := diff(want.Start, got)
				t.Logf("%s: systemd %d starts %d units, the model %d; only systemd: %v; only model: %v",
					name, sd.Version, len(want.Start), len(got), onlySystemd, onlyModel)
				assert.Equal(t, want.Start, got)
				assert.Empty(t, want.Cycles, "a case with an ordering cycle compares systemd's choice")
			})
		}
	}
}

// TestGetmntent reads fstab lines as glibc does.
func TestGetmntent(t *testing.T) {
	got := getmntent([]byte("# c\n  \n a\\040b  /x\\011y\t t  o,p  1  2  \nonly\n/dev/x /y ext4 defaults 0 -3 junk\nlast /z"))
	assert.Equal(t, []mntEntry{
		{what: "a b", where: "/x\ty", fstype: "t", opts: "o,p", passno: 2},
		{what: "only"},
		{what: "/dev/x", where: "/y", fstype: "ext4", opts: "defaults", passno: -3},
		{what: "last", where: "/z"},
	}, got)
	long := strings.Repeat("x", 5000) + " /y ext4\n/dev/a /b ext4 defaults 0 1\n"
	got = getmntent([]byte(long))
	require.Len(t, got, 2)
	assert.Len(t, got[0].what, maxMntLine-1)
	assert.Equal(t, "/b", got[1].where)
}

// FuzzFstab runs the ported systemd-fstab-generator (and
// systemd-ssh-generator) over arbitrary /etc/fstab texts and kernel
// command lines: they never panic, write only below the generator
// directories and their output loads.
func FuzzFstab(f *testing.F) {
	for _, c := range fstabCases() {
		f.Add([]byte(c.fstab), c.cmdline)
	}
	f.Fuzz(func(t *testing.T, fstab []byte, cmdline string) {
		if len(fstab) > 64<<10 || len(cmdline) > 4<<10 {
			return
		}
		files := map[string]string{
			"etc/fstab": string(fstab),
			"usr/lib/systemd/system-generators/" + fstabGeneratorName: "x",
			"usr/sbin/fsck":      "x",
			"usr/sbin/fsck.ext4": "x",
			"usr/sbin/sshd":      "x",
			"usr/lib/systemd/system-generators/" + sshGeneratorName: "x",
		}
		fsys := mapRoot(files)
		for p, mf := range fsys.Source().(fstest.MapFS) {
			if strings.HasPrefix(p, "usr/") {
				mf.Mode = 0o755
			}
		}
		for _, v := range []int{252, 257} {
			g, err := LoadWith(fsys, v, Options{CmdLine: cmdline, CmdLineSet: true})
			if err != nil {
				t.Fatal(err)
			}
			for name := range g.gen.nodes {
				if name != RunDir && name != "run/systemd" && !strings.HasPrefix(name, "run/systemd/generator") {
					t.Fatalf("wrote %q", name)
				}
			}
			g.Boot()
		}
	})
}

// TestFstabCmdLine: the generator reads the command line the options
// give, else the image's boot loader's (an empty one when none).
func TestFstabCmdLine(t *testing.T) {
	files := map[string]string{
		"etc/fstab": "/dev/sdb1 none swap sw 0 0\n",
		"usr/lib/systemd/system-generators/" + fstabGeneratorName: "x",
	}
	starts := func(files map[string]string, opts Options) (swap, remount bool) {
		fsys := mapRoot(files)
		for p, mf := range fsys.Source().(fstest.MapFS) {
			if strings.HasPrefix(p, "usr/") {
				mf.Mode = 0o755
			}
		}
		g, err := LoadWith(fsys, 257, opts)
		require.NoError(t, err)
		_, swap = g.gen.nodes[genDirNormal+"/swap.target.requires/dev-sdb1.swap"]
		_, remount = g.gen.nodes[genDirNormal+"/local-fs.target.wants/systemd-remount-fs.service"]
		return swap, remount
	}
	swap, remount := starts(files, Options{})
	assert.True(t, swap)
	assert.True(t, remount)
	files["etc/kernel/cmdline"] = "quiet systemd.swap=no\n"
	swap, remount = starts(files, Options{})
	assert.False(t, swap)
	assert.True(t, remount)
	swap, remount = starts(files, Options{CmdLine: "fstab=0", CmdLineSet: true})
	assert.False(t, swap)
	assert.False(t, remount)
	swap, _ = starts(files, Options{CmdLine: "", CmdLineSet: true})
	assert.True(t, swap)
}
