package facts

import (
	"encoding/json"
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/image/rootfs"
	"github.com/amilint/amilint/internal/systemd/unit"
)

// TestBuildEveryFixture builds facts for every unit file of every embedded
// fixture, the adversarial ones included (escaping links, loops, masks,
// corrupt and huge unit files): never a panic, never a read outside the
// root, and a document that marshals.
func TestBuildEveryFixture(t *testing.T) {
	for _, name := range fixtures.Names() {
		t.Run(name, func(t *testing.T) {
			src, err := fixtures.Source(name)
			require.NoError(t, err)
			fsys := rootfs.New(src)
			var ins []UnitInput
			seen := map[string]bool{}
			for _, dir := range unit.SearchPath {
				ents, err := fsys.ReadDir(dir)
				if err != nil {
					continue
				}
				for _, e := range ents {
					n := e.Name()
					if unit.Type(n) == "" || seen[n] {
						continue
					}
					seen[n] = true
					in := UnitInput{Name: n, State: "enabled", StartsAtBoot: true, Path: "/" + dir + "/" + n}
					if b, err := fsys.ReadFile(dir + "/" + n); err == nil {
						if opts, err := unit.ParseConfig(b); err == nil {
							in.Options = opts
						}
					}
					ins = append(ins, in)
				}
			}
			d, err := Build(fsys, ins, Options{ConfigFiles: []ConfigRequest{
				{Path: "/etc/shadow"}, {Path: "/etc/ecs/ecs.config"}, {Path: "/proc/self/root/etc/passwd"},
			}})
			require.NoError(t, err)
			assert.Len(t, d.Units, len(ins))
			_, err = json.Marshal(d)
			require.NoError(t, err)
			for p := range d.ConfigFiles {
				assert.True(t, strings.HasPrefix(p, "/"), p)
				assert.True(t, fs.ValidPath(strings.TrimPrefix(p, "/")), p)
			}
		})
	}
}
