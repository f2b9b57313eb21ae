//go:build e2e

// Package e2e runs real `packer build`s with the amilint plugin installed by
// `packer plugins install --path`, the null builder and the SSH communicator
// against a real sshd on 127.0.0.1, auditing and fixing a copy of the
// DLAMI-like fixture. Run it with `make e2e-packer`.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/audit/finding"
)

// env is what every build shares.
type env struct {
	work, packer, plugins, key string
	port                       int
	amilint                    string
}

func run(t *testing.T, dir string, envv []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), envv...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func setup(t *testing.T) *env {
	testenv.Root(t, "e2e-packer (sshd runs as root on loopback)")
	e := &env{work: t.TempDir(), packer: os.Getenv("PACKER_BIN")}
	require.NotEmpty(t, e.packer, "PACKER_BIN (make e2e-packer builds it)")
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		sshd = "/usr/sbin/sshd"
	}
	require.FileExists(t, sshd, "openssh-server is installed by .ci/run")

	// The plugin binary, named as a release binary and installed by path.
	bin := filepath.Join(e.work, "packer-plugin-amilint_v0.1.0_x5.0_linux_amd64")
	out, err := run(t, "..", nil, "go", "build", "-o", bin, ".")
	require.NoError(t, err, out)
	e.amilint = bin
	e.plugins = filepath.Join(e.work, "plugins")
	out, err = run(t, e.work, e.packerEnv(), e.packer, "plugins", "install", "--path", bin, "github.com/amilint/amilint")
	require.NoError(t, err, out)

	// A throwaway sshd on loopback, with throwaway keys.
	e.key = filepath.Join(e.work, "client")
	for _, k := range []string{e.key, filepath.Join(e.work, "host")} {
		out, err := run(t, e.work, nil, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", k)
		require.NoError(t, err, out)
	}
	pub, err := os.ReadFile(e.key + ".pub")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(e.work, "authorized_keys"), pub, 0o600))
	require.NoError(t, os.MkdirAll("/run/sshd", 0o755))
	e.port = freePort(t)
	cfg := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s/host
AuthorizedKeysFile %s/authorized_keys
PidFile %s/sshd.pid
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
Subsystem sftp internal-sftp
`, e.port, e.work, e.work, e.work)
	require.NoError(t, os.WriteFile(filepath.Join(e.work, "sshd_config"), []byte(cfg), 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	sshdCmd := exec.CommandContext(ctx, sshd, "-D", "-e", "-f", filepath.Join(e.work, "sshd_config"))
	var sshdLog bytes.Buffer
	sshdCmd.Stdout, sshdCmd.Stderr = &sshdLog, &sshdLog
	require.NoError(t, sshdCmd.Start())
	t.Cleanup(func() {
		cancel()
		sshdCmd.Wait()
		if t.Failed() {
			t.Logf("sshd log:\n%s", sshdLog.String())
		}
	})
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", e.port)); err == nil {
			c.Close()
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return e
}

func (e *env) packerEnv() []string {
	return []string{"PACKER_PLUGIN_PATH=" + e.plugins, "CHECKPOINT_DISABLE=1",
		"PACKER_CONFIG_DIR=" + filepath.Join(e.work, "packer-config"), "PACKER_LOG=0"}
}

// build runs packer build with one amilint provisioner block.
func (e *env) build(t *testing.T, name, provisioner string) (string, error) {
	dir := filepath.Join(e.work, name)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	tpl := fmt.Sprintf(`
source "null" "local" {
  communicator         = "ssh"
  ssh_host             = "127.0.0.1"
  ssh_port             = %d
  ssh_username         = "root"
  ssh_private_key_file = %q
}

build {
  sources = ["source.null.local"]
  provisioner "amilint" {
%s
  }
}
`, e.port, e.key, provisioner)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "build.pkr.hcl"), []byte(tpl), 0o644))
	return run(t, dir, e.packerEnv(), e.packer, "build", "-color=false", ".")
}

func materialize(t *testing.T, e *env, name string) string {
	root := filepath.Join(e.work, name+"-root")
	require.NoError(t, fixtures.Materialize("dlami", root))
	return root
}

func systemctlState(t *testing.T, root, unit string) string {
	out, _ := run(t, root, nil, "systemctl", "--root="+root, "is-enabled", unit)
	return strings.TrimSpace(out)
}

func TestPackerBuild(t *testing.T) {
	e := setup(t)

	t.Run("audit fails the build naming ecs.service", func(t *testing.T) {
		root := materialize(t, e, "audit")
		out, err := e.build(t, "audit", fmt.Sprintf(`    root = %q`, root))
		require.Error(t, err, out)
		assert.Contains(t, out, "ecs.service")
		assert.Contains(t, out, "finding(s) at or above high")
		assert.Equal(t, "enabled", systemctlState(t, root, "ecs.service"), "audit does not change the image")
	})

	t.Run("fix passes and leaves ecs.service disabled", func(t *testing.T) {
		root := materialize(t, e, "fix")
		out, err := e.build(t, "fix", fmt.Sprintf(`    mode = "fix"
    root = %q`, root))
		require.NoError(t, err, out)
		assert.Contains(t, out, "changed the image")
		assert.NotEqual(t, "enabled", systemctlState(t, root, "ecs.service"))
		out, err = run(t, e.work, nil, e.amilint, "amilint", "scan", root)
		assert.NoError(t, err, "amilint scan of the fixed image exits 0:\n%s", out)
	})

	t.Run("warn passes and writes the reports", func(t *testing.T) {
		root := materialize(t, e, "warn")
		reports := filepath.Join(e.work, "warn-reports")
		out, err := e.build(t, "warn", fmt.Sprintf(`    mode = "warn"
    root = %q
    report_path = %q
    report_formats = ["json", "sarif", "junit", "html"]`, root, reports))
		require.NoError(t, err, out)
		b, err := os.ReadFile(filepath.Join(reports, "amilint.json"))
		require.NoError(t, err)
		rep, err := finding.Decode(b)
		require.NoError(t, err)
		var units []string
		for _, f := range rep.Findings {
			units = append(units, f.Unit)
		}
		assert.Contains(t, units, "ecs.service")
		for _, f := range []string{"amilint.sarif", "amilint.junit.xml", "amilint.html"} {
			b, err := os.ReadFile(filepath.Join(reports, f))
			require.NoError(t, err)
			assert.Contains(t, string(b), "ecs.service", f)
		}
		var sarif map[string]any
		require.NoError(t, json.Unmarshal(mustRead(t, filepath.Join(reports, "amilint.sarif")), &sarif))
		assert.Equal(t, "2.1.0", sarif["version"])
	})
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return b
}
