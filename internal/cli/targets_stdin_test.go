package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/cli"
)

// runPiped runs the amilint command args with standard input fed by a real
// pipe from the producer command (tar, zstd, cat), as a shell pipeline
// "producer | amilint args" would: the CLI reads os.Stdin.
func runPiped(t *testing.T, producer []string, args ...string) (string, string, int) {
	t.Helper()
	r, w, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command(producer[0], producer[1:]...)
	cmd.Stdout = w
	var perr bytes.Buffer
	cmd.Stderr = &perr
	require.NoError(t, cmd.Start())
	w.Close()
	old := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = old; r.Close() }()
	var out, errb bytes.Buffer
	code := cli.Run(context.Background(), args, &out, &errb)
	r.Close() // the producer may still be writing past the archive's end
	_ = cmd.Wait()
	return out.String(), errb.String(), code
}

func run(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	code := cli.Run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), code
}

// withoutTarget drops the report's target (its name and kind differ by
// design) from `scan -o json` output.
func withoutTarget(t *testing.T, out string) map[string]any {
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	delete(doc, "target")
	return doc
}

// TestStdinTarballMatchesTree is the acceptance check for "-": for every
// fixture, `tar -c | amilint units - -o tsv` (plain, gzip and zstd) equals
// `amilint units DIR -o tsv`, and `scan -` gives the same findings and
// exit code as `scan DIR`.
func TestStdinTarballMatchesTree(t *testing.T) {
	for _, name := range fixtures.Names() {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "root")
			require.NoError(t, fixtures.Materialize(name, dir))
			want, wantErr, wantCode := run("units", dir, "-o", "tsv")
			wantScan, wantScanErr, wantScanCode := run("scan", dir, "-o", "json", "--fail-on", "critical")
			// The policy input itself, whole.
			wantFacts, _, wantFactsCode := run("facts", dir)
			gotFacts, stderr, code := runPiped(t, []string{"tar", "-C", dir, "--zstd", "-c", "."}, "facts", "-")
			require.Equal(t, wantFactsCode, code, stderr)
			assert.Equal(t, wantFacts, gotFacts)
			for _, producer := range [][]string{
				{"tar", "-C", dir, "-c", "."},
				{"tar", "-C", dir, "-cz", "."},
				{"tar", "-C", dir, "--zstd", "-c", "."},
			} {
				got, stderr, code := runPiped(t, producer, "units", "-", "-o", "tsv")
				require.Equal(t, wantCode, code, "%v: %s (dir: %s)", producer, stderr, wantErr)
				assert.Equal(t, want, got, "%v", producer)
				if wantScanCode == 2 {
					// The tree itself cannot be audited: neither can its tarball.
					_, _, code := runPiped(t, producer, "scan", "-", "-o", "json", "--fail-on", "critical")
					assert.Equal(t, 2, code, "%s", wantScanErr)
					continue
				}
				got, stderr, code = runPiped(t, producer, "scan", "-", "-o", "json", "--fail-on", "critical")
				require.Equal(t, wantScanCode, code, "%v: %s", producer, stderr)
				assert.Equal(t, withoutTarget(t, wantScan), withoutTarget(t, got), "%v", producer)
			}
		})
	}
}

// TestStdinErrors checks the CLI contract for "-": a corrupt or wrong
// stream is a clear error and exit 2, and fix refuses it before reading.
func TestStdinErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	require.NoError(t, fixtures.Materialize(fixtures.Default, dir))
	tarball := filepath.Join(t.TempDir(), "root.tar.gz")
	_, _, _ = run("version")
	require.NoError(t, exec.Command("tar", "-C", dir, "-czf", tarball, ".").Run())
	b, err := os.ReadFile(tarball)
	require.NoError(t, err)
	cut := filepath.Join(t.TempDir(), "cut.tar.gz")
	require.NoError(t, os.WriteFile(cut, b[:len(b)/2], 0o644))
	qcow := filepath.Join(t.TempDir(), "x.qcow2")
	require.NoError(t, exec.Command("qemu-img", "create", "-q", "-f", "qcow2", qcow, "16M").Run())
	for _, tc := range []struct {
		name     string
		producer []string
		args     []string
		msg      string
	}{
		{"truncated gzip", []string{"cat", cut}, []string{"units", "-"}, "corrupt tarball"},
		{"empty", []string{"true"}, []string{"scan", "-"}, "the stream is empty"},
		{"a disk image", []string{"cat", qcow}, []string{"units", "-"}, "qcow2 disk image: give it as a file"},
		{"fix", []string{"cat", tarball}, []string{"fix", "-"}, "standard input is read-only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := runPiped(t, tc.producer, tc.args...)
			assert.Equal(t, 2, code)
			assert.Empty(t, out)
			assert.Contains(t, stderr, tc.msg)
		})
	}
}
