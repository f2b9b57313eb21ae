package boot

import "strings"

// verifyCases are unit files for the checks of each type's verify step
// (service_verify, socket_verify, ...) and of the settings those checks
// read, by unit name. Each is enabled; the ones systemd refuses are
// bad-setting and not started, their valid neighbours start.
var verifyCases = map[string]string{
	// Enumerations and booleans keep their earlier value when an
	// assignment is invalid or empty.
	"v-type-bogus.service":    "[Service]\nType=oneshot\nType=bogus\nRemainAfterExit=yes\nExecStop=/bin/true\n",
	"v-type-empty.service":    "[Service]\nType=oneshot\nType=\nExecStart=/bin/true\nExecStart=/bin/true\n",
	"v-type-case.service":     "[Service]\nType=Simple\nRemainAfterExit=yes\nExecStop=/bin/true\n",
	"v-remain-maybe.service":  "[Service]\nType=oneshot\nRemainAfterExit=yes\nRemainAfterExit=maybe\nExecStop=/bin/true\n",
	"v-remain-empty.service":  "[Service]\nType=oneshot\nRemainAfterExit=yes\nRemainAfterExit=\nExecStop=/bin/true\n",
	"v-restart-empty.service": "[Service]\nType=oneshot\nRestart=always\nRestart=\nExecStart=/bin/true\n",
	"v-restart-bogus.service": "[Service]\nType=oneshot\nRestart=on-success\nRestart=sometimes\nExecStart=/bin/true\n",
	"v-restart-ok.service":    "[Service]\nType=oneshot\nRestart=always\nRestart=on-failure\nExecStart=/bin/true\n",
	"v-bus-empty.service":     "[Service]\nType=dbus\nBusName=org.example.A\nBusName=\nExecStart=/bin/true\n",
	"v-bus-bad.service":       "[Service]\nType=dbus\nBusName=org.example.1a\nExecStart=/bin/true\n",
	"v-bus-one.service":       "[Service]\nType=dbus\nBusName=example\nExecStart=/bin/true\n",
	// Type=oneshot refuses ExitType=cgroup and (252) RestartForceExitStatus=.
	"v-force-oneshot.service":  "[Service]\nType=oneshot\nExecStart=/bin/true\nRestartForceExitStatus=DATAERR\n",
	"v-force-sig.service":      "[Service]\nType=oneshot\nExecStart=/bin/true\nRestartForceExitStatus=bogus SIGUSR1\n",
	"v-force-bogus.service":    "[Service]\nType=oneshot\nExecStart=/bin/true\nRestartForceExitStatus=bogus 256\n",
	"v-force-reset.service":    "[Service]\nType=oneshot\nExecStart=/bin/true\nRestartForceExitStatus=1\nRestartForceExitStatus=\n",
	"v-force-simple.service":   "[Service]\nExecStart=/bin/true\nRestartForceExitStatus=1\n",
	"v-exitcg-oneshot.service": "[Service]\nType=oneshot\nExecStart=/bin/true\nExitType=cgroup\n",
	"v-exitcg-kept.service":    "[Service]\nType=oneshot\nExecStart=/bin/true\nExitType=cgroup\nExitType=\nExitType=bogus\n",
	"v-exitcg-main.service":    "[Service]\nType=oneshot\nExecStart=/bin/true\nExitType=cgroup\nExitType=main\n",
	"v-exitcg-simple.service":  "[Service]\nExecStart=/bin/true\nExitType=cgroup\n",
	// PAMName= needs KillMode=control-group (or, for services and from
	// 257 for all, mixed); 257 also refuses PrivatePIDs= outside services
	// and with Type=forking, and WorkingDirectory=~ with DynamicUser=yes.
	"v-pam-process.service":    "[Service]\nExecStart=/bin/true\nPAMName=login\nKillMode=process\n",
	"v-pam-mixed.service":      "[Service]\nExecStart=/bin/true\nPAMName=login\nKillMode=mixed\n",
	"v-pam-kill-bogus.service": "[Service]\nExecStart=/bin/true\nPAMName=login\nKillMode=process\nKillMode=bogus\n",
	"v-pam-kill-reset.service": "[Service]\nExecStart=/bin/true\nPAMName=login\nKillMode=process\nKillMode=\n",
	"v-pam-empty.service":      "[Service]\nExecStart=/bin/true\nPAMName=login\nPAMName=\nKillMode=none\n",
	"v-pam-mixed.socket":       "[Socket]\nListenStream=/run/v-pam-mixed.sock\nPAMName=login\nKillMode=mixed\n",
	"srv-vpam.mount":           "[Mount]\nWhat=tmpfs\nWhere=/srv/vpam\nType=tmpfs\nPAMName=login\nKillMode=mixed\n",
	"srv-vpam2.mount":          "[Mount]\nWhat=tmpfs\nWhere=/srv/vpam2\nType=tmpfs\nPAMName=login\nKillMode=process\n",
	"srv-vpam3.mount":          "[Mount]\nWhat=tmpfs\nWhere=/srv/vpam3\nType=tmpfs\nPAMName=login\n",
	"v-pids-fork.service":      "[Service]\nType=forking\nExecStart=/bin/true\nPrivatePIDs=yes\n",
	"v-pids-kept.service":      "[Service]\nType=forking\nExecStart=/bin/true\nPrivatePIDs=yes\nPrivatePIDs=maybe\nPrivatePIDs=\n",
	"v-pids-simple.service":    "[Service]\nExecStart=/bin/true\nPrivatePIDs=yes\n",
	"v-pids.socket":            "[Socket]\nListenStream=/run/v-pids.sock\nPrivatePIDs=yes\n",
	"v-dyn-home.service":       "[Service]\nExecStart=/bin/true\nDynamicUser=yes\nWorkingDirectory=~\n",
	"v-dyn-home-kept.service":  "[Service]\nExecStart=/bin/true\nDynamicUser=yes\nWorkingDirectory=-~\nWorkingDirectory=-rel\n",
	"v-dyn-home-path.service":  "[Service]\nExecStart=/bin/true\nDynamicUser=yes\nWorkingDirectory=~\nWorkingDirectory=-/tmp\n",
	// From 257 a service with a credential it keeps and no Type= is
	// Type=exec, which needs an ExecStart=.
	"v-cred-set.service":               "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nSetCredential=a:b\n",
	"v-cred-set-nodata.service":        "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nSetCredential=a:\n",
	"v-cred-set-noname.service":        "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nSetCredential=:x\n",
	"v-cred-set-nocolon.service":       "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nSetCredential=a\n",
	"v-cred-set-badesc.service":        "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nSetCredential=a:\\q\n",
	"v-cred-set-nul.service":           "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nSetCredential=a:\\x00\n",
	"v-cred-set-escname.service":       "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nSetCredential=a\\:b:c\n",
	"v-cred-set-space.service":         "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nSetCredential=a b:c\n",
	"v-cred-set-spec.service":          "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nSetCredential=%X:c\n",
	"v-cred-set-reset.service":         "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nSetCredentialEncrypted=a:QUJD\nSetCredential=\n",
	"v-cred-enc-bad.service":           "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nSetCredentialEncrypted=a:QQ\n",
	"v-cred-enc-bits.service":          "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nSetCredentialEncrypted=a:QR==\n",
	"v-cred-enc-ok.service":            "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nSetCredentialEncrypted=a:QUJD\n",
	"v-cred-enc-url.service":           "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nSetCredentialEncrypted=a:-_-_ QQ==\n",
	"v-cred-load.service":              "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nLoadCredential=a\n",
	"v-cred-load-rel.service":          "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nLoadCredential=a:b/c\n",
	"v-cred-load-name.service":         "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nLoadCredential=a:b\n",
	"v-cred-load-dotdot.service":       "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nLoadCredential=a:/x/../y\n",
	"v-cred-load-abs.service":          "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nLoadCredentialEncrypted=a:/etc/x\n",
	"v-cred-load-spec.service":         "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nLoadCredential=%X\n",
	"v-cred-load-dot.service":          "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nLoadCredential=.\n",
	"v-cred-load-other.service":        "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nLoadCredential=a\nSetCredential=\nImportCredential=\n",
	"v-cred-load-reset.service":        "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nLoadCredential=a\nLoadCredentialEncrypted=\n",
	"v-cred-import.service":            "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nImportCredential=foo.*\n",
	"v-cred-import-star.service":       "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nImportCredential=*\n",
	"v-cred-import-glob.service":       "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nImportCredential=f?o\n",
	"v-cred-import-mid.service":        "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nImportCredential=f*o\n",
	"v-cred-import-rename.service":     "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nImportCredential=foo:bar\n",
	"v-cred-import-rename-bad.service": "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nImportCredential=foo:a/b\n",
	"v-cred-import-reset.service":      "[Service]\nRemainAfterExit=yes\nExecStop=/bin/true\nImportCredential=foo\nImportCredential=\n",
	"v-cred-start.service":             "[Service]\nExecStart=/bin/true\nLoadCredential=a\n",
	"v-cred-oneshot.service":           "[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStop=/bin/true\nLoadCredential=a\n",
	// Sockets: MaxConnections= (252: with Accept=yes), accepting only
	// stream and sequential packet sockets, Symlinks= with exactly one
	// file system node.
	"v-maxconn0.socket":     "[Socket]\nListenStream=/run/v-maxconn0.sock\nMaxConnections=0\n",
	"v-maxconn0-acc.socket": "[Socket]\nListenStream=/run/v-maxconn0-acc.sock\nAccept=yes\nMaxConnections=0\n",
	"v-maxconn-kept.socket": "[Socket]\nListenStream=/run/v-maxconn-kept.sock\nMaxConnections=0\nMaxConnections=\nMaxConnections=bogus\n",
	"v-maxconn-ok.socket":   "[Socket]\nListenStream=/run/v-maxconn-ok.sock\nMaxConnections=0\nMaxConnections=5\n",
	"v-acc-dgram.socket":    "[Socket]\nListenDatagram=/run/v-acc-dgram.sock\nAccept=yes\n",
	"v-acc-fifo.socket":     "[Socket]\nListenStream=/run/v-acc-fifo.sock\nListenFIFO=/run/v-acc-fifo.fifo\nAccept=yes\n",
	"v-acc-seq.socket":      "[Socket]\nListenSequentialPacket=/run/v-acc-seq.sock\nAccept=yes\n",
	"v-acc-reset.socket":    "[Socket]\nListenDatagram=/run/v-acc-reset.dgram\nListenStream=\nListenStream=/run/v-acc-reset.sock\nAccept=yes\n",
	"v-acc-net.socket":      "[Socket]\nListenNetlink=kobject-uevent 1\nAccept=yes\n",
	"v-sym-one.socket":      "[Socket]\nListenStream=/run/v-sym-one.sock\nSymlinks=/run/v-sym-one.link\n",
	"v-sym-none.socket":     "[Socket]\nListenStream=@v-sym-none\nSymlinks=/run/v-sym-none.link\n",
	"v-sym-two.socket":      "[Socket]\nListenStream=/run/v-sym-two.sock\nListenFIFO=/run/v-sym-two.fifo\nSymlinks=/run/v-sym-two.link\n",
	"v-sym-reset.socket":    "[Socket]\nListenStream=/run/v-sym-reset.sock\nListenFIFO=/run/v-sym-reset.fifo\nSymlinks=/run/v-sym-reset.link\nSymlinks=\n",
	"v-sym-rel.socket":      "[Socket]\nListenStream=/run/v-sym-rel.sock\nListenFIFO=/run/v-sym-rel.fifo\nSymlinks=rel\n",
	"v-sym-fifo.socket":     "[Socket]\nListenFIFO=/run/v-sym-fifo.fifo\nListenStream=@v-sym-fifo\nSymlinks=/run/v-sym-fifo.link\n",
	// From 257 a FIFO, message queue or USB function path under /dev,
	// /proc or /sys is ignored (a special file's is not), which can leave
	// the socket with no listen address.
	"v-fifo-dev.socket":    "[Socket]\nListenFIFO=/dev/v-fifo-dev\n",
	"v-fifo-proc.socket":   "[Socket]\nListenFIFO=/proc/../proc/v-fifo\n",
	"v-mq-dev.socket":      "[Socket]\nListenMessageQueue=/dev/v-mq-dev\n",
	"v-usb-sys.socket":     "[Socket]\nListenUSBFunction=/sys/v-usb-sys\n",
	"v-special-dev.socket": "[Socket]\nListenSpecial=/dev/v-special-dev\n",
	"v-fifo-dev-ok.socket": "[Socket]\nListenFIFO=/dev/v-fifo-dev-ok\nListenFIFO=/run/v-fifo-dev-ok\n",
	"v-mq-rel.socket":      "[Socket]\nListenMessageQueue=v-mq-rel\n",
	"v-mq-spec.socket":     "[Socket]\nListenMessageQueue=/%X\n",
	// Mount points systemd keeps to itself, and automounts of / or with
	// reserved options.
	"run-host-vm.mount":        "[Mount]\nWhat=tmpfs\nType=tmpfs\n",
	"sys-fs-cgroup-vm.mount":   "[Mount]\nWhat=tmpfs\nType=tmpfs\n",
	"proc-kmsg.mount":          "[Mount]\nWhat=tmpfs\nType=tmpfs\n",
	"dev-console.mount":        "[Mount]\nWhat=tmpfs\nType=tmpfs\n",
	"run-credentials-vm.mount": "[Mount]\nWhat=tmpfs\nType=tmpfs\n",
	"run-hostx.mount":          "[Mount]\nWhat=tmpfs\nType=tmpfs\n",
	"-.automount":              "[Automount]\n",
	"srv-va.automount":         "[Automount]\nExtraOptions=uid=0,fd=3\n",
	"srv-vb.automount":         "[Automount]\nExtraOptions=uid=0\n",
	"srv-vc.automount":         "[Automount]\nExtraOptions=direct\nExtraOptions=\n",
	"srv-vd.automount":         "[Automount]\nExtraOptions=indirect\n",
	// fstab_test_option: options are split at commas not escaped by a
	// backslash, and a name counts alone, before "=" or before a comma.
	"srv-ve.automount": "[Automount]\nExtraOptions=a\\,fd\n",
	"srv-vf.automount": "[Automount]\nExtraOptions=fd\\,x\n",
	"srv-vg.automount": "[Automount]\nExtraOptions=a\\\\,fd\n",
	"srv-vh.automount": "[Automount]\nExtraOptions=pgrp=\n",
	"srv-vi.automount": "[Automount]\nExtraOptions=xfd,minprotox\n",
	"srv-vj.automount": "[Automount]\nExtraOptions=a,\\\n",
	"srv-vk.automount": "[Automount]\nExtraOptions=a\\\\\\,maxproto\n",
	"srv-vl.automount": "[Automount]\nExtraOptions=,direct,\n",
	// A value whose specifiers fail is ignored: the one before stays.
	"srv-vm.automount": "[Automount]\nExtraOptions=fd\nExtraOptions=%X\n",
	"srv-vn.automount": "[Automount]\nExtraOptions=x\nExtraOptions=%X,fd\n",
	// ExtraOptions= is read as a line, not a path: up to LONG_LINE_MAX.
	"srv-vr.automount": "[Automount]\nExtraOptions=fd," + strings.Repeat("x", 4100) + "\n",
	// A mount whose What= is empty or whose specifiers fail has none.
	"srv-vo.mount":          "[Mount]\nWhat=tmpfs\nType=tmpfs\nWhat=\n",
	"srv-vp.mount":          "[Mount]\nWhat=%X\nType=tmpfs\n",
	"srv-vq.mount":          "[Mount]\nWhat=tmpfs\nType=tmpfs\nWhat=%X\n",
	"v-accept-empty.socket": "[Socket]\nListenStream=/run/v-accept-empty.sock\nAccept=yes\nAccept=\nService=v-accept-empty.service\n",
}

// verifyOps enables each of verifyCases, with a service for each socket
// to activate.
func verifyOps() []op {
	wants := map[string]string{
		".service": "multi-user", ".socket": "sockets", ".mount": "local-fs",
		".automount": "local-fs", ".swap": "swap", ".timer": "timers", ".path": "paths",
	}
	var ops []op
	for name, text := range verifyCases {
		suffix := name[strings.LastIndex(name, "."):]
		ops = append(ops, file("/etc/systemd/system/"+name, text),
			link("/etc/systemd/system/"+wants[suffix]+".target.wants/"+name, "/etc/systemd/system/"+name))
		if suffix == ".automount" {
			ops = append(ops, file("/etc/systemd/system/"+strings.TrimSuffix(name, suffix)+".mount",
				"[Mount]\nWhat=tmpfs\nType=tmpfs\n"))
		}
		if suffix == ".socket" {
			base := strings.TrimSuffix(name, suffix)
			ops = append(ops, file("/etc/systemd/system/"+base+".service", svc),
				file("/etc/systemd/system/"+base+"@.service", svc))
		}
	}
	return ops
}
