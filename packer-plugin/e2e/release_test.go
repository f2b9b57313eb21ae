//go:build e2e

package e2e

import (
	"archive/tar"
	"archive/zip"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/packer-plugin/guest"
)

// arm64Root is the Debian 12 arm64 root (systemd, openssh-server) the arm64
// guest runs from, under qemu-user.
var arm64Root = testenv.DebianRoot{Env: "AMILINT_ARM64_ROOT", Cache: "arm64-root", Make: "arm64-root",
	What: "Debian 12 arm64 root (systemd, sshd)"}

// TestRelease checks the release `make release-snapshot` built the way
// `packer init` and `packer plugins install` consume it, installs the
// plugin for this host from its zip with `packer plugins install --path`,
// and runs one `packer build` through a required_plugins block against two
// guests at once: this machine's sshd (linux/amd64) and an arm64 Debian
// root whose sshd runs under qemu-user, so that every command there,
// `uname -m` included, is an aarch64 program. Nothing is set for the
// architecture: the plugin asks each guest and uploads what it carries.
func TestRelease(t *testing.T) {
	testenv.Root(t, "e2e-release (sshd, and mounts and chroot for the arm64 guest)")
	dist, version := os.Getenv("AMILINT_RELEASE_DIR"), os.Getenv("AMILINT_RELEASE_VERSION")
	if dist == "" || version == "" {
		testenv.Missing(t, "AMILINT_RELEASE_DIR and AMILINT_RELEASE_VERSION are not set: run make e2e-release")
	}
	packer := os.Getenv("PACKER_BIN")
	require.NotEmpty(t, packer, "PACKER_BIN (make e2e-release builds it)")
	root := arm64Root.Path(t)
	sshd, err := exec.LookPath("sshd")
	if err != nil {
		sshd = "/usr/sbin/sshd"
	}
	require.FileExists(t, sshd, "openssh-server is installed by .ci/run")
	testenv.Tool(t, "unshare", "util-linux")

	// Every archive, named as Packer and the install docs say, in the
	// checksums file; the plugin's checksums file has the zips alone.
	var cli, zips []string
	for _, goos := range []string{"linux", "darwin", "windows"} {
		for _, arch := range []string{"amd64", "arm64"} {
			zips = append(zips, fmt.Sprintf("packer-plugin-amilint_v%s_x5.0_%s_%s.zip", version, goos, arch))
			if goos != "windows" {
				cli = append(cli, fmt.Sprintf("amilint_%s_%s_%s.tar.gz", version, goos, arch))
			}
		}
	}
	all := readSums(t, filepath.Join(dist, "amilint_"+version+"_SHA256SUMS"))
	assert.ElementsMatch(t, append(slices.Clone(cli), zips...), slices.Collect(maps.Keys(all)))
	for name, sum := range all {
		assert.Equal(t, sum, sha256File(t, filepath.Join(dist, name)), name)
	}
	plugin := readSums(t, filepath.Join(dist, "packer-plugin-amilint_v"+version+"_SHA256SUMS"))
	assert.ElementsMatch(t, zips, slices.Collect(maps.Keys(plugin)))
	for name, sum := range plugin {
		assert.Equal(t, all[name], sum, name)
	}

	// The guest binaries the release's before hook built, which every
	// plugin binary must carry, whatever OS and architecture it is for.
	carried := map[string][]byte{}
	for _, arch := range guest.Archs {
		b, err := fs.ReadFile(guest.Embedded(), guest.FileName(arch))
		require.NoError(t, err, "the guest binaries the release's before hook built")
		carried[arch] = b
	}

	// A plugin zip holds the one binary Packer extracts: the zip's name
	// without .zip (.exe added on windows), executable, carrying amilint
	// for linux/amd64 and linux/arm64 guests.
	for _, z := range zips {
		zr, err := zip.OpenReader(filepath.Join(dist, z))
		require.NoError(t, err, z)
		want := strings.TrimSuffix(z, ".zip")
		if strings.Contains(z, "_windows_") {
			want += ".exe"
		}
		if assert.Len(t, zr.File, 1, z) {
			assert.Equal(t, want, zr.File[0].Name, z)
			if !strings.Contains(z, "_windows_") {
				assert.Equal(t, os.FileMode(0o755), zr.File[0].Mode().Perm(), z)
			}
			r, err := zr.File[0].Open()
			require.NoError(t, err, z)
			b, err := io.ReadAll(r)
			r.Close()
			require.NoError(t, err, z)
			for arch, packed := range carried {
				assert.True(t, bytes.Contains(b, packed), "%s carries amilint for linux/%s", z, arch)
			}
		}
		zr.Close()
	}
	// A CLI tarball holds amilint and the README.
	for _, a := range cli {
		assert.ElementsMatch(t, []string{"amilint", "README.md"}, tarNames(t, filepath.Join(dist, a)), a)
	}

	work := t.TempDir()
	// The CLI for this host runs and reports the release's version.
	amilint := extractTar(t, filepath.Join(dist, fmt.Sprintf("amilint_%s_linux_%s.tar.gz", version, runtime.GOARCH)), "amilint", work)
	out, err := run(t, work, nil, amilint, "version")
	require.NoError(t, err, out)
	assert.Equal(t, "amilint v"+version+"\n", out)

	// The plugin for this host describes itself as the release, with the
	// API version its name carries.
	zipName := fmt.Sprintf("packer-plugin-amilint_v%s_x5.0_%s_%s.zip", version, runtime.GOOS, runtime.GOARCH)
	bin := extractZip(t, filepath.Join(dist, zipName), work)
	out, err = run(t, work, nil, bin, "describe")
	require.NoError(t, err, out)
	var desc struct {
		Version      string   `json:"version"`
		APIVersion   string   `json:"api_version"`
		Provisioners []string `json:"provisioners"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &desc), out)
	assert.Equal(t, version, desc.Version)
	assert.Equal(t, "x5.0", desc.APIVersion)
	assert.Equal(t, []string{"-packer-default-plugin-name-"}, desc.Provisioners)

	e := &env{work: work, packer: packer, plugins: filepath.Join(work, "plugins")}
	out, err = run(t, work, e.packerEnv(), packer, "plugins", "install", "--path", bin, "github.com/amilint/amilint")
	require.NoError(t, err, out)
	installed := filepath.Join(e.plugins, "github.com", "amilint", "amilint", strings.TrimSuffix(zipName, ".zip"))
	require.FileExists(t, installed, out)

	// The two guests.
	amd64Key, amd64Port := startSSHD(t, filepath.Join(work, "amd64"), "", func(config string) *exec.Cmd {
		return exec.Command(sshd, "-D", "-e", "-f", config)
	})
	arm64Key, arm64Port := startArm64Guest(t, filepath.Join(work, "arm64"), root)

	// The amd64 guest audits a copy of the DLAMI-like fixture, the arm64
	// guest its own root.
	amd64Root := filepath.Join(work, "amd64-root")
	require.NoError(t, fixtures.Materialize("dlami", amd64Root))

	dir := filepath.Join(work, "build")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	reports := filepath.Join(work, "reports")
	tpl := fmt.Sprintf(`packer {
  required_plugins {
    amilint = {
      source  = "github.com/amilint/amilint"
      version = ">= %s"
    }
  }
}

source "null" "amd64" {
  communicator         = "ssh"
  ssh_host             = "127.0.0.1"
  ssh_port             = %d
  ssh_username         = "root"
  ssh_private_key_file = %q
}

source "null" "arm64" {
  communicator         = "ssh"
  ssh_host             = "127.0.0.1"
  ssh_port             = %d
  ssh_username         = "root"
  ssh_private_key_file = %q
  ssh_timeout          = "5m"
}

build {
  sources = ["source.null.amd64", "source.null.arm64"]

  provisioner "shell" {
    inline = ["echo guest machine: $(uname -m)"]
  }

  provisioner "amilint" {
    root           = source.name == "amd64" ? %q : "/"
    mode           = "warn"
    report_path    = "%s/${source.name}"
    report_formats = ["json"]
    # Keep a copy of what was uploaded, to check which binary it was.
    execute_command = "mkdir -p %s && cp {{.Path}} %s/uploaded-${source.name} && chmod 0755 {{.Path}} && {{.Vars}} {{.Path}} {{.Args}}"
  }
}
`, version, amd64Port, amd64Key, arm64Port, arm64Key, amd64Root, reports, work, work)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "build.pkr.hcl"), []byte(tpl), 0o644))

	// packer init finds the required plugin installed and fetches nothing.
	out, err = run(t, dir, e.packerEnv(), packer, "init", ".")
	require.NoError(t, err, out)

	start := time.Now()
	out, err = runFor(t, 20*time.Minute, dir, e.packerEnv(), packer, "build", "-color=false", ".")
	t.Logf("packer build of both guests (%s):\n%s", time.Since(start).Round(time.Second), out)
	require.NoError(t, err)
	assert.Contains(t, out, "null.arm64: guest machine: aarch64")
	assert.Contains(t, out, "null.amd64: guest machine: x86_64")
	upload := regexp.MustCompile(`null\.(amd64|arm64): amilint: uploaded the amilint this plugin carries for linux/(amd64|arm64) \(([0-9.]+) MB\) in \S+`)
	uploads := map[string]string{}
	for _, m := range upload.FindAllStringSubmatch(out, -1) {
		uploads[m[1]] = m[2]
	}
	assert.Equal(t, map[string]string{"amd64": "amd64", "arm64": "arm64"}, uploads, "each guest got the binary of its architecture")

	// What was uploaded is the guest build of amilint for that architecture,
	// within its size bound; and it ran: each guest's report is there.
	for arch, copyOf := range map[string]string{
		"amd64": filepath.Join(work, "uploaded-amd64"),
		"arm64": filepath.Join(work, "arm64", "upper", work, "uploaded-arm64"),
	} {
		b, err := os.ReadFile(copyOf)
		require.NoError(t, err, arch)
		f, err := elf.NewFile(strings.NewReader(string(b)))
		require.NoError(t, err, arch)
		assert.Equal(t, map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch], f.Machine, arch)
		assert.LessOrEqual(t, len(b), guest.MaxBinarySize, arch)
		t.Logf("linux/%s guest binary: %d bytes", arch, len(b))
		want, err := guest.Binary(guest.Embedded(), arch)
		require.NoError(t, err, "the guest binaries the release's before hook built")
		assert.True(t, string(want) == string(b), "linux/%s: the uploaded binary is the release's guest build", arch)

		rep, err := finding.Decode(mustRead(t, filepath.Join(reports, arch, "amilint.json")))
		require.NoError(t, err, arch)
		var found []string
		for _, f := range rep.Findings {
			found = append(found, f.RuleID+" "+f.Unit)
		}
		if arch == "amd64" {
			assert.Equal(t, amd64Root, rep.Target.Name)
			assert.Contains(t, found, "ecs-agent-unconfigured ecs.service")
			continue
		}
		// A minbase root has systemd's kmod-static-nodes.service enabled but
		// no kmod: what the arm64 amilint found in the arm64 guest.
		assert.Equal(t, "/", rep.Target.Name)
		assert.Equal(t, "Debian GNU/Linux 12 (bookworm)", rep.Target.OS)
		assert.Contains(t, found, "exec-missing kmod-static-nodes.service")
	}
}

// startArm64Guest serves SSH on 127.0.0.1 from the arm64 root: its own
// sshd, run by qemu-user, chrooted into an overlay of root (the cached
// root is never written; the overlay's upper directory is work/upper) with
// /proc, /dev and a /run tmpfs, in a private mount namespace that goes
// away with it.
func startArm64Guest(t *testing.T, work, root string) (key string, port int) {
	t.Helper()
	for _, d := range []string{"upper", "ovl", "merged"} {
		require.NoError(t, os.MkdirAll(filepath.Join(work, d), 0o755))
	}
	const script = `
mount -t overlay overlay -o "lowerdir=$1,upperdir=$2/upper,workdir=$2/ovl" "$2/merged"
m=$2/merged
mount -t proc proc "$m/proc"
mount --rbind /dev "$m/dev"
mount -t tmpfs tmpfs "$m/run"
mkdir -p "$m/run/sshd"
exec chroot "$m" /usr/sbin/sshd -D -e -f "$3"
`
	return startSSHD(t, work, "/etc/ssh/amilint-e2e", func(config string) *exec.Cmd {
		return exec.Command("unshare", "--mount", "--propagation", "private", "--",
			"sh", "-euc", script, "sh", root, work, config)
	})
}

func readSums(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		require.Len(t, fields, 2, "%s: %q: want SHA256 and file name", path, sc.Text())
		require.Regexp(t, `^[0-9a-f]{64}$`, fields[0])
		sums[fields[1]] = fields[0]
	}
	require.NoError(t, sc.Err())
	return sums
}

func sha256File(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	require.NoError(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// eachTar calls fn on every entry of the .tar.gz at path.
func eachTar(t *testing.T, path string, fn func(h *tar.Header, r io.Reader)) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	gz, err := gzip.NewReader(f)
	require.NoError(t, err, path)
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		require.NoError(t, err, path)
		fn(h, tr)
	}
}

func tarNames(t *testing.T, path string) []string {
	var names []string
	eachTar(t, path, func(h *tar.Header, _ io.Reader) { names = append(names, h.Name) })
	return names
}

// extractTar writes the entry name of the .tar.gz at path into dir.
func extractTar(t *testing.T, path, name, dir string) string {
	t.Helper()
	dst := filepath.Join(dir, name)
	eachTar(t, path, func(h *tar.Header, r io.Reader) {
		if h.Name != name {
			return
		}
		b, err := io.ReadAll(r)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(dst, b, 0o755))
	})
	require.FileExists(t, dst)
	return dst
}

// extractZip writes the one file of the zip at path into dir, as Packer
// does, and returns its path.
func extractZip(t *testing.T, path, dir string) string {
	t.Helper()
	zr, err := zip.OpenReader(path)
	require.NoError(t, err)
	defer zr.Close()
	require.Len(t, zr.File, 1)
	r, err := zr.File[0].Open()
	require.NoError(t, err)
	defer r.Close()
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	dst := filepath.Join(dir, zr.File[0].Name)
	require.NoError(t, os.WriteFile(dst, b, 0o755))
	return dst
}
