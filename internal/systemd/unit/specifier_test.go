package unit

import (
	"strings"
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

func TestExpand(t *testing.T) {
	machine := func(c byte) string { return "<" + string(c) + ">" }
	for _, tc := range []struct {
		version int
		in      string
		max     int
		want    string
		err     error
	}{
		{252, "/a/%n/%i", 100, "/a/foo@bar.service/bar", nil},
		{252, "/a%", 100, "/a%", nil},
		{252, "/a%-b%%", 100, "/a%-b%", nil},
		{252, "/%H%y", 100, "/<H><y>", nil},
		{252, "/%X", 100, "", ErrBadSpecifier},
		{252, "/%0", 100, "", ErrBadSpecifier},
		{252, "/%D", 100, "", ErrBadSpecifier},
		{257, "%D", 100, "/usr/share", nil},
		{252, "/abc", 4, "/abc", nil},
		{252, "/abcd", 4, "", ErrExpansionTooLong},
		{252, "/ab%", 4, "/ab%", nil},
		{252, "/abc%", 4, "", ErrExpansionTooLong},
		{252, "/ab%%", 4, "/ab%", nil},
		{252, "/abc%%", 4, "", ErrExpansionTooLong},
		{252, "/ab%n", 17, "/abfoo@bar.service", ErrExpansionTooLong},
		{252, "/a%n", 17, "/afoo@bar.service", nil},
	} {
		got, err := Expand(tc.version, "foo@bar.service", tc.in, tc.max, machine)
		if tc.err != nil {
			assert.ErrorIs(t, err, tc.err, "%d %q", tc.version, tc.in)
			continue
		}
		require.NoError(t, err, "%d %q", tc.version, tc.in)
		assert.Equal(t, tc.want, got, "%d %q", tc.version, tc.in)
	}
}

// An expansion stops at its bound: a megabyte of "%n" does not make a
// gigabyte.
func TestExpandBounded(t *testing.T) {
	s := "/" + strings.Repeat("%n", 1<<19)
	allocs := testing.AllocsPerRun(1, func() {
		_, err := Expand(252, strings.Repeat("a", 250)+".service", s, PathPrintfMax, nil)
		assert.ErrorIs(t, err, ErrExpansionTooLong)
	})
	assert.Less(t, allocs, 20.0)
}
