package cli

import (
	"encoding/json"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit/finding"
)

// TestREADMEQuickStartIsTrue keeps the README's Quick start output and its
// JSON example in step with what `amilint scan` of the default target
// prints: the severity counts and the total.
func TestREADMEQuickStartIsTrue(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	code, out, stderr := runCLI(t, "scan", "-o", "json")
	require.Equal(t, ExitFindings, code, stderr)
	var rep finding.Report
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	code, text, _ := runCLI(t, "scan")
	require.Equal(t, ExitFindings, code)

	for _, sev := range []finding.Severity{finding.High, finding.Medium, finding.Low} {
		heading := regexp.MustCompile(`(?m)^` + strings.ToUpper(sev.String()) + ` \((\d+)\)$`)
		n := strconv.Itoa(rep.Summary.BySeverity[sev.String()])
		got := heading.FindStringSubmatch(text)
		require.NotNil(t, got, "scan text has a %s heading", sev)
		require.Equal(t, n, got[1], "scan text and JSON agree")
		// The Quick start shows the high and medium headings ("…" for the rest).
		if sev == finding.Low {
			continue
		}
		m := heading.FindSubmatch(readme)
		require.NotNil(t, m, "README Quick start shows the %s heading", sev)
		assert.Equal(t, n, string(m[1]), "README Quick start: %s count", sev)
	}
	m := regexp.MustCompile(`"summary": \{"total": (\d+)`).FindSubmatch(readme)
	require.NotNil(t, m, "README shows the JSON summary")
	assert.Equal(t, strconv.Itoa(rep.Summary.Total), string(m[1]), "README JSON example: summary.total")
	m = regexp.MustCompile(`"medium": (\d+), "high": (\d+)`).FindSubmatch(readme)
	require.NotNil(t, m)
	assert.Equal(t, strconv.Itoa(rep.Summary.BySeverity["medium"]), string(m[1]))
	assert.Equal(t, strconv.Itoa(rep.Summary.BySeverity["high"]), string(m[2]))
}
