package cli

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
)

// TestNoEtc: a directory that is no image root at all (no /etc, no unit
// directory) is exit 2 with one line for units, facts and scan; one with
// units but no /etc (a /usr-only image) is read, with a warning that its
// enablement and configuration are missing.
func TestNoEtc(t *testing.T) {
	empty := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(empty, "notes.txt"), []byte("x"), 0o644))
	usrOnly := t.TempDir()
	lib := filepath.Join(usrOnly, "usr/lib/systemd/system")
	require.NoError(t, os.MkdirAll(lib, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(lib, "default.target"), []byte("[Unit]\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(lib, "a.service"), []byte("[Service]\nExecStart=/bin/true\n"), 0o644))
	for _, cmd := range []string{"units", "facts", "scan"} {
		code, out, stderr := runCLI(t, cmd, empty)
		assert.Equal(t, ExitError, code, cmd)
		assert.Empty(t, out, cmd)
		assert.Equal(t, "amilint "+cmd+": "+empty+": "+errNotImageRoot.Error()+"\n", stderr, cmd)

		code, out, stderr = runCLI(t, cmd, usrOnly)
		assert.Equal(t, ExitOK, code, "%s: %s", cmd, stderr)
		assert.NotEmpty(t, out, cmd)
		assert.Contains(t, stderr, "amilint: warning: "+usrOnly+": no /etc: the image's enablement links, masks and configuration are missing", cmd)
	}
}

// TestUnitWithNUL: a unit file holding NUL bytes gets one answer from
// every command — the state units prints is the state facts (and so
// scan) use, a unit that is bad never starts at boot — and that answer is
// systemctl's.
func TestUnitWithNUL(t *testing.T) {
	for name, content := range map[string]string{
		"NUL in a key":            "[Service]\nExecStart=/bin/true\n[Install]\nWanted\x00By=multi-user.target\n",
		"NUL in a section header": "[Service]\nExecStart=/bin/true\nRestart=always\n[Ins\x00tall]\nWantedBy=multi-user.target\n",
		"NUL in a value":          "[Service]\nExecStart=/bin/true\n[Install]\nAlias=x\x00y.service\n",
		"NUL ends a line":         "[Service]\nExecStart=/bin/true\x00Restart=always\n[Install]\nWantedBy=multi-user.target\n",
	} {
		t.Run(name, func(t *testing.T) {
			dir := materialize(t, "dlami")
			require.NoError(t, os.WriteFile(filepath.Join(dir, "lib/systemd/system/nul.service"), []byte(content), 0o644))
			code, out, stderr := runCLI(t, "units", dir, "-o", "tsv")
			require.Equal(t, ExitOK, code, stderr)
			var state string
			for _, l := range strings.Split(out, "\n") {
				if n, s, ok := strings.Cut(l, "\t"); ok && n == "nul.service" {
					state = s
				}
			}
			require.NotEmpty(t, state)
			code, out, stderr = runCLI(t, "facts", dir)
			require.Equal(t, ExitOK, code, stderr)
			var doc struct {
				Units map[string]struct {
					State        string `json:"state"`
					StartsAtBoot bool   `json:"starts_at_boot"`
				} `json:"units"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &doc))
			u := doc.Units["nul.service"]
			assert.Equal(t, state, u.State, "units and facts agree")
			if state == "bad" {
				assert.False(t, u.StartsAtBoot, "a bad unit does not start")
			}
			sc := testenv.Tool(t, "systemctl", "systemd")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			got, _ := exec.CommandContext(ctx, sc, "--root="+dir, "is-enabled", "nul.service").Output()
			want := strings.TrimSpace(string(got))
			if want == "" {
				want = "bad" // is-enabled prints nothing for a unit it cannot parse
			}
			assert.Equal(t, want, state, "systemctl --root agrees")
		})
	}
}
