package userfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit/userfile"
)

func TestReadUpToTheBound(t *testing.T) {
	defer userfile.SetLimit(8)()
	dir := t.TempDir()
	at := filepath.Join(dir, "at")
	require.NoError(t, os.WriteFile(at, []byte("12345678"), 0o644))
	b, err := userfile.Read(at)
	require.NoError(t, err)
	assert.Equal(t, "12345678", string(b))

	over := filepath.Join(dir, "over")
	require.NoError(t, os.WriteFile(over, []byte("123456789"), 0o644))
	_, err = userfile.Read(over)
	require.ErrorIs(t, err, userfile.ErrTooLarge)
	assert.EqualError(t, err, "read "+over+": file too large: over 8B")

	_, err = userfile.Read(filepath.Join(dir, "none"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestEndlessDevice: a device that never ends (/dev/zero) is read up to the
// bound and refused; without the bound this read would not return.
func TestEndlessDevice(t *testing.T) {
	defer userfile.SetLimit(1 << 20)()
	_, err := userfile.Read("/dev/zero")
	require.ErrorIs(t, err, userfile.ErrTooLarge)
}
