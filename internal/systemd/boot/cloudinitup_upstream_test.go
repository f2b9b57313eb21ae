//go:build cloudinit_upstream

package boot

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/systemd/systemdtest"
)

// TestOracleCloudInitUpstream runs each release's generator and
// ds-identify, placed over the trixie root, on the cases of
// TestOracleCloudInit and compares the early link with the model's.
func TestOracleCloudInitUpstream(t *testing.T) {
	dir := os.Getenv(cloudInitScriptsEnv)
	if dir == "" {
		t.Fatalf("%s names no directory of cloud-init's scripts", cloudInitScriptsEnv)
	}
	rels, err := os.ReadDir(dir)
	require.NoError(t, err)
	sd := systemdtest.Trixie
	const g = "/usr/lib/systemd/system-generators/cloud-init-generator"
	const d = "/usr/lib/cloud-init/ds-identify"
	cases := ciCases()
	names := make([]string, 0, len(cases))
	for n := range cases {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, rel := range rels {
		gen, err := os.ReadFile(filepath.Join(dir, rel.Name(), "cloud-init-generator"))
		require.NoError(t, err)
		di, err := os.ReadFile(filepath.Join(dir, rel.Name(), "ds-identify"))
		require.NoError(t, err)
		wrong := 0
		for _, name := range names {
			c := cases[name]
			ok := t.Run(rel.Name()+"/"+name, func(t *testing.T) {
				ops := append([]op{exe(g, string(gen)), exe(d, string(di))}, c.ops...)
				if name == "noexec-dsidentify" {
					ops = append(ops, file(d, string(di)))
				}
				upper := sd.Upper(t, ops)
				want, log := ciOracle(t, sd, upper, c)
				m := Machine{Datasource: c.machine, Architecture: c.arch}
				out := runGenerators(sd.View(t, upper), sd.Version, c.cmdline, m)
				got := ""
				if n, ok := out.nodes[genDirEarly+"/multi-user.target.wants/cloud-init.target"]; ok {
					got = n.target
				}
				t.Logf("%s on %s: generator links %q, the model %q\n%s", name, c.machine, want, got, log)
				assert.Equal(t, want, got)
			})
			if !ok {
				wrong++
			}
		}
		t.Logf("cloud-init %s: %d cases, the model differs in %d", rel.Name(), len(names), wrong)
	}
}
