package install

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
)

// writeTree creates a tree from a spec: "path": "content" writes a file,
// "path": "-> target" a symlink, "path/": "" a directory.
func writeTree(t testing.TB, dir string, spec map[string]string) {
	t.Helper()
	for p, v := range spec {
		full := filepath.Join(dir, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		switch {
		case strings.HasSuffix(p, "/"):
			require.NoError(t, os.MkdirAll(full, 0o755))
		case strings.HasPrefix(v, "-> "):
			require.NoError(t, os.Symlink(strings.TrimPrefix(v, "-> "), full))
		default:
			require.NoError(t, os.WriteFile(full, []byte(v), 0o644))
		}
	}
}

const (
	lib  = "lib/systemd/system/"
	ulib = "usr/lib/systemd/system/"
	etc  = "etc/systemd/system/"
	run  = "run/systemd/system/"
)

const wantedMulti = "[Unit]\nDescription=x\n[Install]\nWantedBy=multi-user.target\n"

// featureTrees cover each feature of list-unit-files one by one.
var featureTrees = map[string]map[string]string{
	"precedence and shadowing": {
		lib + "a.service":                         wantedMulti,
		etc + "a.service":                         "[Unit]\n",
		ulib + "b.service":                        wantedMulti,
		lib + "b.service":                         "[Service]\n",
		"usr/local/lib/systemd/system/c.service":  wantedMulti,
		lib + "c.service":                         "[Unit]\n",
		run + "d.service":                         wantedMulti,
		lib + "d.service":                         "[Unit]\n",
		lib + "multi-user.target":                 "[Unit]\n",
		etc + "multi-user.target.wants/d.service": "-> /run/systemd/system/d.service",
	},
	"merged usr": {
		"lib":                      "-> usr/lib",
		ulib + "foo.service":       wantedMulti,
		ulib + "multi-user.target": "[Unit]\n",
		etc + "multi-user.target.wants/foo.service": "-> /lib/systemd/system/foo.service",
		ulib + "bar.service":                        wantedMulti,
		etc + "multi-user.target.wants/bar.service": "-> /usr/lib/systemd/system/bar.service",
		ulib + "baz.service":                        wantedMulti,
		etc + "baz.service":                         "-> ../../../lib/systemd/system/baz.service",
	},
	"drop-ins": {
		lib + "a.service":                   "[Unit]\n",
		lib + "a.service.d/10-install.conf": "[Install]\nWantedBy=multi-user.target\n",
		lib + "b.service":                   wantedMulti,
		etc + "b.service.d/reset.conf":      "[Install]\nWantedBy=\n",
		lib + "c.service":                   "[Unit]\n",
		lib + "service.d/x.conf":            "[Install]\nWantedBy=multi-user.target\n",
		lib + "foo-bar.service":             "[Unit]\n",
		lib + "foo-.service.d/x.conf":       "[Install]\nWantedBy=multi-user.target\n",
		lib + "d.service":                   "[Unit]\n",
		lib + "d.service.d/dangling.conf":   "-> /nowhere.conf",
		lib + "e.service":                   "[Unit]\n",
		lib + "e.service.d/bad.conf":        "[Install\n",
		lib + "f.service":                   "[Unit]\n",
		lib + "f.service.d/empty.conf":      "",
		lib + "g@.service":                  "[Unit]\n",
		lib + "g@.service.d/i.conf":         "[Install]\nWantedBy=multi-user.target\n",
		etc + "g@one.service":               "-> /lib/systemd/system/g@.service",
		lib + "h.service":                   "[Unit]\n",
		lib + "h.service.d/.hidden.conf":    "[Install]\nWantedBy=multi-user.target\n",
		lib + "h.service.d/x.conf.bak":      "[Install]\nWantedBy=multi-user.target\n",
		lib + "i.service":                   "[Unit]\n",
		lib + "i.service.d/dir.conf/":       "",
	},
	"aliases": {
		lib + "real.service":        "[Install]\nAlias=nick.service\nWantedBy=multi-user.target\n",
		etc + "nick.service":        "-> /lib/systemd/system/real.service",
		lib + "other.service":       "[Install]\nWantedBy=multi-user.target\n",
		lib + "other-alias.service": "-> other.service",
		etc + "other2.service":      "-> /lib/systemd/system/other.service",
		lib + "dangling.service":    "-> nothere.service",
		lib + "wrongtype.service":   "-> real.socket",
		lib + "real.socket":         "[Unit]\n",
		lib + "loop1.service":       "-> loop2.service",
		lib + "loop2.service":       "-> loop1.service",
		etc + "self.service":        "-> /lib/systemd/system/self.service",
		lib + "self.service":        "[Unit]\n",
		lib + "chain1.service":      "-> chain2.service",
		lib + "chain2.service":      "-> real.service",
		lib + "dev.mount":           "[Unit]\n",
		lib + "devalias.mount":      "-> dev.mount",
		lib + "nonalias.service":    "[Install]\nAlias=x.socket\n",
		lib + "mnt.mount":           "[Install]\nAlias=m2.mount\n",
	},
	"templates and instances": {
		lib + "getty@.service":                               "[Install]\nWantedBy=getty.target\nDefaultInstance=tty1\n",
		lib + "getty.target":                                 "[Unit]\n",
		etc + "getty.target.wants/getty@tty1.service":        "-> /lib/systemd/system/getty@.service",
		lib + "serial@.service":                              "[Install]\nWantedBy=multi-user.target\n",
		etc + "multi-user.target.wants/serial@ttyS0.service": "-> /lib/systemd/system/serial@.service",
		lib + "tmpl@.service":                                "[Install]\nWantedBy=multi-user.target\n",
		etc + "tmpl@x.service":                               "-> /lib/systemd/system/tmpl@.service",
		lib + "vendor@.service":                              "[Install]\nWantedBy=multi-user.target\n",
		lib + "multi-user.target.wants/vendor@v.service":     "-> ../vendor@.service",
		lib + "vendor@v.service":                             "-> vendor@.service",
		lib + "plain@one.service":                            "[Install]\nWantedBy=multi-user.target\n",
		lib + "di@.service":                                  "[Install]\nWantedBy=multi-user.target\nDefaultInstance=a\n",
		etc + "multi-user.target.wants/di@a.service":         "-> /lib/systemd/system/di@.service",
		lib + "bad@.mount":                                   "[Unit]\n",
		lib + "badinst@.service":                             "[Install]\nDefaultInstance=a/b\n",
		lib + "multi-user.target":                            "[Unit]\n",
	},
	"wants requires upholds": {
		lib + "w.service":                            wantedMulti,
		etc + "multi-user.target.wants/w.service":    "-> /lib/systemd/system/w.service",
		lib + "r.service":                            "[Install]\nRequiredBy=multi-user.target\n",
		etc + "multi-user.target.requires/r.service": "-> /lib/systemd/system/r.service",
		lib + "u.service":                            "[Install]\nWantedBy=multi-user.target\n",
		etc + "multi-user.target.upholds/u.service":  "-> /lib/systemd/system/u.service",
		lib + "s.service":                            "[Unit]\n",
		lib + "multi-user.target.wants/s.service":    "-> ../s.service",
		lib + "rt.service":                           wantedMulti,
		run + "multi-user.target.wants/rt.service":   "-> /lib/systemd/system/rt.service",
		lib + "other.service":                        wantedMulti,
		etc + "foo.target.wants/other.service":       "-> /lib/systemd/system/other.service",
		lib + "multi-user.target":                    "[Unit]\n",
	},
	"linked wants dir": {
		lib + "wdir.service":            wantedMulti,
		"opt/wants/wdir.service":        "-> /lib/systemd/system/wdir.service",
		etc + "multi-user.target.wants": "-> ../../../opt/wants",
		lib + "multi-user.target":       "[Unit]\n",
	},
	"install section": {
		lib + "also.service":       "[Install]\nAlso=x.service\n",
		lib + "alsobad.service":    "[Install]\nAlso=x\n",
		lib + "alsospec.service":   "[Install]\nAlso=%n.socket\n",
		lib + "alsospec.socket":    "[Unit]\n",
		lib + "alsoz.service":      "[Install]\nAlso=%z.service\n",
		lib + "reset.service":      "[Install]\nWantedBy=a.target\nWantedBy=\n",
		lib + "quoted.service":     "[Install]\nWantedBy=\"\"\n",
		lib + "unbal.service":      "[Install]\nWantedBy=\"a.target\n",
		lib + "unknown.service":    "[Install]\nFoo=bar\n",
		lib + "xsec.service":       "[X-Foo]\nWantedBy=a.target\n[Install]\n",
		lib + "lower.service":      "[install]\nWantedBy=a.target\n",
		lib + "cont.service":       "[Install]\nWantedBy=\\\n a.target\n",
		lib + "contc.service":      "[Install]\nFoo=\\\n#x\nWantedBy=a.target\n",
		lib + "crlf.service":       "[Install]\r\nWantedBy=a.target\r\n",
		lib + "cr.service":         "[Install]\rWantedBy=a.target\r",
		lib + "nul.service":        "[Install]\x00WantedBy=a.target\n",
		lib + "bom.service":        "\xef\xbb\xbf[Install]\nWantedBy=a.target\n",
		lib + "utf.service":        "[Service]\nExecStart=/bin/\xff\n",
		lib + "utfc.service":       "[Service]\n#\xff\n[Install]\nWantedBy=a.target\n",
		lib + "nonchar.service":    "[Service]\nX=\xef\xbf\xbe\n",
		lib + "hdr.service":        "[Install\n",
		lib + "hdrq.service":       "[Ins\"tall]\n",
		lib + "noeq.service":       "[Install]\nWantedBy\n",
		lib + "outside.service":    "WantedBy=a.target\n",
		lib + "space.service":      "  [Install]  \n  WantedBy = a.target  \n",
		lib + "empty.service":      "",
		lib + "ws.service":         " \n",
		lib + "dir.service/":       "",
		lib + "upheld.service":     "[Install]\nUpheldBy=a.target\n",
		lib + "dinst.service":      "[Install]\nDefaultInstance=x\n",
		lib + "manyat@a@b.service": "[Unit]\n",
	},
	"masks and links": {
		etc + "m.service":                          "-> /dev/null",
		lib + "m.service":                          wantedMulti,
		run + "rm.service":                         "-> /dev/null",
		etc + "empty.service":                      "",
		"opt/linked.service":                       wantedMulti,
		etc + "linked.service":                     "-> /opt/linked.service",
		"opt/rlinked.service":                      wantedMulti,
		run + "rlinked.service":                    "-> /opt/rlinked.service",
		"opt/le.service":                           wantedMulti,
		etc + "le.service":                         "-> /opt/le.service",
		etc + "multi-user.target.wants/le.service": "-> /opt/le.service",
		"opt/other.service":                        wantedMulti,
		etc + "renamed.service":                    "-> /opt/other.service",
		etc + "dangle.service":                     "-> /opt/missing.service",
		"opt/empty.service":                        "",
		run + "toempty.service":                    "-> /opt/empty.service",
		etc + "escape.service":                     "-> ../../../../../../opt/linked.service",
		lib + "multi-user.target":                  "[Unit]\n",
		etc + ".hidden.service":                    "[Unit]\n",
		etc + "x.service.bak":                      "[Unit]\n",
		"run/systemd/transient/t.service":          "[Unit]\n",
		"run/systemd/generator/g.service":          "[Unit]\n",
		"run/systemd/generator.late/gl.service":    wantedMulti,
		"etc/systemd/system.control/c.service":     wantedMulti,
		"etc/systemd/system.attached/at.service":   wantedMulti,
	},
	"presets": {
		lib + "a.service":                           wantedMulti,
		lib + "b.service":                           wantedMulti,
		lib + "c.service":                           wantedMulti,
		lib + "d@.service":                          wantedMulti,
		"lib/systemd/system-preset/90-x.preset":     "disable a.service\nenable b*\ndisable *\n",
		"usr/lib/systemd/system-preset/90-x.preset": "enable a.service\n",
		"etc/systemd/system-preset/10-y.preset":     "# c\nenable c.service\nenable d@.service x y\n",
		"usr/lib/systemd/system-preset/50-z.preset": "disable b.service\n",
	},
}

func TestFeatureTreesMatchSystemctl(t *testing.T) {
	for _, sd := range systemdtest.Versions() {
		for name, spec := range featureTrees {
			t.Run(sd.Name()+"/"+name, func(t *testing.T) {
				dir := t.TempDir()
				writeTree(t, dir, spec)
				compareTree(t, sd, dir, true)
			})
		}
	}
}
