package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/packer-plugin/guest"
)

// TestGuestBuild builds the guest binaries as the plugin embeds them
// (through run, the -raw way) and runs the one for this machine: each stays
// within guest.MaxBinarySize,
// audits a directory as the full build does, and refuses what it leaves
// out — AMIs, EBS snapshots, disk images, tarballs, container images, the
// embedded fixtures, the Prometheus exporter, HTML, policy tests, rollout
// reports, image diffs and exposure scores — with exit 2 and one line
// naming the full amilint.
func TestGuestBuild(t *testing.T) {
	work := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	require.NoError(t, run(ctx, "", work, true))
	for _, arch := range guest.Archs {
		fi, err := os.Stat(filepath.Join(work, "amilint_linux_"+arch))
		require.NoError(t, err)
		t.Logf("guest build for linux/%s: %d bytes stripped", arch, fi.Size())
		assert.LessOrEqual(t, fi.Size(), int64(guest.MaxBinarySize), arch)

		// What a guest audit cannot use is not linked at all: no AWS SDK
		// (the EC2 and EBS clients), no Prometheus client or exporter
		// toolkit, no container registry client, and none of the
		// protobuf encodings OPA's bundles and IR bring.
		info, err := buildinfo.ReadFile(filepath.Join(work, "amilint_linux_"+arch))
		require.NoError(t, err, arch)
		var mods []string
		for _, d := range info.Deps {
			mods = append(mods, d.Path)
			for _, left := range []string{"github.com/aws/", "github.com/prometheus/", "github.com/google/go-containerregistry", "gopkg.in/yaml.v3", "google.golang.org/protobuf"} {
				assert.False(t, strings.HasPrefix(d.Path, left), "linux/%s links %s", arch, d.Path)
			}
		}
		assert.Contains(t, mods, "github.com/open-policy-agent/opa", "linux/%s: the policy engine is in", arch)
		assert.Contains(t, info.Settings, debug.BuildSetting{Key: "-tags", Value: "amilint_guest"}, arch)
	}
	// Nor is the standard library's HTML templating: the guest writes no
	// HTML, and html/template with text/template and the templates are
	// 120 KB of the binary. Nor are OPA's front end for every target
	// (rego), with the Wasm compiler and its embedded runtime, the IR
	// planner and bundles, nor its policy test runner: the guest evaluates
	// with topdown alone and runs no policy tests. They were 3.8 MB.
	src, err := output(ctx, "", nil, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/amilint/amilint")
	require.NoError(t, err)
	deps, err := output(ctx, strings.TrimSpace(src), []string{"GOOS=linux", "CGO_ENABLED=0"}, "go", "list", "-deps", "-tags", "amilint_guest", "./cmd/amilint")
	require.NoError(t, err)
	for _, left := range []string{
		"html/template", "text/template",
		"github.com/open-policy-agent/opa/v1/rego", "github.com/open-policy-agent/opa/v1/tester",
		"github.com/open-policy-agent/opa/internal/compiler/wasm", "github.com/open-policy-agent/opa/internal/planner",
		"github.com/open-policy-agent/opa/v1/bundle",
	} {
		assert.False(t, slices.Contains(strings.Fields(deps), left), "the guest build imports %s", left)
	}

	if runtime.GOOS != "linux" || !slices.Contains(guest.Archs, runtime.GOARCH) {
		t.Logf("not running the linux guest binaries on %s/%s", runtime.GOOS, runtime.GOARCH)
		return
	}
	bin := filepath.Join(work, "amilint_linux_"+runtime.GOARCH)

	root := filepath.Join(work, "root")
	require.NoError(t, fixtures.Materialize("dlami", root))
	tarball := filepath.Join(work, "root.tar")
	require.NoError(t, os.WriteFile(tarball, make([]byte, 10240), 0o644))

	const refused = "use the full amilint"
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string // a substring of stdout
		stderr string // a substring of the one line on stderr
	}{
		{name: "version", args: []string{"version"}, stdout: "(guest build)"},
		{name: "scan a directory", args: []string{"scan", "-o", "json", root}, code: 1, stdout: `"ecs.service"`},
		{name: "units", args: []string{"units", "-o", "tsv", root}, stdout: "ecs.service"},
		{name: "fix dry run", args: []string{"fix", "--dry-run", root}, code: 1, stdout: "ecs.service"},
		{name: "fix harden dry run", args: []string{"fix", "--harden", "--dry-run", root}, code: 1, stdout: "50-amilint-hardening.conf"},
		{name: "ami", args: []string{"scan", "ami:ami-0123456789abcdef0"}, code: 2,
			stderr: "open target ami:ami-0123456789abcdef0: AMIs and EBS snapshots are not read by the guest build of amilint"},
		{name: "ebs", args: []string{"scan", "ebs:snap-0123456789abcdef0"}, code: 2, stderr: "AMIs and EBS snapshots are not read by the guest build"},
		{name: "file", args: []string{"scan", tarball}, code: 2, stderr: "disk images, block devices and tarballs are not read by the guest build"},
		{name: "stdin", args: []string{"scan", "-"}, code: 2, stderr: "open target -: tarballs are not read by the guest build"},
		{name: "serve", args: []string{"live", "--serve", "127.0.0.1:0", "--collect", "cgroup"}, code: 2,
			stderr: "--serve 127.0.0.1:0: the Prometheus exporter is not in the guest build"},
		{name: "policy test", args: []string{"policy", "test", root}, code: 2, stderr: "amilint policy: not in the guest build"},
		{name: "report", args: []string{"report", filepath.Join(work, "a.json")}, code: 2, stderr: "amilint report: not in the guest build"},
		{name: "html", args: []string{"scan", "-o", "html", root}, code: 2, stderr: "HTML reports are not written by the guest build of amilint"},
		{name: "diff", args: []string{"diff", root, root}, code: 2, stderr: "amilint diff: not in the guest build"},
		{name: "security", args: []string{"security", root}, code: 2, stderr: "amilint security: not in the guest build"},
		{name: "oci", args: []string{"scan", "oci:" + root}, code: 2, stderr: "container images are not read by the guest build"},
		{name: "registry", args: []string{"scan", "registry:127.0.0.1:1/amilint:v1"}, code: 2, stderr: "container images are not read by the guest build"},
		{name: "fixture", args: []string{"scan", "fixture:dlami"}, code: 2, stderr: "the embedded fixtures are not read by the guest build"},
		{name: "default target", args: []string{"scan"}, code: 2, stderr: "open target fixture:dlami: the embedded fixtures are not read by the guest build"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, tc.args...)
			cmd.Stdin = strings.NewReader("")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.code, code, "stderr: %s", stderr.String())
			assert.Contains(t, stdout.String(), tc.stdout)
			if tc.stderr == "" {
				return
			}
			line := strings.TrimSuffix(stderr.String(), "\n")
			assert.NotContains(t, line, "\n", "one line")
			assert.Contains(t, line, tc.stderr)
			assert.Contains(t, line, refused)
		})
	}

	// The report the plugin reads back is the full build's amilint/v1.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel2()
	js, _ := exec.CommandContext(ctx2, bin, "scan", "-o", "json", root).Output()
	var rep struct {
		Schema string `json:"schema"`
	}
	require.NoError(t, json.Unmarshal(js, &rep))
	assert.Equal(t, "amilint/v1", rep.Schema)
}
