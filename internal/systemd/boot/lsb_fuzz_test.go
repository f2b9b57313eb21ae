package boot

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// FuzzParseLSB reads arbitrary SysV init scripts: the LSB header parser
// never panics, keeps only service aliases, target wants and orderings on
// valid unit names, and a boot
// transaction over the script (as systemd-sysv-generator would make it)
// loads.
func FuzzParseLSB(f *testing.F) {
	f.Add([]byte("#!/bin/sh\n### BEGIN INIT INFO\n# Provides: apport foo\n# Required-Start: $network $remote_fs\n# Default-Start: 2 3 4 5\n### END INIT INFO\n"), "apport")
	f.Add([]byte("### BEGIN INIT INFO\n# Provides: $network x.target\n# Should-Start: $named\n#X-Start-After: $time\n"), "x.sh")
	f.Add([]byte("#\n### BEGIN INIT INFO\r\n#Provides:\n### END INIT INFO\n# Provides: late\n"), "s")
	f.Fuzz(func(t *testing.T, data []byte, name string) {
		h := parseLSB(data, name)
		for _, a := range h.aliases {
			if unit.Type(a) != "service" {
				t.Fatalf("alias %q is not a service", a)
			}
		}
		for _, w := range h.wants {
			if unit.Type(w) != "target" {
				t.Fatalf("want %q is not a target", w)
			}
			if strings.ContainsAny(w, " \t\n") {
				t.Fatalf("want %q has a space", w)
			}
		}
		for _, o := range slices.Concat(h.before, h.after) {
			if !unit.Valid(o) {
				t.Fatalf("ordering on %q, not a unit name", o)
			}
		}
		if !unit.Valid(name+".service") || strings.Contains(name, "/") {
			return
		}
		m := fstest.MapFS{
			"etc/init.d/" + name:                           {Data: data, Mode: 0o755},
			"etc/rc3.d/S01" + name:                         {Data: []byte("../init.d/" + name), Mode: 0o777 | 1<<27},
			"usr/lib/systemd/system/default.target":        {Data: []byte("[Unit]\nRequires=multi-user.target\n")},
			"usr/lib/systemd/system/multi-user.target":     {Data: []byte("[Unit]\n")},
			"usr/lib/systemd/system/network-online.target": {Data: []byte("[Unit]\n")},
			"usr/lib/systemd/system/sysinit.target":        {Data: []byte("[Unit]\n")},
		}
		g, err := Load(rootfs.New(m), 252)
		if err != nil {
			return
		}
		_ = g.Boot()
	})
}
