package cli

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestGeneratedAt(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1764000000")
	assert.Equal(t, "2025-11-24T16:00:00Z", generatedAt())
	code, out, stderr := runCLI(t, "scan", "-o", "json")
	require.Equal(t, ExitFindings, code, stderr)
	var rep struct{ Generated string }
	require.NoError(t, json.Unmarshal([]byte(out), &rep))
	assert.Equal(t, "2025-11-24T16:00:00Z", rep.Generated, "scan stamps its report")

	t.Setenv("SOURCE_DATE_EPOCH", "")
	before := time.Now().UTC().Truncate(time.Second)
	got, err := time.Parse(time.RFC3339, generatedAt())
	require.NoError(t, err)
	assert.False(t, got.Before(before), "now, to the second: %s", got)
	assert.Equal(t, time.UTC, got.Location())
}
