package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTuneGC(t *testing.T) {
	for _, c := range []struct {
		args    []string
		gogc    string
		percent int
	}{
		{args: []string{"scan", "DIR"}, percent: gcPercent},
		{args: nil, percent: gcPercent},
		{args: []string{"live"}, percent: 100},
		{args: []string{"scan"}, gogc: "50", percent: 100},
	} {
		t.Setenv("GOGC", c.gogc)
		t.Setenv("GOMEMLIMIT", "")
		debug.SetGCPercent(100)
		tuneGC(c.args)
		assert.Equal(t, c.percent, debug.SetGCPercent(100), "%v GOGC=%q", c.args, c.gogc)
	}
}
