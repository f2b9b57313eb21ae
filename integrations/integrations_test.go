// Package integrations_test checks the CI integrations offline: the
// GitHub Action's install and scan scripts and the GitLab CI template's job
// run for real against a fake release directory (file:// URLs) holding an
// amilint built here as the release builds it.
package integrations_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/amilint/amilint/fixtures/testenv"
)

const version = "v9.8.7"

var (
	buildOnce sync.Once
	built     string
	buildErr  error
)

// amilint builds the CLI once as the release does: static, its version set
// by -ldflags -X.
func amilint(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "amilint-integrations-")
		if err != nil {
			buildErr = err
			return
		}
		built = filepath.Join(dir, "amilint")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w -X github.com/amilint/amilint/internal/cli.Version="+version,
			"-o", built, "./cmd/amilint")
		cmd.Dir = testenv.RepoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	require.NoError(t, buildErr)
	return built
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built != "" {
		os.RemoveAll(filepath.Dir(built))
	}
	os.Exit(code)
}

// release lays out a fake release of version in dir as GoReleaser names
// it: download/TAG/amilint_VERSION_OS_ARCH.tar.gz (the binary and the
// README) and amilint_VERSION_SHA256SUMS. It returns the base URL.
func release(t *testing.T, bin string, tamper func(dir string)) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "download", version)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	data, err := os.ReadFile(bin)
	require.NoError(t, err)
	num := strings.TrimPrefix(version, "v")
	name := fmt.Sprintf("amilint_%s_%s_%s.tar.gz", num, runtime.GOOS, runtime.GOARCH)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{"README.md", 0o644, []byte("# amilint\n")}, {"amilint", 0o755, data}} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), Typeflag: tar.TypeReg}))
		_, err := tw.Write(f.data)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), buf.Bytes(), 0o644))
	sum := sha256.Sum256(buf.Bytes())
	other := sha256.Sum256([]byte("another archive"))
	sums := fmt.Sprintf("%s  amilint_%s_darwin_riscv.tar.gz\n%s  %s\n", hex.EncodeToString(other[:]), num, hex.EncodeToString(sum[:]), name)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "amilint_"+num+"_SHA256SUMS"), []byte(sums), 0o644))
	if tamper != nil {
		tamper(dir)
	}
	return "file://" + root
}

// run runs a script with env added to a minimal environment.
func run(t *testing.T, dir string, env map[string]string, name string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil {
		require.ErrorAs(t, err, &ee, "%s: %s", name, out)
		return ee.ExitCode(), string(out)
	}
	return 0, string(out)
}

func script(t *testing.T, name string) string {
	return filepath.Join(testenv.RepoRoot(t), "integrations", "github", name)
}

func TestInstall(t *testing.T) {
	testenv.Tool(t, "curl", "curl")
	bin := amilint(t)
	num := strings.TrimPrefix(version, "v")
	archive := fmt.Sprintf("amilint_%s_%s_%s.tar.gz", num, runtime.GOOS, runtime.GOARCH)
	for _, tc := range []struct {
		name    string
		version string
		tamper  func(dir string)
		want    string // in the output; "" means it installs
	}{
		{name: "verified", version: version},
		{"tampered archive", version, func(dir string) {
			f, err := os.OpenFile(filepath.Join(dir, archive), os.O_APPEND|os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.Write([]byte{0})
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}, "checksum mismatch for " + archive},
		{"archive not listed", version, func(dir string) {
			p := filepath.Join(dir, "amilint_"+num+"_SHA256SUMS")
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(p, []byte(strings.Split(string(b), "\n")[0]+"\n"), 0o644))
		}, "lists no checksum for " + archive},
		{"no checksums file", version, func(dir string) { require.NoError(t, os.Remove(filepath.Join(dir, "amilint_"+num+"_SHA256SUMS"))) },
			"download file://"},
		{"another version's binary", "v9.8.8", func(dir string) {
			// A release whose files say v9.8.8 but whose binary is v9.8.7.
			next := filepath.Join(filepath.Dir(dir), "v9.8.8")
			require.NoError(t, os.MkdirAll(next, 0o755))
			b, err := os.ReadFile(filepath.Join(dir, archive))
			require.NoError(t, err)
			name := strings.Replace(archive, num, "9.8.8", 1)
			require.NoError(t, os.WriteFile(filepath.Join(next, name), b, 0o644))
			s := sha256.Sum256(b)
			require.NoError(t, os.WriteFile(filepath.Join(next, "amilint_9.8.8_SHA256SUMS"), []byte(hex.EncodeToString(s[:])+"  "+name+"\n"), 0o644))
		}, `reports "amilint v9.8.7", not amilint v9.8.8`},
		{"not a tag", "latest", nil, `version "latest": want a release tag`},
		{"no version", "", nil, "no version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			dest := filepath.Join(work, "bin")
			ghPath, ghOut := filepath.Join(work, "path"), filepath.Join(work, "output")
			code, out := run(t, work, map[string]string{"AMILINT_VERSION": tc.version, "AMILINT_DIR": dest,
				"AMILINT_RELEASES": release(t, bin, tc.tamper), "GITHUB_PATH": ghPath, "GITHUB_OUTPUT": ghOut}, script(t, "install.sh"))
			if tc.want != "" {
				assert.Equal(t, 1, code, out)
				assert.Contains(t, out, "::error title=amilint install::")
				assert.Contains(t, out, tc.want)
				assert.NoFileExists(t, filepath.Join(dest, "amilint"), "nothing is installed")
				return
			}
			require.Equal(t, 0, code, out)
			assert.Contains(t, out, "installed amilint "+version)
			got, err := exec.Command(filepath.Join(dest, "amilint"), "version").Output()
			require.NoError(t, err)
			assert.Equal(t, "amilint "+version+"\n", string(got))
			p, err := os.ReadFile(ghPath)
			require.NoError(t, err)
			assert.Equal(t, dest+"\n", string(p))
			o, err := os.ReadFile(ghOut)
			require.NoError(t, err)
			assert.Equal(t, "path="+dest+"/amilint\nversion="+version+"\n", string(o))
		})
	}
}

// outputs parses a GITHUB_OUTPUT file of NAME=VALUE lines.
func outputs(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		k, v, ok := strings.Cut(l, "=")
		require.True(t, ok, l)
		out[k] = v
	}
	return out
}

// TestScan runs the action's scan step on the embedded DLAMI-like image:
// the step succeeds with exit-code 1 at high (so the SARIF is uploaded
// before the gate fails the job), 0 at critical, and fails itself when
// amilint cannot scan.
func TestScan(t *testing.T) {
	bin := amilint(t)
	for _, tc := range []struct {
		name, target, failOn, args string
		code                       int
		exit                       string
	}{
		{"findings at high", "fixture:dlami", "high", "", 0, "1"},
		{"nothing at critical", "fixture:dlami", "critical", "", 0, "0"},
		{"profile flag passed", "fixture:dlami", "critical", "--profile k8s-gpu-node --trait server", 0, "0"},
		{"unreadable target", "does-not-exist.qcow2", "high", "", 2, ""},
		{"bad flag", "fixture:dlami", "high", "--no-such-flag", 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			ghOut := filepath.Join(work, "output")
			code, out := run(t, work, map[string]string{"AMILINT": bin, "AMILINT_TARGET": tc.target, "AMILINT_FAIL_ON": tc.failOn,
				"AMILINT_ARGS": tc.args, "GITHUB_OUTPUT": ghOut}, script(t, "scan.sh"))
			require.Equal(t, tc.code, code, out)
			if tc.code != 0 {
				assert.Contains(t, out, "::error title=amilint::could not scan "+tc.target)
				assert.NoFileExists(t, ghOut)
				return
			}
			o := outputs(t, ghOut)
			assert.Equal(t, tc.exit, o["exit-code"])
			assert.Equal(t, "amilint-report/amilint.sarif", o["sarif"])
			b, err := os.ReadFile(filepath.Join(work, o["sarif"]))
			require.NoError(t, err)
			var sarif struct {
				Version string
				Runs    []struct {
					Results []struct{ RuleID string }
				}
			}
			require.NoError(t, json.Unmarshal(b, &sarif))
			assert.Equal(t, "2.1.0", sarif.Version)
			require.Len(t, sarif.Runs, 1)
			var rules []string
			for _, r := range sarif.Runs[0].Results {
				rules = append(rules, r.RuleID)
			}
			assert.Contains(t, rules, "ecs-agent-unconfigured")
		})
	}
}

// action is the part of action.yml the test reads.
type action struct {
	Inputs map[string]struct {
		Required bool
		Default  string
	}
	Outputs map[string]struct{ Value string }
	Runs    struct {
		Using string
		Steps []struct {
			Name, ID, If, Uses, Run, Shell string
			Env                            map[string]string
			With                           map[string]string
		}
	}
}

// TestActionWiring checks what actionlint does not: the composite steps
// run the scripts tested above with the inputs they read, in the order
// install, scan, upload, gate.
func TestActionWiring(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "action.yml"))
	require.NoError(t, err)
	var a action
	require.NoError(t, yaml.Unmarshal(b, &a))
	assert.Equal(t, "composite", a.Runs.Using)
	require.Len(t, a.Runs.Steps, 4)
	install, scan, upload, gate := a.Runs.Steps[0], a.Runs.Steps[1], a.Runs.Steps[2], a.Runs.Steps[3]
	assert.Contains(t, install.Run, "/integrations/github/install.sh")
	assert.Contains(t, scan.Run, "/integrations/github/scan.sh")
	for _, s := range []string{install.Run, scan.Run} {
		p := strings.Trim(strings.TrimPrefix(strings.Trim(s, `'"`), "$GITHUB_ACTION_PATH/"), `'"`)
		fi, err := os.Stat(filepath.Join(testenv.RepoRoot(t), p))
		require.NoError(t, err, p)
		assert.NotZero(t, fi.Mode()&0o111, "%s is executable", p)
	}
	for _, env := range []string{"AMILINT_TARGET", "AMILINT_FAIL_ON", "AMILINT_ARGS", "AMILINT_OUTPUT_DIR"} {
		assert.Contains(t, scan.Env, env)
	}
	assert.Equal(t, "${{ inputs.version || github.action_ref }}", install.Env["AMILINT_VERSION"])
	assert.Equal(t, "scan", scan.ID)
	assert.True(t, strings.HasPrefix(upload.Uses, "github/codeql-action/upload-sarif@"))
	assert.Contains(t, upload.If, "always()")
	assert.Equal(t, "steps.scan.outputs.exit-code == '1'", gate.If)
	assert.Contains(t, gate.Run, "exit 1")
	assert.Equal(t, "high", a.Inputs["fail-on"].Default)
	assert.True(t, a.Inputs["target"].Required)
	assert.Equal(t, "${{ steps.scan.outputs.exit-code }}", a.Outputs["exit-code"].Value)
}

// gitlabJob is the part of a GitLab CI job the test reads.
type gitlabJob struct {
	Image        string
	Variables    map[string]string
	BeforeScript []string `yaml:"before_script"`
	Script       []string
	Artifacts    struct {
		When    string
		Paths   []string
		Reports struct{ JUnit string }
	}
}

// TestGitLabTemplate runs the template's .amilint job script, as a GitLab
// runner runs it (before_script and script in one shell), against the fake
// release: it verifies the checksum, scans, writes the JUnit report the job
// publishes, and exits 1 on findings at or above AMILINT_FAIL_ON.
func TestGitLabTemplate(t *testing.T) {
	testenv.Tool(t, "curl", "curl")
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(t), "integrations/gitlab/amilint.gitlab-ci.yml"))
	require.NoError(t, err)
	var doc struct {
		Variables map[string]string
		Job       gitlabJob `yaml:".amilint"`
	}
	require.NoError(t, yaml.Unmarshal(b, &doc))
	job := doc.Job
	require.NotEmpty(t, job.Script)
	assert.Equal(t, "amilint-junit.xml", job.Artifacts.Reports.JUnit)
	assert.Equal(t, "always", job.Artifacts.When, "the report is kept when the gate fails the job")
	assert.Regexp(t, `^v\d+\.\d+\.\d+$`, doc.Variables["AMILINT_VERSION"])
	sh := "set -eo pipefail\n" + strings.Join(append(append([]string{}, job.BeforeScript...), job.Script...), "\n")

	bin := amilint(t)
	for _, tc := range []struct {
		name, failOn string
		tamper       bool
		code         int
	}{
		{"findings at high fail the job", "high", false, 1},
		{"nothing at critical", "critical", false, 0},
		{"a tampered archive stops it", "high", true, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			var tamper func(string)
			if tc.tamper {
				tamper = func(dir string) {
					matches, _ := filepath.Glob(filepath.Join(dir, "*.tar.gz"))
					require.Len(t, matches, 1)
					require.NoError(t, os.WriteFile(matches[0], []byte("not the release"), 0o644))
				}
			}
			env := map[string]string{"CI_PROJECT_DIR": work, "AMILINT_VERSION": version, "AMILINT_RELEASES": release(t, bin, tamper),
				"AMILINT_TARGET": "fixture:dlami", "AMILINT_FAIL_ON": tc.failOn, "AMILINT_ARGS": ""}
			code, out := run(t, work, env, "bash", "-c", sh)
			assert.Equal(t, tc.code, code, out)
			junit := filepath.Join(work, job.Artifacts.Reports.JUnit)
			if tc.tamper {
				assert.Contains(t, out, "does not match")
				assert.NoFileExists(t, junit)
				return
			}
			assert.Contains(t, out, "amilint "+version)
			data, err := os.ReadFile(junit)
			require.NoError(t, err, out)
			var suites struct {
				XMLName xml.Name `xml:"testsuites"`
				Suites  []struct {
					Cases []struct {
						Name    string    `xml:"name,attr"`
						Failure *struct{} `xml:"failure"`
					} `xml:"testcase"`
				} `xml:"testsuite"`
			}
			require.NoError(t, xml.Unmarshal(data, &suites))
			var cases, failures int
			for _, s := range suites.Suites {
				for _, c := range s.Cases {
					cases++
					if c.Failure != nil {
						failures++
					}
				}
			}
			assert.Positive(t, cases)
			if tc.code == 1 {
				assert.Positive(t, failures, "a finding at or above high is a failed test case")
			}
		})
	}
}
