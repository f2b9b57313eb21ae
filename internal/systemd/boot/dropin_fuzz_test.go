package boot

import (
	"slices"
	"testing"
	"testing/fstest"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// FuzzDropIns loads a unit whose drop-ins (its own, its type's
// service.d/, its prefix's a-.service.d/) hold arbitrary bytes: loading
// never panics, the unit is loaded whatever its drop-ins say, and its own
// drop-in is among those it lists.
func FuzzDropIns(f *testing.F) {
	f.Add([]byte("[Service]\nExecStart=\nExecStart=/bin/b\nRestart=always\n"), []byte("[Unit]\nWants=b.service\n"), []byte("[Install]\nWantedBy=multi-user.target\n"))
	f.Add([]byte("[Unit]\nDescription=a \\\ncontinued\n[Service]\nEnvironment=\"A=1\" B=2\n"), []byte("\x00[Unit]\n"), []byte("[Unit\nX"))
	f.Add([]byte("[Service]\nExecStart=/bin/x %n %i %%\nUser=${USER}\n"), []byte(""), []byte("#\n;\n[Unit]\nRequires=a.service\n"))
	f.Fuzz(func(t *testing.T, own, typ, prefix []byte) {
		m := fstest.MapFS{
			"usr/lib/systemd/system/default.target":              mfile("[Unit]\nWants=a-b.service\n"),
			"usr/lib/systemd/system/a-b.service":                 mfile("[Service]\nExecStart=/bin/a\n"),
			"usr/lib/systemd/system/b.service":                   mfile("[Service]\nExecStart=/bin/b\n"),
			"etc/systemd/system/a-b.service.d/override.conf":     {Data: own},
			"usr/lib/systemd/system/service.d/10-all.conf":       {Data: typ},
			"usr/lib/systemd/system/a-.service.d/20-prefix.conf": {Data: prefix},
			"etc/systemd/system/a-b.service.d/not-a-drop-in.txt": mfile("[Service]\nExecStart=/bin/never\n"),
		}
		g, err := Load(rootfs.New(m), 252)
		if err != nil {
			return
		}
		_ = g.Boot()
		u := g.Unit("a-b.service")
		if u == nil {
			t.Fatal("a-b.service is not loaded")
		}
		if !slices.ContainsFunc(u.DropIns, func(d string) bool { return d == "/etc/systemd/system/a-b.service.d/override.conf" }) {
			t.Fatalf("drop-ins %v lack its own", u.DropIns)
		}
		if slices.ContainsFunc(u.DropIns, func(d string) bool { return d == "/etc/systemd/system/a-b.service.d/not-a-drop-in.txt" }) {
			t.Fatalf("drop-ins %v include a file not named .conf", u.DropIns)
		}
	})
}
