package cli

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// golden compares got with testdata/NAME, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./internal/cli -run %s -update", t.Name())
	assert.Equal(t, string(want), got, "testdata/%s is stale or the output changed: go test ./internal/cli -run %s -update, then review the diff", name, t.Name())
}

// TestDiffGoldenFixtureAgainstFixedCopy pins `amilint diff` of the
// DLAMI-like fixture against its own `amilint fix`ed copy, both ways, in
// every format: the pre-rollout review of the incident's fix.
func TestDiffGoldenFixtureAgainstFixedCopy(t *testing.T) {
	old := materialize(t, "dlami")
	fixed := materialize(t, "dlami")
	code, out, stderr := runCLI(t, "fix", fixed)
	require.Equal(t, ExitOK, code, "%s\n%s", out, stderr)
	// The copies live in temporary directories: name them stably.
	stable := strings.NewReplacer(old, "/images/dlami", fixed, "/images/dlami-fixed")
	for _, dir := range []struct {
		name     string
		from, to string
		code     int
	}{
		{"dlami-to-fixed", old, fixed, ExitOK},
		{"fixed-to-dlami", fixed, old, ExitFindings},
	} {
		for format, ext := range map[string]string{"text": "txt", "json": "json", "markdown": "md", "html": "html"} {
			t.Run(dir.name+"/"+format, func(t *testing.T) {
				code, out, stderr := runCLI(t, "diff", "-o", format, dir.from, dir.to)
				require.Equal(t, dir.code, code, stderr)
				golden(t, "diff/"+dir.name+"."+ext, stable.Replace(out))
			})
		}
	}
}
