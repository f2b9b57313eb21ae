//go:build !amilint_guest

package policy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-policy-agent/opa/v1/topdown"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEmbeddedRegoTests runs every shipped _test.rego in-process with OPA's
// tester: each rule family's positive and negative cases.
func TestEmbeddedRegoTests(t *testing.T) {
	all, err := DefaultModules(true)
	require.NoError(t, err)
	var tests []Module
	families := map[string]bool{}
	for _, m := range all {
		if isTest(m.Name) {
			tests = append(tests, m)
		} else if strings.Contains(m.Name, "/rules/") {
			families[m.Name] = true
		}
	}
	require.NotEmpty(t, tests)
	// Every rule family ships a test file.
	for f := range families {
		assert.Contains(t, namesOf(tests), strings.TrimSuffix(f, ".rego")+"_test.rego")
	}
	res, err := RunTests(context.Background(), tests, Config{})
	require.NoError(t, err)
	for _, r := range res {
		t.Run(r.Name, func(t *testing.T) {
			assert.True(t, r.Pass, "%s at %s: fail=%v err=%v\n%s", r.Name, r.Location, r.Fail, r.Err, r.Output)
		})
	}
}

func namesOf(ms []Module) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return out
}

// TestTestsAreSandboxedAndBounded: Rego unit tests run under the same
// capabilities, and a test that never ends fails with the budget.
func TestTestsAreSandboxedAndBounded(t *testing.T) {
	_, err := RunTests(context.Background(), []Module{{Name: "net_test.rego", Source: `package net_test

test_send if http.send({"method": "GET", "url": "http://127.0.0.1:1/"})
`}}, Config{})
	assert.ErrorContains(t, err, "net_test.rego:3: built-in http.send is not allowed")

	res, err := RunTests(context.Background(), []Module{{Name: "slow_test.rego", Source: `package slow_test

test_forever if count([1 | some i in numbers.range(1, 3000); some j in numbers.range(1, 3000); some k in numbers.range(1, 3000)]) > 0
`}}, Config{Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	require.Len(t, res, 1)
	assert.False(t, res[0].Pass)
	// Stopped by the budget: the tester's deadline, or the cancellation
	// OPA reports from inside the built-in that was running.
	assert.True(t, errors.Is(res[0].Err, context.DeadlineExceeded) || topdown.IsCancel(res[0].Err), "%v", res[0].Err)
}

// TestMemoryNamesTheTestThatTookIt: of a test holding 1 GiB and a slow
// one holding little, policy tests under a budget name the first, in
// whichever order the tester takes them (it runs tests side by side
// unless a budget is set).
func TestMemoryNamesTheTestThatTookIt(t *testing.T) {
	hog := strings.Replace(doubling(), "package amilint.rules.hog", "package hog_test", 1) +
		"\ntest_hog if count(findings) > 0\n"
	slow := `package slow_test

test_slow if {
	every i in numbers.range(1, 1000) {
		every j in numbers.range(1, 500) {
			i + j > 0
		}
	}
}
`
	for range 3 {
		res, err := RunTests(context.Background(), []Module{{Name: "hog_test.rego", Source: hog}, {Name: "slow_test.rego", Source: slow}}, Config{Memory: 32 << 20})
		require.NoError(t, err)
		var named []string
		for _, r := range res {
			var me *MemoryError
			if errors.As(r.Err, &me) {
				named = append(named, me.Package)
			}
		}
		assert.Equal(t, []string{"test data.hog_test.test_hog"}, named, "%+v", res)
	}
}

// TestPendingTestsAreNamed: what policy test names when it gives a run
// up: the tests the filter selected that have no result yet, and where.
func TestPendingTestsAreNamed(t *testing.T) {
	mods, err := ParseModules([]Module{{Name: "a.rego", Source: "package p\n\ntest_a if true\n\ntest_b if true\n\nnot_a_test if true\n"}, {Name: "b.rego", Source: "package q\n\ntest_c if true\n"}})
	require.NoError(t, err)
	pending := testsOf(mods, "")
	assert.Equal(t, map[string]string{"data.p.test_a": "a.rego:3", "data.p.test_b": "a.rego:5", "data.q.test_c": "b.rego:3"}, pending)
	assert.Equal(t, map[string]string{"data.q.test_c": "b.rego:3"}, testsOf(mods, "q\\."))
	which, files := pendingTests(pending)
	assert.Equal(t, "one of the tests data.p.test_a, data.p.test_b, data.q.test_c", which)
	assert.Equal(t, []string{"a.rego:3", "a.rego:5", "b.rego:3"}, files)
	delete(pending, "data.p.test_a")
	delete(pending, "data.q.test_c")
	which, files = pendingTests(pending)
	assert.Equal(t, "test data.p.test_b", which)
	assert.Equal(t, []string{"a.rego:5"}, files)
	many := map[string]string{}
	for i := range 7 {
		many[fmt.Sprintf("data.p.test_%d", i)] = "a.rego"
	}
	which, files = pendingTests(many)
	assert.Equal(t, "one of the tests data.p.test_0, data.p.test_1, data.p.test_2, data.p.test_3, data.p.test_4 and 2 more", which)
	assert.Len(t, files, 5)
}

// TestPendingTestsAreTheRunnersTests: the tests testsOf finds are the
// tests OPA's runner reports, by the same names, whatever their form.
func TestPendingTestsAreTheRunnersTests(t *testing.T) {
	src := "package p\n\ntest_a if true\n\na.test_b if true\n\ntodo_test_c if true\n\nnot_a_test if true\n"
	res, err := RunTests(context.Background(), []Module{{Name: "p.rego", Source: src}}, Config{})
	require.NoError(t, err)
	mods, err := ParseModules([]Module{{Name: "p.rego", Source: src}})
	require.NoError(t, err)
	found := testsOf(mods, "")
	var reported []string
	for _, r := range res {
		reported = append(reported, r.Name)
	}
	assert.ElementsMatch(t, slices.Collect(maps.Keys(found)), reported)
}
