package cli

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/rules"
)

func TestFixHarden(t *testing.T) {
	dir := securityTree(t, map[string]string{
		"usr/lib/systemd/system/multi-user.target":                   "[Unit]\nDescription=m\n",
		"usr/lib/systemd/system/default.target":                      "->multi-user.target",
		"usr/lib/systemd/system/open.service":                        "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n",
		"etc/systemd/system/multi-user.target.wants/open.service":    "->/usr/lib/systemd/system/open.service",
		"usr/lib/systemd/system/off.service":                         "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n",
		"usr/lib/systemd/system/rsyslog.service":                     "[Service]\nExecStart=/usr/sbin/rsyslogd -n\n[Install]\nWantedBy=multi-user.target\n",
		"etc/systemd/system/multi-user.target.wants/rsyslog.service": "->/usr/lib/systemd/system/rsyslog.service",
		// As Debian's HAProxy package ships it.
		"etc/rsyslog.conf":              "$IncludeConfig /etc/rsyslog.d/*.conf\n",
		"etc/rsyslog.d/49-haproxy.conf": "$AddUnixListenSocket /var/lib/haproxy/dev/log\n",
	})
	catalog := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(catalog, "open.yaml"), []byte(
		"id: open\ntitle: open, closed\nunits: [open.service]\nwhy: it does nothing\nbreaks: nothing\ndropin: |\n  [Service]\n  PrivateNetwork=yes\n  DynamicUser=yes\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(catalog, "off.yaml"), []byte(
		"id: off\ntitle: off\nunits: [off.service]\nwhy: w\nbreaks: b\ndropin: |\n  [Service]\n  PrivateNetwork=yes\n"), 0o644))
	openDropIn := filepath.Join(dir, "etc/systemd/system/open.service.d", rules.DropInName)
	rsyslogDropIn := filepath.Join(dir, "etc/systemd/system/rsyslog.service.d", rules.DropInName)

	// A dry run prints the drop-ins and the exposures, and writes nothing.
	code, out, stderr := runCLI(t, "fix", dir, "--harden-catalog", catalog, "--dry-run", "--fail-on", "critical")
	require.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, out, "hardening 2 services (exposure as systemd-analyze security of systemd 252 scores it):")
	assert.Regexp(t, `open\.service +9\.6 UNSAFE → [0-8]\.\d \w+ +/etc/systemd/system/open\.service\.d/`+rules.DropInName, out)
	assert.Regexp(t, `rsyslog\.service +9\.6 UNSAFE → 3\.2 OK`, out, "the shipped rsyslog entry applies too")
	assert.Contains(t, out, "      PrivateNetwork=yes", "the dry run prints the drop-ins")
	assert.Contains(t, out, "      # /etc/rsyslog.d/49-haproxy.conf:1 asks rsyslogd for the socket /var/lib/haproxy/dev/log\n      ReadWritePaths=-/var/lib/haproxy/dev\n",
		"rsyslog's drop-in lets it make the sockets the image's configuration asks for")
	assert.NotContains(t, out, "off.service", "a disabled service is not hardened")
	assert.NoFileExists(t, openDropIn)

	code, out, stderr = runCLI(t, "fix", dir, "--harden-catalog", catalog, "--fail-on", "critical")
	require.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, out, "write /etc/systemd/system/open.service.d/"+rules.DropInName)
	assert.FileExists(t, openDropIn)
	assert.FileExists(t, rsyslogDropIn)

	// The scan of the fixed image sees the lower exposure.
	code, out, stderr = runCLI(t, "security", dir, "open.service")
	require.Equal(t, ExitOK, code, stderr)
	assert.NotContains(t, out, "Overall exposure level for open.service: 9.6")

	// Again: nothing to change, the drop-ins are already there.
	code, out, stderr = runCLI(t, "fix", dir, "--harden-catalog", catalog, "--fail-on", "critical")
	require.Equal(t, ExitOK, code, stderr)
	assert.Contains(t, out, "nothing to change")
	assert.Contains(t, out, "(already there)")
}

func TestFixHardenRefuses(t *testing.T) {
	dir := securityTree(t, nil)
	bad := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(bad, "x.yaml"), []byte("id: x\ntitle: t\nunits: [x.service]\nwhy: w\nbreaks: b\ndropin: |\n  [Service]\n  ExecStartPre=/bin/false\n"), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"malformed catalog", []string{"fix", dir, "--harden-catalog", bad}, "runs no commands"},
		{"missing catalog", []string{"fix", dir, "--harden-catalog", filepath.Join(bad, "nope")}, "load hardening catalog"},
		{"live", []string{"fix", "--live", "--harden"}, "does not apply to --live"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(t, tc.args...)
			assert.Equal(t, ExitError, code)
			assert.Contains(t, stderr, tc.want)
		})
	}
}
