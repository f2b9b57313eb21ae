package boot

import "strings"

// implicitMountOps are mount units nothing enables and enabled units whose
// settings systemd turns into implicit dependencies on the mounts of a
// path (unit_require_mounts_for, unit_add_mounts_for from 256): a mount
// unit with a unit file for a prefix of such a path is pulled in, one for
// a path systemd does not look at is not. They are a variant of the
// oracle test (see variants). A path that is not normalized fails the
// load where its caller passes the error on.
func implicitMountOps() []op {
	const dir = "/etc/systemd/system/"
	var ops []op
	mount := func(name, where string) {
		ops = append(ops, file(dir+name, "[Mount]\nWhat=ramfs\nWhere="+where+"\nType=ramfs\n"))
	}
	enable := func(target, name, text string) {
		ops = append(ops, file(dir+name, text), link(dir+target+".wants/"+name, dir+name))
	}
	service := func(name, settings string) {
		enable("multi-user.target", name, "[Service]\nExecStart=/bin/true\n"+settings)
	}
	socket := func(name, settings string) {
		enable("sockets.target", name+".socket", "[Socket]\n"+settings)
		ops = append(ops, file(dir+name+".service", svc))
	}
	for _, m := range []string{
		"srv", "srv/wd", "srv/wdign", "srv/root", "srv/img", "var/lib/st", "var/cache/ca", "var/log/lg",
		"etc/cf", "run/rt", "var/lib/private", "srv/sock", "srv/dgram", "srv/fifo", "srv/special",
		"srv/usb", "srv/sockwd", "srv/nosockwd", "srv/abs", "mq", "srv/pth", "var/lib/systemd/timers",
		"srv/mnt", "srv/bsrc", "srv/nfssrc", "srv/swp", "srv/am", "srv/rmf", "srv/rmfa", "srv/dd",
		"srv/spec", "srv/esc1", "srv/esc2", "srv/esc3", "srv/esc4", "srv/rootu", "srv/imgu", "srv/wdu",
		"var/lib/ca", "var/lib/ca:b", "var/lib/cq", "var/lib/cq d", "var/lib/ro1", "var/lib/bad1",
	} {
		mount(pathName("/"+m, "mount"), "/"+m)
	}
	// Execution settings: the working directory (not the "-" form up to
	// 256, which 257 Wants), the root directory and image, the exec
	// directories under their prefixes; "private" is refused.
	service("wd.service", "WorkingDirectory=/srv/wd/x\n")
	service("wdign.service", "WorkingDirectory=-/srv/wdign/x\n")
	service("home.service", "WorkingDirectory=~\n")
	service("root.service", "RootDirectory=/srv/root/x\n")
	service("img.service", "RootImage=/srv/img/x.raw\n")
	service("dirs.service", "StateDirectory=st/a\nCacheDirectory=ca\nLogsDirectory=lg\nConfigurationDirectory=cf\nRuntimeDirectory=rt\n")
	service("private.service", "StateDirectory=private/pv\n")
	service("spec.service", "WorkingDirectory=/srv/spec/%n\n")
	// A root directory or image whose specifiers resolve to nothing
	// unsets it (config_parse_unit_path_printf); a working directory that
	// does not resolve is ignored when "-" allows it, the one before kept.
	service("rootunset.service", "RootDirectory=/srv/rootu/x\nRootDirectory=%i\n")
	service("imgunset.service", "RootImage=/srv/imgu/x.raw\nRootImage=%i\n")
	service("wdkept.service", "WorkingDirectory=/srv/wdu/x\nWorkingDirectory=-%X\n")
	// Exec directories: "SOURCE[:DESTINATION[:FLAGS]]" split at colons
	// that "\\:" does not escape, in words whose backslashes were kept;
	// quotes group a word.
	service("dirs-esc.service", "StateDirectory=ca\\:b\n")
	service("dirs-quote.service", "StateDirectory=\"cq d\" \"cq:x\"\n")
	service("dirs-ro.service", "StateDirectory=ro1::ro\n")
	service("dirs-badflag.service", "StateDirectory=bad1::rw cq\n")
	// [Unit] RequiresMountsFor= takes absolute normalized paths after
	// specifiers; others are ignored.
	enable("multi-user.target", "rmf.service", "[Unit]\nRequiresMountsFor=/srv/rmf/%p \"/srv/../srv/rmfa/x\" rel/x\n"+svc)
	// Sockets: the file system paths they listen on (after /var/run is
	// patched to /run), not abstract ones nor message queues; their
	// execution settings only when they run a command.
	socket("sock", "ListenStream=/srv/sock/s\nListenDatagram=@/srv/abs/s\n")
	socket("dgram", "ListenDatagram=/srv/dgram/s\n")
	socket("fifo", "ListenFIFO=/srv/fifo/f\n")
	socket("special", "ListenSpecial=/srv/special/s\n")
	socket("usb", "ListenUSBFunction=/srv/usb/u\n")
	socket("mq", "ListenMessageQueue=/mq\n")
	socket("sockwd", "ListenStream=/run/sockwd.sock\nExecStartPre=/bin/true\nWorkingDirectory=/srv/sockwd\n")
	socket("nosockwd", "ListenStream=/run/nosockwd.sock\nWorkingDirectory=/srv/nosockwd\n")
	// A socket path that is not normalized fails the socket's load; from
	// 257 "/.." is "/".
	socket("dotdot", "ListenStream=/srv/x/../sock/d\n")
	socket("rootdotdot", "ListenStream=/../srv/dd/s\n")
	// Path units watch their paths; persistent timers keep their stamps
	// in /var/lib/systemd/timers.
	enable("paths.target", "pth.path", "[Path]\nPathExists=/srv/pth/x\n")
	ops = append(ops, file(dir+"pth.service", svc))
	enable("timers.target", "tm.timer", "[Timer]\nOnBootSec=1h\nPersistent=yes\n")
	ops = append(ops, file(dir+"tm.service", svc))
	// Mounts need the mount above their mount point and, unless they are
	// network mounts that are neither bind nor loop mounts, the mounts of
	// an absolute What=, which must then be normalized.
	enable("local-fs.target", "srv-mnt-in.mount", "[Mount]\nWhat=tmpfs\nWhere=/srv/mnt/in\nType=tmpfs\n")
	enable("local-fs.target", "bound.mount", "[Mount]\nWhat=/srv/bsrc/x\nWhere=/bound\nOptions=bind\n")
	enable("remote-fs.target", "nfs.mount", "[Mount]\nWhat=/srv/nfssrc/x\nWhere=/nfs\nType=nfs\n")
	enable("remote-fs.target", "nfsdotdot.mount", "[Mount]\nWhat=/srv/y/../z\nWhere=/nfsdotdot\nType=nfs\n")
	enable("local-fs.target", "dotdot.mount", "[Mount]\nWhat=/srv/y/../z\nWhere=/dotdot\nType=ext4\n")
	// Options are split at commas a backslash does not escape
	// (fstab_test_option), and a Type= or Options= whose specifiers fail
	// is ignored.
	enable("remote-fs.target", "esc1.mount", "[Mount]\nWhat=/srv/esc1/x\nWhere=/esc1\nType=nfs\nOptions=a\\,bind\n")
	enable("remote-fs.target", "esc2.mount", "[Mount]\nWhat=/srv/esc2/x\nWhere=/esc2\nType=ext4\nOptions=a\\,_netdev\n")
	enable("remote-fs.target", "esc3.mount", "[Mount]\nWhat=/srv/esc3/x\nWhere=/esc3\nType=ext4\nType=%X\nOptions=_netdev\nOptions=%X\n")
	enable("remote-fs.target", "esc4.mount", "[Mount]\nWhat=/srv/esc4/x\nWhere=/esc4\nType=nfs\nOptions=loop\\\\,x\n")
	// Swaps need the mounts of their device; automounts the mount above
	// their mount point.
	enable("swap.target", "srv-swp-file.swap", "[Swap]\nWhat=/srv/swp/file\n")
	enable("local-fs.target", "srv-am-x.automount", "[Automount]\nWhere=/srv/am/x\n")
	ops = append(ops, file(dir+"srv-am-x.mount", "[Mount]\nWhat=tmpfs\nWhere=/srv/am/x\nType=tmpfs\n"))
	// A masked mount unit is never required, so the unit that needs its
	// path starts; one refused for its settings (no What=) fails that
	// unit under 257, not under 252.
	ops = append(ops, file(dir+"srv-badm.mount", "[Mount]\nWhere=/srv/badm\nType=tmpfs\n"),
		link(dir+"srv-maskm.mount", "/dev/null"))
	service("badm.service", "WorkingDirectory=/srv/badm/x\n")
	service("maskm.service", "WorkingDirectory=/srv/maskm/x\n")
	// A mount refused before it could add the dependencies of the units
	// below it (a Where= elsewhere, a bad execution setting) is not
	// required: those units start. One whose unit file fails (a bad line
	// or setting) is, as one whose Where= comes after the failure.
	for name, text := range map[string]string{
		"srv-mwhere.mount":  "[Mount]\nWhat=tmpfs\nWhere=/srv/elsewhere\nType=tmpfs\n",
		"srv-mpam.mount":    "[Mount]\nWhat=tmpfs\nType=tmpfs\nPAMName=login\nKillMode=process\n",
		"srv-mpamw.mount":   "[Mount]\nType=tmpfs\nPAMName=login\nKillMode=process\n",
		"srv-muser.mount":   "[Mount]\nWhat=tmpfs\nType=tmpfs\nUser=in valid\n",
		"srv-mutf.mount":    "[Mount]\nWhat=tmpfs\nType=tmpfs\nDescription=\xff\n",
		"srv-mwd.mount":     "[Mount]\nWhat=tmpfs\nType=tmpfs\nWorkingDirectory=rel\n",
		"srv-mwdlate.mount": "[Mount]\nWhat=tmpfs\nType=tmpfs\nWorkingDirectory=rel\nWhere=/srv/elsewhere\n",
	} {
		ops = append(ops, file(dir+name, text))
		service(strings.TrimSuffix(name, ".mount")+".service", "WorkingDirectory="+namePath(name)+"/x\n")
	}
	return ops
}
