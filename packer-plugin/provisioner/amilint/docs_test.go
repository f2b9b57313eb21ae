package amilint

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestREADMEDocumentsEveryOption keeps the plugin's README table and the
// Config struct (whose field comments are the user documentation) in step.
func TestREADMEDocumentsEveryOption(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	typ := reflect.TypeOf(Config{})
	n := 0
	for i := 0; i < typ.NumField(); i++ {
		tag := typ.Field(i).Tag.Get("mapstructure")
		if tag == "" || strings.HasPrefix(tag, ",") {
			continue
		}
		n++
		assert.Contains(t, string(readme), "| `"+tag+"` |", "README documents %s", tag)
	}
	assert.Equal(t, n, strings.Count(string(readme), "\n| `"), "README documents no option the Config lacks")
}
