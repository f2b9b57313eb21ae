package install

import (
	"testing"
	"testing/fstest"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// FuzzPresets reads arbitrary preset files (one in /usr/lib, one in /etc
// overriding nothing): loading never fails or panics, and every query
// answers enable, disable or (systemd 254 and later) ignore.
func FuzzPresets(f *testing.F) {
	f.Add([]byte("enable ssh.service\ndisable *\n"), []byte("# c\n; c\nenable getty@.service tty1 tty2\n"), uint8(252%256))
	f.Add([]byte("ignore *\nenable  a*.service\n"), []byte("disable [a-c]?.service\nenable \"quoted.service\"\n"), uint8(1))
	f.Add([]byte("enable\n\tdisable\x00x\nenable t@.service  x  \\\n"), []byte(""), uint8(0))
	f.Fuzz(func(t *testing.T, lib, etc []byte, v uint8) {
		m := fstest.MapFS{
			"usr/lib/systemd/system-preset/90-default.preset": {Data: lib},
			"etc/systemd/system-preset/50-local.preset":       {Data: etc},
		}
		sd := 250 + int(v%10)
		ps, err := LoadPresets(rootfs.New(m), sd)
		if err != nil {
			t.Fatalf("LoadPresets: %v", err)
		}
		for _, name := range []string{"ssh.service", "a.service", "getty@tty1.service", "getty@.service", "x.socket", "[.service"} {
			switch a := ps.Query(name); a {
			case PresetEnable, PresetDisable:
			case PresetIgnore:
				if sd < PresetIgnoreSince {
					t.Fatalf("ignore under systemd %d", sd)
				}
			default:
				t.Fatalf("Query(%q) = %q", name, a)
			}
		}
	})
}
