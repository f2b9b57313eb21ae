package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/policy"
)

const foreverPolicy = `package amilint.rules.forever

findings contains f if {
	n := count([1 | some i in numbers.range(1, 3000); some j in numbers.range(1, 3000); some k in numbers.range(1, 3000)])
	f := {"rule_id": "forever", "severity": "high", "message": sprintf("%d", [n])}
}
`

// budget is the --policy-timeout the tests of a policy that never ends
// give: the built-in catalog is evaluated first, in about 10 ms, and the
// budget must cover it on a machine as loaded as CI's before the test's
// package is reached and named. 200 ms did not: under a full test run
// the error named the catalog's exposure package, three runs in 240.
const budget = "2s"

func policyDir(t *testing.T, name, src string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "policies")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644))
	return dir
}

// TestPolicyTimeoutStopsEveryCommand runs a policy that never ends
// through each command that evaluates policies: each exits 2 with one
// line naming the package that ran out of time.
func TestPolicyTimeoutStopsEveryCommand(t *testing.T) {
	dir := policyDir(t, "forever.rego", foreverPolicy)
	img := materialize(t, "dlami")
	for _, args := range [][]string{
		{"scan", img},
		{"diff", img, img},
		{"fix", img},
	} {
		code, _, stderr := runCLI(t, append(args, "--policy", dir, "--policy-timeout", budget)...)
		assert.Equal(t, ExitError, code, "%v", args)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		assert.Contains(t, stderr, "package amilint.rules.forever ("+filepath.Join(dir, "forever.rego")+") ran out of time: stopped after "+budget+" (--policy-timeout)", "%v", args)
	}
	code, _, stderr := runCLI(t, "scan", img, "--policy-timeout", "-1s")
	assert.Equal(t, ExitError, code)
	assert.Contains(t, stderr, "--policy-timeout -1s: want 0 (no limit) or more")
}

// hogPolicy would hold 1 GiB: a string doubled 25 times, one concat a
// step.
func hogPolicy() string {
	var b strings.Builder
	b.WriteString("package amilint.rules.hog\n\nhog := s25 if {\n\ts0 := \"0123456789abcdef\"\n")
	for i := 1; i <= 25; i++ {
		fmt.Fprintf(&b, "\ts%d := concat(\"\", [s%d, s%d])\n", i, i-1, i-1)
	}
	b.WriteString("}\n\nfindings contains f if {\n\tf := {\"rule_id\": \"hog\", \"severity\": \"high\", \"message\": sprintf(\"%d\", [count(hog)])}\n}\n\ntest_hog if count(hog) > 0\n")
	return b.String()
}

// TestPolicyMemoryStopsEveryCommand runs a policy that would hold 1 GiB
// through each command that evaluates policies, and its Rego test through
// policy test, under --policy-memory 32MiB: each exits 2, naming the
// package (the test) that ran out of memory.
func TestPolicyMemoryStopsEveryCommand(t *testing.T) {
	dir := policyDir(t, "hog.rego", hogPolicy())
	file := filepath.Join(dir, "hog.rego")
	img := materialize(t, "dlami")
	for _, args := range [][]string{
		{"scan", img},
		{"diff", img, img},
		{"fix", img},
	} {
		code, _, stderr := runCLI(t, append(args, "--policy", dir, "--policy-memory", "32MiB")...)
		assert.Equal(t, ExitError, code, "%v", args)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		assert.Contains(t, stderr, "package amilint.rules.hog ("+file+") ran out of memory: held more than 32MiB of heap (--policy-memory)", "%v", args)
	}
	code, stdout, _ := runCLI(t, "policy", "test", dir, "--policy-memory", "32Mi")
	assert.Equal(t, ExitError, code)
	assert.Contains(t, stdout, "ERROR: data.amilint.rules.hog.test_hog ("+file+":")
	assert.Contains(t, stdout, "test data.amilint.rules.hog.test_hog ("+file+":")
	assert.Contains(t, stdout, "ran out of memory: held more than 32MiB of heap (--policy-memory)")

	code, _, stderr := runCLI(t, "scan", img, "--policy-memory", "1GB")
	assert.Equal(t, ExitError, code)
	assert.Contains(t, stderr, `size "1GB": want a whole number of bytes, KiB, MiB or GiB`)
}

// TestPolicySandboxInTheCLI: a policy calling http.send is refused before
// evaluation and the server it names sees no connection; an OPA
// capabilities file that includes it opts back in.
func TestPolicySandboxInTheCLI(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 4096)
			_, _ = c.Read(buf)
			_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"))
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
	dir := policyDir(t, "send.rego", `package amilint.rules.send

findings contains f if {
	r := http.send({"method": "GET", "url": "http://`+ln.Addr().String()+`/"})
	f := {"rule_id": "send", "severity": "low", "message": sprintf("%d", [r.status_code])}
}
`)
	code, _, stderr := runCLI(t, "scan", "--policy", dir)
	assert.Equal(t, ExitError, code)
	assert.Contains(t, stderr, filepath.Join(dir, "send.rego")+":4: built-in http.send is not allowed")
	assert.Zero(t, conns.Load(), "no connection is made")

	code, _, stderr = runCLI(t, "policy", "test", dir)
	assert.Equal(t, ExitError, code)
	assert.Contains(t, stderr, "built-in http.send is not allowed")

	b, err := json.Marshal(ast.CapabilitiesForThisVersion())
	require.NoError(t, err)
	caps := filepath.Join(t.TempDir(), "caps.json")
	require.NoError(t, os.WriteFile(caps, b, 0o644))
	code, rep, stderr := scanJSON(t, "--policy", dir, "--policy-capabilities", caps)
	require.NotEqual(t, ExitError, code, stderr)
	assert.NotNil(t, findingOf(rep, "send", ""), "the policy ran with the network")
	assert.Equal(t, int32(1), conns.Load())

	code, _, stderr = runCLI(t, "scan", "--policy-capabilities", filepath.Join(t.TempDir(), "none.json"))
	assert.Equal(t, ExitError, code)
	assert.Contains(t, stderr, "read policy capabilities")
}

// TestHugeNumbersExitTwo: numbers OPA cannot hold are refused where they
// are decoded, with one line and exit 2, never a panic: in a data file
// compared by a policy, and in a report given to `report`.
func TestHugeNumbersExitTwo(t *testing.T) {
	dir := policyDir(t, "num.rego", `package amilint.rules.num

findings contains f if {
	data.user.x > 1
	f := {"rule_id": "num", "severity": "low", "message": "big"}
}
`)
	for _, n := range []string{"1e2000000", "1e-2000000"} {
		data := filepath.Join(t.TempDir(), "data.json")
		require.NoError(t, os.WriteFile(data, []byte(`{"x": `+n+`}`), 0o644))
		code, _, stderr := runCLI(t, "scan", "--data", data, "--policy", dir)
		assert.Equal(t, ExitError, code, stderr)
		assert.Equal(t, "amilint scan: read data "+data+": at x: "+n+": number out of the range policies can hold (a float64: ±1.8e308, non-zero magnitudes from 4.9e-324)\n", stderr)
	}
	code, out, _ := runCLI(t, "scan", "-o", "json")
	require.Equal(t, ExitFindings, code)
	i := strings.Index(out, `"findings": [`)
	require.Positive(t, i)
	rep := filepath.Join(t.TempDir(), "report.json")
	require.NoError(t, os.WriteFile(rep, []byte(strings.Replace(out, `"findings": [`, `"findings": [{"rule_id": "x", "severity": "low", "message": "m", "evidence": {"n": 1e2000000}},`, 1)), 0o644))
	code, _, stderr := runCLI(t, "report", rep)
	assert.Equal(t, ExitError, code)
	assert.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
	assert.Contains(t, stderr, "1e2000000")
}

// TestLiveServePolicyTimeout: under `live --serve`, a policy that never
// ends makes each audit fail within its budget, counted in the metrics,
// while the exporter keeps answering; a broken web configuration is
// refused at start.
func TestLiveServePolicyTimeout(t *testing.T) {
	dir := policyDir(t, "forever.rego", foreverPolicy)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"live", "--serve", "127.0.0.1:0", "--collect", "cgroup", "--sample", "10ms",
			"--interval", "200ms", "--policy", dir, "--policy-timeout", budget}, &stdout, &stderr)
	}()
	addr := regexp.MustCompile(`on (127\.0\.0\.1:\d+)`)
	var base string
	require.Eventually(t, func() bool {
		m := addr.FindStringSubmatch(stderr.String())
		if m != nil {
			base = "http://" + m[1]
		}
		return m != nil
	}, 30*time.Second, 20*time.Millisecond)
	client := &http.Client{Timeout: 5 * time.Second}
	var body string
	require.Eventually(t, func() bool {
		resp, err := client.Get(base + "/metrics")
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(b)
		return strings.Contains(body, `amilint_audit_failures_total{reason="policy_timeout"} 2`)
	}, 30*time.Second, 50*time.Millisecond, "two audits ran out of time: %s", body)
	assert.Contains(t, body, "amilint_audit_success 0")
	resp, err := client.Get(base + "/readyz")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Contains(t, string(b), "package amilint.rules.forever ("+filepath.Join(dir, "forever.rego")+") ran out of time")
	cancel()
	select {
	case code := <-done:
		assert.Equal(t, ExitOK, code)
	case <-time.After(20 * time.Second):
		t.Fatal("amilint live --serve did not stop with its context")
	}

	bad := filepath.Join(t.TempDir(), "web.yml")
	require.NoError(t, os.WriteFile(bad, []byte("tls_server_config:\n  cert_file: /nonexistent.pem\n  key_file: /nonexistent.key\n"), 0o600))
	code, _, errOut := runCLI(t, "live", "--serve", "127.0.0.1:0", "--web.config.file", bad, "--collect", "cgroup")
	assert.Equal(t, ExitError, code)
	assert.Contains(t, errOut, "web config "+bad)
}

func TestListenAddr(t *testing.T) {
	for in, want := range map[string]string{
		":9847": ":9847", "10.0.0.7:9847": "10.0.0.7:9847", "fd00::12:9847": "[fd00::12]:9847",
		"[fd00::12]:9847": "[fd00::12]:9847", "localhost:9847": "localhost:9847", "junk": "junk",
	} {
		assert.Equal(t, want, listenAddr(in), in)
	}
}

// TestPolicyMemoryFlag: unset, --policy-memory leaves the budget to the
// engine (policy.AutoMemory, worked out when the policies are prepared);
// 0 is no limit; a size is itself.
func TestPolicyMemoryFlag(t *testing.T) {
	for args, want := range map[string]uint64{
		"":                     policy.AutoMemory,
		"--policy-memory=0":    0,
		"--policy-memory=64Mi": 64 << 20,
		"--policy-memory=2GiB": 2 << 30,
	} {
		var b budgetFlags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		b.register(fs)
		require.NoError(t, fs.Parse(strings.Fields(args)), args)
		var cfg audit.Config
		require.NoError(t, b.apply(&cfg), args)
		assert.Equal(t, want, cfg.PolicyMemory, args)
	}
}

// templatePolicy loops in one strings.render_template call: a thousand
// to the fourth iterations that write nothing, which no budget can
// interrupt.
const templatePolicy = `package amilint.rules.template

loops := strings.render_template("{{range .a}}{{range $.a}}{{range $.a}}{{range $.a}}{{end}}{{end}}{{end}}{{end}}", {"a": numbers.range(1, 1000)})

findings contains f if {
	f := {"rule_id": "template", "severity": "high", "message": loops}
}

test_template if loops == ""
`

// TestStuckPolicyExitsEveryCommand runs a policy stuck in a built-in call
// (a Go template that loops) through each command that evaluates
// policies, as a real process: each exits 2 policy.DefaultStuckAfter
// after its budget, with one line naming the package, although the call
// never returns.
func TestStuckPolicyExitsEveryCommand(t *testing.T) {
	dir := policyDir(t, "template.rego", templatePolicy)
	file := filepath.Join(dir, "template.rego")
	img := materialize(t, "dlami")
	for _, args := range [][]string{
		{"scan", img},
		{"diff", img, img},
		{"fix", img},
		{"policy", "test", dir},
	} {
		t.Run(args[0], func(t *testing.T) {
			t.Parallel() // each waits policy.DefaultStuckAfter
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := amilintCommand(ctx, t, append(args, "--policy", dir, "--policy-timeout", budget)...)
			if args[0] == "policy" {
				cmd = amilintCommand(ctx, t, append(args, "--policy-timeout", budget)...)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			require.NoError(t, ctx.Err(), "%v did not exit", args)
			var exit *exec.ExitError
			require.ErrorAs(t, err, &exit, "%v", args)
			assert.Equal(t, ExitError, exit.ExitCode(), "%v: %s", args, stderr.String())
			assert.Equal(t, 1, strings.Count(stderr.String(), "\n"), "one line: %q", stderr.String())
			want := "package amilint.rules.template (" + file + ") ran out of time: stopped after " + budget + " (--policy-timeout); it was still running 5s later, in a built-in call that cannot be interrupted"
			if args[0] == "policy" {
				want = "test data.amilint.rules.template.test_template (" + file + ":9) ran out of time: stopped after " + budget + " (--policy-timeout); it was still running 5s later, in a built-in call that cannot be interrupted"
			}
			assert.Contains(t, stderr.String(), want, "%v", args)
		})
	}
}

// TestStuckPolicyTestWithoutBudget: with no time budget, policy test
// waits on a test stuck in a call (OPA's own 5 s a test does not apply),
// and a signal gives it up 5 s later, naming the test.
func TestStuckPolicyTestWithoutBudget(t *testing.T) {
	t.Parallel() // it waits policy.DefaultStuckAfter and more
	dir := policyDir(t, "template.rego", templatePolicy)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := amilintCommand(ctx, t, "policy", "test", dir, "--policy-timeout", "0")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("policy test exited with no budget: %v: %s", err, stderr.String())
	case <-time.After(policy.DefaultStuckAfter + 2*time.Second):
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	select {
	case err := <-exited:
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit)
		assert.Equal(t, ExitError, exit.ExitCode(), stderr.String())
		assert.Contains(t, stderr.String(), "test data.amilint.rules.template.test_template ("+filepath.Join(dir, "template.rego")+":9) stopped: interrupt signal received; it was still running 5s later, in a built-in call that cannot be interrupted")
	case <-time.After(time.Minute):
		t.Fatal("policy test did not exit after a signal")
	}
}

// TestRunawayPolicyExits: a Go template that writes 64 GB in one call is
// given up as soon as, stopped by its budget, it holds two budgets more:
// exit 2 naming the package, the process far from the gigabytes.
func TestRunawayPolicyExits(t *testing.T) {
	dir := policyDir(t, "writes.rego", `package amilint.rules.writes

s := concat("", [x | some _ in numbers.range(1, 4096); x := "0123456789abcdef"])

out := strings.render_template("{{range .a}}{{range $.a}}{{$.s}}{{end}}{{end}}", {"a": numbers.range(1, 1000), "s": s})

findings contains f if {
	f := {"rule_id": "writes", "severity": "high", "message": sprintf("%d", [count(out)])}
}
`)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := amilintCommand(ctx, t, "scan", materialize(t, "dlami"), "--policy", dir, "--policy-memory", "16MiB", "--policy-timeout", "0")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "scan did not exit")
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, ExitError, exit.ExitCode(), stderr.String())
	assert.Contains(t, stderr.String(), "package amilint.rules.writes ("+filepath.Join(dir, "writes.rego")+") ran out of memory: held more than 16MiB of heap (--policy-memory); it went on allocating once stopped, in a built-in call that cannot be interrupted")
	ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	require.True(t, ok)
	t.Logf("peak RSS %d MiB", ru.Maxrss>>10)
	assert.Less(t, ru.Maxrss<<10, int64(1<<30), "peak RSS")
}
