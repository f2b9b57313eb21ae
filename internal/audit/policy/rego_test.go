package policy

import (
	"context"
	"strings"
	"testing"

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
