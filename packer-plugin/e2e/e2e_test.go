//go:build e2e

// Package e2e runs real `packer build`s with the amilint plugin installed by
// `packer plugins install --path`, the null builder and the SSH communicator
// against a real sshd on 127.0.0.1: TestPackerBuild audits and fixes a copy
// of the DLAMI-like fixture with a development build of the plugin (`make
// e2e-packer`); TestRelease checks the release `make release-snapshot`
// built as Packer consumes it and audits an arm64 guest with the released
// plugin through required_plugins (`make e2e-release`).
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
	"syscall"
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
	return runFor(t, 5*time.Minute, dir, envv, name, args...)
}

// runFor runs name under a timeout and returns its combined output.
func runFor(t *testing.T, timeout time.Duration, dir string, envv []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
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

	// The plugin binary, named as a release binary and installed by path;
	// it embeds the guest binaries `make guest-binaries` built.
	bin := filepath.Join(e.work, "packer-plugin-amilint_v0.1.0_x5.0_linux_amd64")
	out, err := run(t, "..", nil, "go", "build", "-o", bin, ".")
	require.NoError(t, err, out)
	// The full amilint, to check the images afterwards.
	e.amilint = filepath.Join(e.work, "amilint")
	out, err = run(t, testenv.RepoRoot(t), nil, "go", "build", "-o", e.amilint, "./cmd/amilint")
	require.NoError(t, err, out)
	e.plugins = filepath.Join(e.work, "plugins")
	out, err = run(t, e.work, e.packerEnv(), e.packer, "plugins", "install", "--path", bin, "github.com/amilint/amilint")
	require.NoError(t, err, out)

	e.key, e.port = startSSHD(t, e.work, "", func(config string) *exec.Cmd {
		return exec.Command(sshd, "-D", "-e", "-f", config)
	})
	return e
}

// startSSHD starts a throwaway sshd on 127.0.0.1 with throwaway keys and
// returns the client key and the port. Its files go to dir+prefix (prefix
// is the guest's view of them: "" for an sshd of this machine, the path
// under the guest root for an sshd chrooted there); start returns the
// command that runs it with the configuration at the guest path config.
// It runs in its own process group, killed when the test ends.
func startSSHD(t *testing.T, work, guestDir string, start func(config string) *exec.Cmd) (key string, port int) {
	t.Helper()
	key = filepath.Join(work, "client")
	files := filepath.Join(work, "sshd")
	if guestDir != "" {
		files = filepath.Join(work, "upper", guestDir)
	}
	require.NoError(t, os.MkdirAll(files, 0o755))
	seen := guestDir // where sshd sees its files
	if guestDir == "" {
		seen = files
	}
	for _, k := range []string{key, filepath.Join(files, "host")} {
		out, err := run(t, work, nil, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", k)
		require.NoError(t, err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(files, "authorized_keys"), pub, 0o600))
	require.NoError(t, os.MkdirAll("/run/sshd", 0o755))
	port = freePort(t)
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
`, port, seen, seen, seen)
	require.NoError(t, os.WriteFile(filepath.Join(files, "sshd_config"), []byte(cfg), 0o600))
	cmd := start(filepath.Join(seen, "sshd_config"))
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("sshd log:\n%s", log.String())
		}
	})
	// An emulated sshd takes seconds to listen: wait up to a minute.
	for i := 0; i < 600; i++ {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			return key, port
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("sshd did not listen on 127.0.0.1:%d:\n%s", port, log.String())
	return "", 0
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
		assert.Regexp(t, `amilint: uploaded the amilint this plugin carries for linux/amd64 \([0-9.]+ MB\) in [0-9.]+m?s`, out)
		assert.Equal(t, "enabled", systemctlState(t, root, "ecs.service"), "audit does not change the image")
	})

	t.Run("fix passes and leaves ecs.service disabled", func(t *testing.T) {
		root := materialize(t, e, "fix")
		out, err := e.build(t, "fix", fmt.Sprintf(`    mode = "fix"
    root = %q`, root))
		require.NoError(t, err, out)
		assert.Contains(t, out, "changed the image")
		assert.NotEqual(t, "enabled", systemctlState(t, root, "ecs.service"))
		out, err = run(t, e.work, nil, e.amilint, "scan", root)
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
