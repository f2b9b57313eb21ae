package boot

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/rootfs"
)

// BenchmarkManyAliases loads, name by name as the audit does, a root whose
// one unit has 1,000 and 10,000 aliases (links to it): the time per alias
// must stay flat, though every name loads the one unit of all the names.
func BenchmarkManyAliases(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("aliases=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			etc := filepath.Join(dir, "etc/systemd/system")
			lib := filepath.Join(dir, "usr/lib/systemd/system")
			require.NoError(b, os.MkdirAll(etc, 0o755))
			require.NoError(b, os.MkdirAll(lib, 0o755))
			require.NoError(b, os.Symlink("usr/lib", filepath.Join(dir, "lib")))
			var text strings.Builder
			text.WriteString("[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n")
			for i := range n {
				fmt.Fprintf(&text, "Alias=a%d.service\n", i)
			}
			require.NoError(b, os.WriteFile(filepath.Join(lib, "real.service"), []byte(text.String()), 0o644))
			for i := range n {
				require.NoError(b, os.Symlink("/usr/lib/systemd/system/real.service", filepath.Join(etc, fmt.Sprintf("a%d.service", i))))
			}
			src, err := rootfs.OpenDir(dir)
			require.NoError(b, err)
			defer src.Close()
			for b.Loop() {
				g, err := Load(rootfs.New(src), 252)
				require.NoError(b, err)
				u := g.Unit("real.service")
				for _, name := range g.Names() {
					if g.Unit(name) != u && strings.HasPrefix(name, "a") {
						b.Fatalf("%s is not an alias of real.service", name)
					}
				}
				if len(u.Names) != n+1 {
					b.Fatalf("real.service has %d names, want %d", len(u.Names), n+1)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/alias")
		})
	}
}
