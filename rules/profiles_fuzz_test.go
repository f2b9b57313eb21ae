package rules

import (
	"bytes"
	"io/fs"
	"path"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

// FuzzProfiles loads arbitrary profile YAML as a user's --rules
// DIR/profiles/x.yaml: it is a profile or an error, never a panic, and a
// profile that loads becomes policy data.
func FuzzProfiles(f *testing.F) {
	files, err := fs.Glob(yamlCatalog, "profiles/*.yaml")
	require.NoError(f, err)
	for _, name := range files {
		b, err := fs.ReadFile(yamlCatalog, name)
		require.NoError(f, err)
		stem := strings.TrimSuffix(path.Base(name), ".yaml")
		seed := bytes.ReplaceAll(b, []byte("name: "+stem), []byte("name: x"))
		// The seeds are profiles, so the checks below run.
		_, err = loadProfiles(fstest.MapFS{"profiles/x.yaml": {Data: seed}}, "profiles", "user:profiles/")
		require.NoError(f, err, name)
		f.Add(seed)
	}
	f.Add([]byte("name: x\nallow: [&a a.service, *a]\ntraits: [immutable]\n"))
	f.Add([]byte("name: x\nallow: {a: 1}\nunknown: 2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, err := loadProfiles(fstest.MapFS{"profiles/x.yaml": {Data: b}}, "profiles", "user:profiles/")
		if err != nil {
			return
		}
		if _, err := ProfilesData(ps); err != nil {
			t.Fatalf("a loaded profile is not policy data: %v", err)
		}
		for _, p := range ps {
			if p.Name != "x" {
				t.Fatalf("profile %q loaded from x.yaml", p.Name)
			}
		}
	})
}
