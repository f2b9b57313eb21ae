package target

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
)

func TestOpenFixture(t *testing.T) {
	im, err := Open(context.Background(), DefaultTarget, Options{})
	require.NoError(t, err)
	defer im.Close()
	assert.Equal(t, "fixture:dlami", im.Name)
	assert.Equal(t, "fixture", im.Kind)
	assert.Empty(t, im.Dir, "a fixture is read-only")
	target, err := im.FS.ReadLink("etc/systemd/system/multi-user.target.wants/ecs.service")
	require.NoError(t, err)
	assert.Equal(t, "/lib/systemd/system/ecs.service", target)

	for _, name := range fixtures.Names() {
		im, err := Open(context.Background(), FixturePrefix+name, Options{})
		require.NoError(t, err, name)
		_, err = im.FS.ReadDir(".")
		assert.NoError(t, err, name)
		require.NoError(t, im.Close())
	}
}

func TestOpenUnknownFixture(t *testing.T) {
	for _, spec := range []string{"fixture:", "fixture:nope", "fixture:../dlami"} {
		_, err := Open(context.Background(), spec, Options{})
		require.Error(t, err, spec)
		assert.ErrorIs(t, err, fixtures.ErrUnknown, spec)
		assert.Contains(t, err.Error(), spec)
	}
}
