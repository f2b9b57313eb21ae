package boot

import (
	"fmt"
	"strings"
	"testing"
)

// badSettingOps are units whose settings systemd's parsers refuse or
// ignore, each enabled: a unit file that fails with -ENOEXEC leaves its
// unit bad-setting (not started), one whose failure is ignored (a "-"
// prefix, a syntax error in a command's first word) starts, and a drop-in
// that fails stops being read there. They are a variant of the oracle
// test (see variants).
func badSettingOps() []op {
	cases := map[string]string{
		"relslash":      "[Service]\nExecStart=bin/true\n",
		"prerel":        "[Service]\nExecStartPre=bin/x\nExecStart=/bin/true\n",
		"preign":        "[Service]\nExecStartPre=-bin/x\nExecStart=/bin/true\n",
		"dotdot":        "[Service]\nExecStart=/usr/bin/../bin/true\n",
		"quote":         "[Service]\nExecStart=\"/bin/true\n",
		"badspec":       "[Service]\nExecStart=/bin/%X\n",
		"badspecarg":    "[Service]\nExecStart=/bin/true %X\n",
		"escape":        "[Service]\nExecStart=/bin/true \\q\n",
		"plain":         "[Service]\nExecStart=true\n",
		"wd":            "[Service]\nExecStart=/bin/true\nWorkingDirectory=rel\n",
		"wdign":         "[Service]\nExecStart=/bin/true\nWorkingDirectory=-rel\n",
		"user":          "[Service]\nExecStart=/bin/true\nUser=in valid\n",
		"rootdir":       "[Service]\nExecStart=/bin/true\nRootDirectory=rel\n",
		"stoprel":       "[Service]\nExecStart=/bin/true\nExecStop=x/y\n",
		"emptyargv":     "[Service]\nExecStart=@/bin/true\n",
		"onlyprefix":    "[Service]\nExecStart=-\n",
		"long":          "[Service]\nExecStart=/a" + strings.Repeat("%n", 300) + "\n",
		"semi2simple":   "[Service]\nExecStart=/bin/true ; /bin/false\n",
		"semi2oneshot":  "[Service]\nType=oneshot\nExecStart=/bin/true ; /bin/false\n",
		"semibad":       "[Service]\nType=oneshot\nExecStart=/bin/true ; bin/false\n",
		"semiign":       "[Service]\nExecStart=/bin/true ; -bin/false\n",
		"escsemi":       "[Service]\nExecStart=/bin/echo \\; x\n",
		"leadsemi":      "[Service]\nExecStart=; /bin/true\n",
		"at":            "[Service]\nExecStart=@/bin/true true\n",
		"atonly":        "[Service]\nExecStart=@/bin/true\n",
		"dashat":        "[Service]\nExecStart=-@/bin/true\n",
		"twodash":       "[Service]\nExecStart=--/bin/true\n",
		"bangs":         "[Service]\nExecStart=!!/bin/true\n",
		"plusbang":      "[Service]\nExecStart=+!/bin/true\n",
		"triplebang":    "[Service]\nExecStart=!!!/bin/true\n",
		"dirslash":      "[Service]\nExecStart=/bin/\n",
		"dotend":        "[Service]\nExecStart=/bin/.\n",
		"dotdotend":     "[Service]\nExecStart=/usr/bin/..\n",
		"argspec":       "[Service]\nExecStart=/bin/echo %n %H %y\n",
		"argquote":      "[Service]\nExecStart=/bin/echo \"unterminated\n",
		"argescq":       "[Service]\nExecStart=/bin/echo \"a\\\n",
		"hexpath":       "[Service]\nExecStart=/bin/tr\\x75e\n",
		"ctrlpath":      "[Service]\nExecStart=/bin/tr\\tue\n",
		"quotepath":     "[Service]\nExecStart=/bin/\\\"true\n",
		"bspath":        "[Service]\nExecStart=/bin/t\\qrue\n",
		"longcomp":      "[Service]\nExecStart=/bin/" + strings.Repeat("a", 256) + "\n",
		"longname":      "[Service]\nExecStart=" + strings.Repeat("a", 256) + "\n",
		"resetbad":      "[Service]\nExecStart=bin/x\nExecStart=\nExecStart=/bin/true\n",
		"stopbad":       "[Service]\nExecStart=/bin/true\nExecReload=x/y\n",
		"condbad":       "[Service]\nExecStart=/bin/true\nExecCondition=%X\n",
		"wdtilde":       "[Service]\nExecStart=/bin/true\nWorkingDirectory=~\n",
		"wddotdot":      "[Service]\nExecStart=/bin/true\nWorkingDirectory=/a/../b\n",
		"wdspec":        "[Service]\nExecStart=/bin/true\nWorkingDirectory=/%X\n",
		"rootimg":       "[Service]\nExecStart=/bin/true\nRootImage=img\n",
		"rootverity":    "[Service]\nExecStart=/bin/true\nRootVerity=/a//b\n",
		"rootdir0":      "[Service]\nExecStart=/bin/true\nRootDirectory=%i\n",
		"rootimg0":      "[Service]\nExecStart=/bin/true\nRootImage=/img\nRootImage=%i\n",
		"rootver0":      "[Service]\nExecStart=/bin/true\nRootVerity=%i\n",
		"wd0":           "[Service]\nExecStart=/bin/true\nWorkingDirectory=%i\n",
		"usernum":       "[Service]\nExecStart=/bin/true\nUser=0123\n",
		"userdigits":    "[Service]\nExecStart=/bin/true\nUser=4294967295\n",
		"usercolon":     "[Service]\nExecStart=/bin/true\nUser=a:b\n",
		"userspace":     "[Service]\nExecStart=/bin/true\nUser= lead\n",
		"grpspec":       "[Service]\nExecStart=/bin/true\nGroup=%X\n",
		"suppl":         "[Service]\nExecStart=/bin/true\nSupplementaryGroups=ok a/b\n",
		"supplq":        "[Service]\nExecStart=/bin/true\nSupplementaryGroups=ok \"a/b\n",
		"selinux":       "[Service]\nExecStart=/bin/true\nSELinuxContext=%X\n",
		"selinuxign":    "[Service]\nExecStart=/bin/true\nSELinuxContext=-%X\n",
		"apparmor":      "[Service]\nExecStart=/bin/true\nAppArmorProfile=%X\n",
		"socketuser":    "[Service]\nExecStart=/bin/true\nSocketUser=a/b\n",
		"unitsec":       "[Unit]\nDescription=%X\n[Service]\nExecStart=/bin/true\n",
		"envspec":       "[Service]\nExecStart=/bin/true\nEnvironment=A=%X\n",
		"pathmax":       "[Service]\nExecStart=/" + strings.Repeat("a/", 2046) + "b\n",
		"pathmax2":      "[Service]\nExecStart=/" + strings.Repeat("a/", 2047) + "b\n",
		"pathmax3":      "[Service]\nExecStart=/" + strings.Repeat("a/", 2046) + "bc\n",
		"pid-dotdot":    "[Service]\nExecStart=/bin/true\nPIDFile=/a/../b\n",
		"pid-reldotdot": "[Service]\nExecStart=/bin/true\nPIDFile=../b.pid\n",
		"pid-rel":       "[Service]\nExecStart=/bin/true\nPIDFile=rel/x.pid\n",
		"pid-spec":      "[Service]\nExecStart=/bin/true\nPIDFile=/run/%X.pid\n",
		"pid-dev":       "[Service]\nExecStart=/bin/true\nPIDFile=/dev/x.pid\n",
		"pid-devices":   "[Service]\nExecStart=/bin/true\nPIDFile=/devices/x.pid\n",
		"pid-proc":      "[Service]\nExecStart=/bin/true\nPIDFile=/proc\n",
		"pid-reset":     "[Service]\nExecStart=/bin/true\nPIDFile=\n",
		"dyn-empty":     "[Service]\nExecStart=/bin/true\nDynamicUser=\n",
		"dyn-maybe":     "[Service]\nExecStart=/bin/true\nDynamicUser=maybe\n",
		"dyn-on":        "[Service]\nExecStart=/bin/true\nDynamicUser=On\n",
		"ns":            "[Service]\nExecStart=/bin/true\nLogNamespace=ns1\n",
		"ns-kept":       "[Service]\nExecStart=/bin/true\nLogNamespace=ns2\nLogNamespace=bad/x\nLogNamespace=%X\n",
		"ns-reset":      "[Service]\nExecStart=/bin/true\nLogNamespace=ns3\nLogNamespace=\n",
		"ns-spec":       "[Service]\nExecStart=/bin/true\nLogNamespace=%p-%i\n",
		"ns-long":       "[Service]\nExecStart=/bin/true\nLogNamespace=" + strings.Repeat("n", 223) + "\n",
		"ns-glob":       "[Service]\nExecStart=/bin/true\nLogNamespace=a*b\n",
		"cond":          "[Unit]\nConditionPathExists=/etc/../etc\n[Service]\nExecStart=/bin/true\n",
	}
	// Image policies (systemd 254 on; 252 ignores the settings).
	for n, v := range map[string]string{
		"dash": "-", "star": "*", "tilde": "~", "ok": "root=verity+signed:usr=encrypted",
		"default": "=open", "dup": "root=open:root=ignore", "dupdef": "=open:=ignore",
		"unknownpart": "rooot=open", "unknownflag": "root=verity+sined", "emptyflags": "root=",
		"dashflags": "root=-:usr=-", "plusend": "root=verity+", "spaces": "root = verity + signed : = absent",
		"colonend": "root=open:", "noeq": "root", "eqeq": "root=open=x", "esc": "ro\\ot=open",
		"escend": "root=open\\", "mixed": "root-verity-sig=ignore:tmp=read-only-on+growfs-off:var=unprotected",
		"empty2": "root=open::usr=open", "swap": "swap=absent", "inner": "root=ver ity",
	} {
		for _, s := range []string{"RootImagePolicy", "MountImagePolicy", "ExtensionImagePolicy"} {
			cases["ip-"+s[:4]+"-"+n] = "[Service]\nExecStart=/bin/true\n" + s + "=" + v + "\n"
		}
	}
	var ops []op
	for n, text := range cases {
		ops = append(ops, file("/etc/systemd/system/p-"+n+".service", text),
			link("/etc/systemd/system/multi-user.target.wants/p-"+n+".service", "/etc/systemd/system/p-"+n+".service"))
	}
	// Listen addresses, timer values and watched paths are each one list
	// that an empty assignment of any of its settings empties.
	for name, text := range map[string]string{
		"r-sock.socket":        "[Socket]\nListenStream=/run/r-sock.sock\nListenDatagram=\n",
		"r-sock-again.socket":  "[Socket]\nListenStream=/run/r-a.sock\nListenFIFO=\nListenStream=/run/r-b.sock\n",
		"r-sock-dropin.socket": "[Socket]\nListenStream=/run/r-d.sock\n",
		"r-timer.timer":        "[Timer]\nOnBootSec=1h\nOnCalendar=\n",
		"r-timer-clock.timer":  "[Timer]\nOnBootSec=1h\nOnUnitActiveSec=\nOnClockChange=yes\n",
		"r-timer-again.timer":  "[Timer]\nOnCalendar=daily\nOnActiveSec=\nOnStartupSec=5min\n",
		"r-path.path":          "[Path]\nPathExists=/etc/no-such\nDirectoryNotEmpty=\n",
		"r-path-again.path":    "[Path]\nPathExists=/etc/no-such\nPathModified=\nPathChanged=/etc/no-such\n",
	} {
		wants := map[string]string{".socket": "sockets", ".timer": "timers", ".path": "paths"}[name[strings.LastIndex(name, "."):]]
		base := strings.TrimSuffix(name, name[strings.LastIndex(name, "."):])
		ops = append(ops, file("/etc/systemd/system/"+name, text),
			link("/etc/systemd/system/"+wants+".target.wants/"+name, "/etc/systemd/system/"+name),
			file("/etc/systemd/system/"+base+".service", svc))
	}
	// Where= of a mount and What= of a swap: a bad Where= is ignored; the
	// swap's device must spell its name and, from 254, be an absolute,
	// normalized path.
	for name, text := range map[string]string{
		"srv-w1.mount":                  "[Mount]\nWhat=tmpfs\nWhere=/srv/w1\nType=tmpfs\nWhere=rel/x\n",
		"srv-w2.mount":                  "[Mount]\nWhat=tmpfs\nWhere=/srv//w2/\nType=tmpfs\n",
		"srv-w3.mount":                  "[Mount]\nWhat=tmpfs\nWhere=/srv/w3\nType=tmpfs\nWhere=%X\nWhere=/srv/../w3\n",
		"srv-w4.mount":                  "[Mount]\nWhat=tmpfs\nWhere=/srv/other\nType=tmpfs\nWhere=\n",
		"qswap-a.swap":                  "[Swap]\nWhat=/qswap-a\n",
		"qswap-rel.swap":                "[Swap]\nWhat=rel/x\n",
		"qswap-dd.swap":                 "[Swap]\nWhat=/qswap/../rel\n",
		"qswap-dd2.swap":                "[Swap]\nWhat=/qswap/../dd2\n",
		"qswap-sl.swap":                 "[Swap]\nWhat=/qswap//sl/\n",
		"qswap-x.swap":                  "[Swap]\nWhat=/elsewhere\n",
		"qswap-r.swap":                  "[Swap]\nWhat=/elsewhere\nWhat=\n",
		"qswap-spec.swap":               "[Swap]\nWhat=/%X\n",
		"qswap\\x2dlabel.swap":          "[Swap]\nWhat=LABEL=x\n",
		"dev-disk-by\\x2dlabel-sw.swap": "[Swap]\nWhat=LABEL=sw\n",
	} {
		wants := map[string]string{".mount": "local-fs", ".swap": "swap"}[name[strings.LastIndex(name, "."):]]
		ops = append(ops, file("/etc/systemd/system/"+name, text),
			link("/etc/systemd/system/"+wants+".target.wants/"+name, "/etc/systemd/system/"+name))
	}
	// The fstab tags of What= name a /dev/disk/by-* link as udev spells it
	// (fstab_node_to_udev_node, from 254): one pair of enclosing quotes
	// dropped, then every byte but ASCII letters and digits, "#+-.:=@_"
	// and whole valid UTF-8 characters written \xNN. A swap loads only
	// under the name its device path spells (swap_verify), so each swap
	// below, named after the path written out by hand here, starts under
	// 257 only when the model spells the path as systemd does.
	for i, c := range []struct{ what, path string }{
		{"LABEL=a b", `/dev/disk/by-label/a\x20b`},
		{`LABEL="q l"`, `/dev/disk/by-label/q\x20l`},
		{"LABEL='s'", "/dev/disk/by-label/s"},
		{`LABEL="h'`, `/dev/disk/by-label/\x22h\x27`},
		{`LABEL="`, `/dev/disk/by-label/\x22`},
		{`LABEL=b\\s`, `/dev/disk/by-label/b\x5c\x5cs`},
		{"LABEL=d\u00fcn\u00e9", "/dev/disk/by-label/d\u00fcn\u00e9"},
		{"LABEL=#+-.:=@_ok", "/dev/disk/by-label/#+-.:=@_ok"},
		{"LABEL=d\x7fl", `/dev/disk/by-label/d\x7fl`},
		{"UUID=u/v,w", `/dev/disk/by-uuid/u\x2fv\x2cw`},
		{"PARTLABEL=p%%l*", `/dev/disk/by-partlabel/p\x25l\x2a`},
		{`PARTUUID="a~b"`, `/dev/disk/by-partuuid/a\x7eb`},
	} {
		name, other := pathName(c.path, "swap"), fmt.Sprintf("qswap-tag%d.swap", i)
		ops = append(ops,
			file("/etc/systemd/system/"+name, "[Swap]\nWhat="+c.what+"\n"),
			link("/etc/systemd/system/swap.target.wants/"+name, "/etc/systemd/system/"+name),
			// The same tag on a swap named otherwise, refused by both.
			file("/etc/systemd/system/"+other, "[Swap]\nWhat="+c.what+"\n"),
			link("/etc/systemd/system/swap.target.wants/"+other, "/etc/systemd/system/"+other))
	}
	// Persistent= keeps its earlier value when an assignment is empty or
	// not a boolean, and so the timer still needs the mount of its stamps
	// (the root's own persistent timers are masked so that nothing else
	// pulls that mount in).
	for _, name := range []string{"apt-daily", "apt-daily-upgrade", "dpkg-db-backup", "e2scrub_all", "exim4-base", "fstrim", "logrotate"} {
		ops = append(ops, link("/etc/systemd/system/"+name+".timer", "/dev/null"))
	}
	ops = append(ops,
		file("/etc/systemd/system/var-lib-systemd-timers.mount", "[Mount]\nWhat=ramfs\nWhere=/var/lib/systemd/timers\nType=ramfs\n"),
		file("/etc/systemd/system/q-persist.timer", "[Timer]\nOnBootSec=1h\nPersistent=yes\nPersistent=\nPersistent=maybe\n"),
		link("/etc/systemd/system/timers.target.wants/q-persist.timer", "/etc/systemd/system/q-persist.timer"),
		file("/etc/systemd/system/q-persist.service", svc))
	ops = append(ops,
		file("/etc/systemd/system/r-sock-dropin.socket.d/reset.conf", "[Socket]\nListenNetlink=\n"),
		file("/etc/systemd/system/s-bad.socket", "[Socket]\nListenStream=/run/s-bad.sock\nExecStartPre=rel/x\n"),
		link("/etc/systemd/system/sockets.target.wants/s-bad.socket", "/etc/systemd/system/s-bad.socket"),
		file("/etc/systemd/system/s-user.socket", "[Socket]\nListenStream=/run/s-user.sock\nSocketUser=a/b\n"),
		link("/etc/systemd/system/sockets.target.wants/s-user.socket", "/etc/systemd/system/s-user.socket"),
		file("/etc/systemd/system/s-ok.socket", "[Socket]\nListenStream=/run/s-ok.sock\nExecStartPre=-rel/x\n"),
		link("/etc/systemd/system/sockets.target.wants/s-ok.socket", "/etc/systemd/system/s-ok.socket"),
		// A socket's LogNamespace= counts only when it runs a command (one
		// that does is not compared: under 257 the namespace's sync
		// service is ordered after sockets.target, a cycle systemd breaks
		// by dropping the socket's job).
		file("/etc/systemd/system/s-ns.socket", "[Socket]\nListenStream=/run/s-ns.sock\nLogNamespace=sock\n"),
		link("/etc/systemd/system/sockets.target.wants/s-ns.socket", "/etc/systemd/system/s-ns.socket"),
		file("/etc/systemd/system/srv-x.mount", "[Mount]\nWhat=tmpfs\nWhere=/srv/x\nType=tmpfs\nUser=a/b\n"),
		link("/etc/systemd/system/local-fs.target.wants/srv-x.mount", "/etc/systemd/system/srv-x.mount"),
		file("/etc/systemd/system/srv-y.mount", "[Mount]\nWhat=tmpfs\nWhere=/srv/y\nType=tmpfs\nWorkingDirectory=rel\n"),
		link("/etc/systemd/system/local-fs.target.wants/srv-y.mount", "/etc/systemd/system/srv-y.mount"),
		file("/etc/systemd/system/srv-z.mount", "[Mount]\nWhat=tmpfs\nWhere=/srv/z\nType=tmpfs\nRootImagePolicy=root=bogus\n"),
		link("/etc/systemd/system/local-fs.target.wants/srv-z.mount", "/etc/systemd/system/srv-z.mount"),
		file("/etc/systemd/system/p-dropin-ip.service", svc),
		link("/etc/systemd/system/multi-user.target.wants/p-dropin-ip.service", "/etc/systemd/system/p-dropin-ip.service"),
		file("/etc/systemd/system/p-dropin-ip.service.d/bad.conf",
			"[Unit]\nWants=p-before-ip.service\n[Service]\nMountImagePolicy=:=open:=open\n[Unit]\nWants=p-after-ip.service\n"),
		file("/etc/systemd/system/p-before-ip.service", svc),
		file("/etc/systemd/system/p-after-ip.service", svc),
		file("/etc/systemd/system/p-dropin.service", svc),
		link("/etc/systemd/system/multi-user.target.wants/p-dropin.service", "/etc/systemd/system/p-dropin.service"),
		// The drop-in is read up to its bad line: the first Wants= counts,
		// the second does not.
		file("/etc/systemd/system/p-dropin.service.d/bad.conf",
			"[Unit]\nWants=p-before-bad.service\n[Service]\nExecStartPost=bad/x\n[Unit]\nWants=p-after-bad.service\n"),
		file("/etc/systemd/system/p-before-bad.service", svc),
		file("/etc/systemd/system/p-after-bad.service", svc),
		file("/etc/systemd/system/p-tmpl@.service", "[Service]\nExecStart=/bin/%i\n"),
		link("/etc/systemd/system/multi-user.target.wants/p-tmpl@x.service", "/etc/systemd/system/p-tmpl@.service"),
		link("/etc/systemd/system/multi-user.target.wants/p-tmpl@..service", "/etc/systemd/system/p-tmpl@.service"),
	)
	// A path unit counts only the paths its parser keeps: one whose paths
	// are all relative, not normalized or with an unknown specifier has
	// none and is refused.
	for n, paths := range map[string]string{
		"pu-rel":     "PathExists=rel/x\n",
		"pu-dotdot":  "PathChanged=/a/../b\n",
		"pu-spec":    "PathModified=/run/%X\n",
		"pu-mixed":   "DirectoryNotEmpty=rel\nPathExistsGlob=/run/pu-*\n",
		"pu-reset":   "PathExists=/run/pu\nPathChanged=\n",
		"pu-restore": "PathExists=\nPathExists=/run/pu-restore\n",
	} {
		ops = append(ops, file("/etc/systemd/system/"+n+".path", "[Path]\n"+paths),
			file("/etc/systemd/system/"+n+".service", svc),
			link("/etc/systemd/system/paths.target.wants/"+n+".path", "/etc/systemd/system/"+n+".path"))
	}
	return ops
}

// FuzzImagePolicy checks that any image policy is judged without a
// panic, and that a valid one stays valid with an extra valid rule for a
// designator it has no rule for.
func FuzzImagePolicy(f *testing.F) {
	for _, s := range []string{"-", "*", "root=verity+signed:usr=encrypted", "=open", "root=", "a\\:b=c", "root=open:", " root = open ", "\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if len(v) > 1<<16 {
			return
		}
		why := badImagePolicy(v)
		if why != "" || v == "" || v == "-" || v == "*" || v == "~" || strings.Contains(v, "home") || strings.HasSuffix(v, "\\") {
			return
		}
		if w := badImagePolicy(v + ":home=open"); w != "" {
			t.Fatalf("%q is valid but not with another rule: %s", v, w)
		}
	})
}

// FuzzParseCommands checks that any command setting parses without a
// panic, that ignoring failures ("-") never fails, and that a value
// failing the load still counts only whole commands.
func FuzzParseCommands(f *testing.F) {
	for _, s := range []string{"/bin/true", "-bin/x", `@/bin/echo "a b" \; c ; /bin/x`, `"/bin/true`, "/bin/%X %n", `\x41\u00e9\U0001F600\101\q\`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		if len(v) > 1<<16 {
			return
		}
		n, why := parseCommands("a@b.service", 257, v)
		if n < 0 || n > len(v) {
			t.Fatalf("%d commands from %q", n, v)
		}
		if strings.HasPrefix(strings.TrimLeft(v, whitespace), "-") && why != "" && !strings.Contains(v, ";") {
			t.Fatalf("%q fails the load although its failures are ignored: %s", v, why)
		}
	})
}
