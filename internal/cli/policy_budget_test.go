package cli

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const foreverPolicy = `package amilint.rules.forever

findings contains f if {
	n := count([1 | some i in numbers.range(1, 3000); some j in numbers.range(1, 3000); some k in numbers.range(1, 3000)])
	f := {"rule_id": "forever", "severity": "high", "message": sprintf("%d", [n])}
}
`

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
		code, _, stderr := runCLI(t, append(args, "--policy", dir, "--policy-timeout", "300ms")...)
		assert.Equal(t, ExitError, code, "%v", args)
		assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
		assert.Contains(t, stderr, "package amilint.rules.forever ("+filepath.Join(dir, "forever.rego")+") ran out of time: stopped after 300ms (--policy-timeout)", "%v", args)
	}
	code, _, stderr := runCLI(t, "scan", img, "--policy-timeout", "-1s")
	assert.Equal(t, ExitError, code)
	assert.Contains(t, stderr, "--policy-timeout -1s: want 0 (no limit) or more")
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
