package policy

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit/finding"
)

// forever never ends in any budget a test has: 27e9 iterations.
const forever = `package amilint.rules.forever

findings contains f if {
	n := count([1 | some i in numbers.range(1, 3000); some j in numbers.range(1, 3000); some k in numbers.range(1, 3000)])
	f := {"rule_id": "forever", "severity": "high", "message": sprintf("%d", [n])}
}
`

// TestTimeoutStopsAPolicyAndNamesIt evaluates a policy that never ends
// under a small budget: the evaluation stops with a TimeoutError naming
// the package and its file, and the engine evaluates again afterwards.
func TestTimeoutStopsAPolicyAndNamesIt(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "p/forever.rego", forever)
	e, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "p")}, Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	// The guard only keeps a broken budget from hanging the test.
	guard, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for range 2 {
		_, err = e.Evaluate(guard, map[string]any{})
		require.Error(t, err)
		require.NoError(t, guard.Err(), "the budget, not the guard, stopped it")
		assert.ErrorIs(t, err, ErrTimeout)
		var te *TimeoutError
		require.ErrorAs(t, err, &te)
		assert.Equal(t, "package amilint.rules.forever", te.Package)
		assert.Equal(t, []string{file}, te.Files)
		assert.Contains(t, err.Error(), "package amilint.rules.forever ("+file+") ran out of time: stopped after 200ms")
	}
}

// TestTimeoutOfAQuery names the family of a one-family query (the live
// audit's) and says "query" for any other.
func TestTimeoutOfAQuery(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "p/forever.rego", forever)
	for query, want := range map[string]string{
		"data.amilint.rules.forever.findings":                 "package amilint.rules.forever",
		`{f | some f in data.amilint.rules.forever.findings}`: "query {f | some f in data.amilint.rules.forever.findings}",
	} {
		e, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "p")}, Query: query, Timeout: 100 * time.Millisecond})
		require.NoError(t, err)
		_, err = e.Evaluate(context.Background(), map[string]any{})
		var te *TimeoutError
		require.ErrorAs(t, err, &te, query)
		assert.Equal(t, want, te.Package)
	}
}

// TestCancelIsNotATimeout: a caller's cancellation is reported as such,
// not as the policy running out of time.
func TestCancelIsNotATimeout(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "p/forever.rego", forever)
	e, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "p")}, Timeout: time.Hour})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = e.Evaluate(ctx, map[string]any{})
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrTimeout)
}

// TestMarkedQueryKeepsTheFindings: the entry point evaluated family by
// family gives what data.amilint.findings gives, findings a user package
// adds to package amilint itself included.
func TestMarkedQueryKeepsTheFindings(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "p/a.rego", `package amilint.rules.a

findings contains {"rule_id": "a", "severity": "low", "message": "from a"}
`)
	write(t, dir, "p/top.rego", `package amilint

findings contains {"rule_id": "top", "severity": "low", "message": "from package amilint"}
`)
	write(t, dir, "p/odd.rego", `package amilint.rules["odd-name"]

findings contains {"rule_id": "odd", "severity": "low", "message": "from a quoted package"}
`)
	e, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "p")}})
	require.NoError(t, err)
	fs, err := e.Evaluate(context.Background(), map[string]any{})
	require.NoError(t, err)
	var ids []string
	for _, f := range fs {
		ids = append(ids, f.RuleID)
	}
	assert.Equal(t, []string{"a", "odd", "top"}, ids)
}

// TestMarkedQueryForms: a family whose findings are contains rules alone
// is counted directly (cheaper to compile), any other through a
// comprehension; either way a family with no findings, or none defined,
// leaves the query defined and the other families' findings in it.
func TestMarkedQueryForms(t *testing.T) {
	const other = `package amilint.rules.other

findings contains {"rule_id": "other", "severity": "low", "message": "m"}
`
	for _, c := range []struct {
		name, src string
		direct    bool
	}{
		{"contains, none found", `findings contains {"rule_id": "x", "message": "m"} if input.never`, true},
		{"contains, two rules", "findings contains {\"rule_id\": \"x\", \"message\": \"m\"} if input.never\n\nfindings contains {\"rule_id\": \"y\", \"message\": \"m\"} if input.never", true},
		{"complete, undefined", `findings := {{"rule_id": "x", "message": "m"}} if input.never`, false},
		{"complete, defined", `findings := {{"rule_id": "x", "severity": "low", "message": "m"}}`, false},
		{"partial object", `findings[k] := {"rule_id": k, "severity": "low", "message": "m"} if some k in {"x"}`, false},
		{"deeper contains", `findings.sub contains {"rule_id": "x", "severity": "low", "message": "m"}`, false},
		{"no findings rule", `helper := 1`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			write(t, dir, "p/other.rego", other)
			write(t, dir, "p/x.rego", "package amilint.rules.x\n\n"+c.src+"\n")
			p, err := Load(Config{PolicyDirs: []string{filepath.Join(dir, "p")}})
			require.NoError(t, err)
			q, _ := markedQuery("", nil, p.compiler)
			assert.Equal(t, c.direct, strings.Contains(q, "count(data.amilint.rules.x.findings)"), q)
			assert.Contains(t, q, "count(data.amilint.rules.other.findings)")
			e, err := p.Engine(context.Background(), Config{})
			require.NoError(t, err)
			fs, err := e.Evaluate(context.Background(), map[string]any{})
			plain, perr := p.Engine(context.Background(), Config{Query: EntryPoint})
			require.NoError(t, perr)
			want, wantErr := plain.Evaluate(context.Background(), map[string]any{})
			if wantErr != nil { // findings that are no set of findings
				require.Error(t, err)
				assert.Equal(t, wantErr.Error(), err.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, want, fs)
			assert.True(t, slices.ContainsFunc(fs, func(f finding.Finding) bool { return f.RuleID == "other" }))
		})
	}
}

// countingListener counts the connections a test server accepts.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

func serveCounting(t *testing.T) (*countingListener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cl := &countingListener{Listener: ln}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"secret": 1}`))
	}),
		ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(cl) }()
	t.Cleanup(func() { _ = srv.Close() })
	return cl, "http://" + ln.Addr().String() + "/"
}

// TestSandboxRefusesNetworkAndEnvironment compiles policies calling the
// sandboxed built-ins: each is refused before anything is evaluated,
// naming the built-in and its file and line, and the server a policy
// names is never contacted.
func TestSandboxRefusesNetworkAndEnvironment(t *testing.T) {
	ln, url := serveCounting(t)
	for name, body := range map[string]string{
		"http.send":          `r := http.send({"method": "GET", "url": "` + url + `"})`,
		"http.send relation": `http.send({"method": "GET", "url": "` + url + `"}, r)`,
		"net.lookup_ip_addr": `r := net.lookup_ip_addr("localhost")`,
		"opa.runtime":        `r := opa.runtime().env`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			file := write(t, dir, "p/p.rego", "package amilint.rules.p\n\nfindings contains f if {\n\t"+body+"\n\tf := {\"rule_id\": \"p\", \"severity\": \"high\", \"message\": sprintf(\"%v\", [r])}\n}\n")
			_, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "p")}})
			require.Error(t, err)
			bi := name
			if bi == "http.send relation" {
				bi = "http.send"
			}
			assert.Contains(t, err.Error(), file+":4: built-in "+bi+" is not allowed")
			assert.Contains(t, err.Error(), "--policy-capabilities")
		})
	}
	assert.Zero(t, ln.n.Load(), "no connection was made")
}

// TestCapabilitiesFileOptsBackIn: with OPA's own capabilities of this
// version (http.send included) the same policy compiles and its request
// is made; a capabilities file without a built-in the policy calls is
// refused the same way.
func TestCapabilitiesFileOptsBackIn(t *testing.T) {
	ln, url := serveCounting(t)
	dir := t.TempDir()
	write(t, dir, "p/p.rego", `package amilint.rules.p

findings contains f if {
	r := http.send({"method": "GET", "url": "`+url+`"})
	f := {"rule_id": "p", "severity": "high", "message": sprintf("%v", [r.body.secret])}
}
`)
	b, err := json.Marshal(ast.CapabilitiesForThisVersion())
	require.NoError(t, err)
	capsFile := write(t, dir, "caps.json", string(b))
	caps, err := LoadCapabilities(capsFile)
	require.NoError(t, err)
	e, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "p")}, Capabilities: caps})
	require.NoError(t, err)
	fs, err := e.Evaluate(context.Background(), map[string]any{})
	require.NoError(t, err)
	require.Len(t, fs, 1)
	assert.Equal(t, "1", fs[0].Message)
	assert.Equal(t, int32(1), ln.n.Load())

	// A file that leaves out sprintf refuses the policy calling it.
	caps.Builtins = deleteBuiltin(caps.Builtins, "sprintf")
	_, err = New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "p")}, Capabilities: caps})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "built-in sprintf is not allowed: it is not in the policy capabilities")

	_, err = LoadCapabilities(filepath.Join(dir, "missing.json"))
	assert.ErrorIs(t, err, os.ErrNotExist)
	_, err = LoadCapabilities(write(t, dir, "bad.json", "{"))
	assert.ErrorContains(t, err, "read policy capabilities")
}

func deleteBuiltin(bs []*ast.Builtin, name string) []*ast.Builtin {
	var out []*ast.Builtin
	for _, b := range bs {
		if b.Name != name {
			out = append(out, b)
		}
	}
	return out
}

// TestSandboxKeepsOwnFunctions: a policy's own function or import that
// shares a built-in's first name is not a built-in call.
func TestSandboxKeepsOwnFunctions(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "p/lib.rego", `package http

send(x) := x
`)
	write(t, dir, "p/p.rego", `package amilint.rules.p

import data.http

findings contains f if {
	r := http.send("via an import")
	f := {"rule_id": "p", "severity": "high", "message": r}
}
`)
	e, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "p")}})
	require.NoError(t, err)
	fs, err := e.Evaluate(context.Background(), map[string]any{})
	require.NoError(t, err)
	require.Len(t, fs, 1)
	assert.Equal(t, "via an import", fs[0].Message)
}

// TestMarkIsReserved: policies cannot call the mark built-in, so no
// policy can make a timeout blame another package.
func TestMarkIsReserved(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "p/p.rego", `package amilint.rules.p

findings contains f if {
	amilint.evaluating("package amilint.rules.other")
	f := {"rule_id": "p", "severity": "high", "message": "m"}
}
`)
	_, err := New(context.Background(), Config{PolicyDirs: []string{filepath.Join(dir, "p")}})
	assert.ErrorContains(t, err, "amilint.evaluating is amilint's own")
}
