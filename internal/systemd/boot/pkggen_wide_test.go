package boot

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/systemd/systemdtest"
)

// wideVersions are systemd 252 and 257 in the roots make wide-root and
// make wide-trixie-root build: the packages ship the generators themselves
// (rpc-pipefs-generator is a compiled program, which Debian 13 patches;
// postfix-instance-generator runs postconf), so the oracle runs them as
// installed.
var wideVersions = []systemdtest.Systemd{
	{Version: 252, Root: testenv.Wide},
	{Version: 257, Root: testenv.WideTrixie},
}

// nfsConfOps replace /etc/nfs.conf (and add files) for rpc-pipefs-generator.
func nfsConfOps(conf string, more ...op) []op {
	return append([]op{file("/etc/nfs.conf", conf)}, more...)
}

// wideVariants are rpc-pipefs-generator's and postfix-instance-generator's
// cases, over the wide root.
func wideVariants() map[string][]op {
	return map[string][]op{
		"pipefs-unset":         nfsConfOps("[general]\n[mountd]\nmanage-gids=y\n"),
		"pipefs-default-value": nfsConfOps("[general]\npipefs-directory = /var/lib/nfs/rpc_pipefs\n"),
		"pipefs-custom":        nfsConfOps("[ General ]\n  Pipefs-Directory = \"/srv/pipe fs\"\n"),
		"pipefs-comment":       nfsConfOps("[general]\npipefs-directory=/srv/c # comment\n"),
		"pipefs-continued":     nfsConfOps("[general]\npipefs-directory=/srv/a\\\nb\n"),
		"pipefs-noeol":         nfsConfOps("[general]\npipefs-directory=/srv/x"),
		"pipefs-mounted":       nfsConfOps("[general]\npipefs-directory=/run\n"),
		"pipefs-arg-after":     nfsConfOps("[general]\npipefs-directory=/srv/plain\n[general \"x\"]\npipefs-directory=/srv/arg\n"),
		"pipefs-arg-before":    nfsConfOps("[general \"x\"]\npipefs-directory=/srv/arg\n[general]\npipefs-directory=/srv/plain2\n"),
		"pipefs-env":           nfsConfOps("[general]\npipefs-directory=$PIPE\n[environment]\nPIPE=/srv/env\n"),
		"pipefs-include": nfsConfOps("[general]\ninclude=extra/inc.conf\n",
			file("/etc/extra/inc.conf", "pipefs-directory='/srv/inc'\n")),
		"pipefs-conf-d": nfsConfOps("[general]\npipefs-directory=/srv/main\n",
			file("/etc/nfs.conf.d/10-a.conf", "[general]\npipefs-directory=/srv/ten\n"),
			file("/etc/nfs.conf.d/9-b.conf", "[general]\npipefs-directory=/srv/nine\n"),
			file("/etc/nfs.conf.d/.hidden.conf", "[general]\npipefs-directory=/srv/hidden\n"),
			file("/etc/nfs.conf.d/11-c.txt", "[general]\npipefs-directory=/srv/txt\n")),
		"pipefs-conf-d-only": append(nfsConfOps("[general]\n"),
			file("/etc/nfs.conf.d/x.conf", "[general]\npipefs-directory=/srv/dir-only\n")),
		// /usr/etc is read by nfs-utils 2.8 (257) only, and replaced by a
		// readable /etc/nfs.conf.
		"pipefs-usr-etc":          {file("/usr/etc/nfs.conf", "[general]\npipefs-directory=/srv/usr\n"), link("/etc/nfs.conf", "/nowhere")},
		"pipefs-usr-etc-replaced": {file("/usr/etc/nfs.conf", "[general]\npipefs-directory=/srv/usr\n"), file("/etc/nfs.conf", "[general]\n")},
		"pipefs-usr-etc-d":        {file("/usr/etc/nfs.conf.d/a.conf", "[general]\npipefs-directory=/srv/usrd\n"), file("/etc/nfs.conf", "[x]\n")},
		"postfix-instances": {
			file("/etc/postfix/main.cf", "myhostname = example\nmulti_instance_directories = /etc/postfix-out\n    /etc/postfix-noname,/x\n"),
			file("/etc/postfix-out/main.cf", "multi_instance_name = postfix-out\n"),
			file("/etc/postfix-noname/main.cf", "myhostname = x\n"),
		},
		"postfix-one": {
			file("/etc/postfix/main.cf", "multi_instance_directories = /etc/postfix-one\n"),
			file("/etc/postfix-one/main.cf", "multi_instance_name = one\nmulti_instance_name = postfix-one\n"),
		},
	}
}

// TestOracleWide compares the model with systemd 252 and 257 on the wide
// roots, with every generator, and on variants of them with the
// machine's generators masked.
func TestOracleWide(t *testing.T) {
	for _, sd := range wideVersions {
		t.Run(sd.Name()+"/as-built", func(t *testing.T) {
			v := variant{sd: sd}
			want := v.oracle(t)
			got, _ := modelStart(t, v)
			onlySystemd, onlyModel := diff(want.Start, got)
			t.Logf("systemd %d starts %d units, the model %d; only systemd: %v", sd.Version, len(want.Start), len(got), onlySystemd)
			assert.Empty(t, onlyModel)
			assert.Empty(t, onlySystemd)
			assert.Contains(t, got, "run-rpc_pipefs.mount")
		})
		for name, ops := range wideVariants() {
			t.Run(sd.Name()+"/"+name, func(t *testing.T) { sameStart(t, sd, name, ops) })
		}
	}
}
