package security

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTenthsFormat(t *testing.T) {
	for v, want := range map[Tenths]string{0: "0.0", 5: "0.5", 96: "9.6", 100: "10.0", 123: "12.3"} {
		assert.Equal(t, want, v.String())
		b, err := json.Marshal(v)
		require.NoError(t, err)
		assert.Equal(t, want, string(b))
	}
}
