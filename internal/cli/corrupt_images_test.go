package cli

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/image/disktest"
)

// TestTruncatedImagesExitTwo is the contract "a corrupt input never yields
// 0" for cut disk images: the hardened fixture (no findings, so a scan that
// misses the damage exits 0) with 4 MiB of incompressible data, in a GPT
// disk converted by qemu-img to each container format, then cut with
// truncate(1) at 2/3 and 3/4 of its size and where the format's last
// structure ends (the VHD footer, the last non-zero byte). Every cut image
// makes `amilint scan` exit 2 with one line on stderr naming the problem;
// the whole image scans and lists units exactly as the directory does.
func TestTruncatedImagesExitTwo(t *testing.T) {
	dir := materialize(t, "hardened")
	blob := make([]byte, 4<<20)
	x := uint32(2463534242)
	for i := range blob {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		blob[i] = byte(x)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "usr/share/amilint-blob"), blob, 0o644))
	wantCode, want, stderr := scanJSON(t, dir)
	require.Equal(t, ExitOK, wantCode, stderr)
	code, wantUnits, stderr := runCLI(t, "units", dir, "-o", "tsv")
	require.Equal(t, ExitOK, code, stderr)
	require.Contains(t, wantUnits, "ssh.service\t")
	gpt := disktest.GPTRoot(t, disktest.Ext4(t, dir, "32M"))

	lastNonZero := func(b []byte) int64 { return int64(len(bytes.TrimRight(b, "\x00")) - 1) }
	for _, tt := range []struct {
		name   string
		format string
		args   []string
		// ends are cut points past the fractions, from the file's bytes.
		ends map[string]func(b []byte) int64
	}{
		{"vhd dynamic", "vpc", []string{"-o", "subformat=dynamic"}, map[string]func([]byte) int64{
			"mid-footer":         func(b []byte) int64 { return int64(len(b)) - 256 },
			"without its footer": func(b []byte) int64 { return int64(len(b)) - 512 },
		}},
		{"vhdx", "vhdx", nil, map[string]func([]byte) int64{"at the last non-zero byte": lastNonZero}},
		{"vmdk monolithicSparse", "vmdk", []string{"-o", "subformat=monolithicSparse"}, map[string]func([]byte) int64{
			"at the last non-zero byte": lastNonZero,
		}},
		{"vmdk streamOptimized", "vmdk", []string{"-o", "subformat=streamOptimized"}, map[string]func([]byte) int64{
			"at the last non-zero byte": lastNonZero,
		}},
		{"qcow2", "qcow2", nil, map[string]func([]byte) int64{"at the last non-zero byte": lastNonZero}},
		{"qcow2 compressed", "qcow2", []string{"-c"}, map[string]func([]byte) int64{"at the last non-zero byte": lastNonZero}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			img := disktest.Convert(t, gpt, tt.format, tt.args...)
			code, got, stderr := scanJSON(t, img)
			require.Equal(t, ExitOK, code, stderr)
			assert.Equal(t, withoutTarget(want), withoutTarget(got))
			code, units, stderr := runCLI(t, "units", img, "-o", "tsv")
			require.Equal(t, ExitOK, code, stderr)
			assert.Equal(t, wantUnits, units)

			b, err := os.ReadFile(img)
			require.NoError(t, err)
			n := int64(len(b))
			cuts := map[string]int64{"2/3": n * 2 / 3, "3/4": n * 3 / 4}
			for name, at := range tt.ends {
				cuts[name] = at(b)
			}
			for name, at := range cuts {
				t.Run(name, func(t *testing.T) {
					require.Less(t, at, n)
					cut := filepath.Join(t.TempDir(), "cut-"+filepath.Base(img))
					require.NoError(t, os.WriteFile(cut, b, 0o644))
					disktest.Run(t, "truncate", "-s", fmt.Sprint(at), cut)
					code, out, stderr := runCLI(t, "scan", cut)
					assert.Equal(t, ExitError, code, "scan of %s cut at %d of %d bytes: %s", tt.name, at, n, out)
					assert.Empty(t, out)
					assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
					assert.Regexp(t, `^amilint scan: open target .*: open \S+ image: .*corrupt disk image: .*(truncated image|past the end)`, stderr)
				})
			}
		})
	}
}

// withoutTarget is a report without its target, which names the image
// or the directory by design.
func withoutTarget(r *finding.Report) *finding.Report {
	if r == nil {
		return nil
	}
	c := *r
	c.Target = finding.Target{}
	return &c
}
