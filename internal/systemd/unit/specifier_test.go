package unit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNameSpecifier(t *testing.T) {
	const id = "dev-disk-by\\x2dlabel@var-lib\\x2dx.mount"
	for _, tc := range []struct {
		c       byte
		version int
		want    string
		ok      bool
	}{
		{'n', 252, id, true},
		{'N', 252, "dev-disk-by\\x2dlabel@var-lib\\x2dx", true},
		{'p', 252, "dev-disk-by\\x2dlabel", true},
		{'P', 252, "dev/disk/by-label", true},
		{'i', 252, "var-lib\\x2dx", true},
		{'I', 252, "var/lib-x", true},
		{'j', 252, "by\\x2dlabel", true},
		{'J', 252, "by-label", true},
		{'f', 252, "/var/lib-x", true},
		{'d', 252, "/run/credentials/" + id, true},
		{'U', 252, "0", true},
		{'D', 252, "", false},
		{'D', 257, "/usr/share", true},
		{'H', 257, "", false},
		{'%', 257, "", false},
	} {
		v, ok, err := NameSpecifier(tc.version, id, tc.c)
		require.NoError(t, err, "%%%c", tc.c)
		assert.Equal(t, tc.ok, ok, "%%%c", tc.c)
		assert.Equal(t, tc.want, v, "%%%c", tc.c)
	}
	_, ok, err := NameSpecifier(252, "a\\xzz.service", 'P')
	assert.True(t, ok)
	assert.Error(t, err, "an invalid escape")
}

func TestPathUnescape(t *testing.T) {
	for in, want := range map[string]string{"-": "/", "var-lib": "/var/lib", "a\\x2db": "/a-b"} {
		got, err := PathUnescape(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", "-var", "var-", "a\\x2"} {
		_, err := PathUnescape(bad)
		assert.Error(t, err, bad)
	}
}
