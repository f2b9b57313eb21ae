package install

import (
	"bytes"
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/rootfs"
)

func TestFirstBoot(t *testing.T) {
	tests := []struct {
		name string
		tree fstest.MapFS
		want bool
	}{
		{"missing", fstest.MapFS{"etc/hostname": {Data: []byte("x\n")}}, true},
		{"empty", fstest.MapFS{"etc/machine-id": {Data: nil}}, true},
		{"uninitialized", fstest.MapFS{"etc/machine-id": {Data: []byte("uninitialized\n")}}, true},
		{"set", fstest.MapFS{"etc/machine-id": {Data: []byte("0123456789abcdef0123456789abcdef\n")}}, false},
		{"link to /dev/null", fstest.MapFS{"etc/machine-id": {Data: []byte("/dev/null"), Mode: fs.ModeSymlink}}, true},
		{"link to id", fstest.MapFS{
			"etc/machine-id":          {Data: []byte("../var/lib/dbus/machine-id"), Mode: fs.ModeSymlink},
			"var/lib/dbus/machine-id": {Data: []byte("0123456789abcdef0123456789abcdef\n")}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, FirstBoot(rootfs.New(tc.tree)))
		})
	}
}

func TestFnmatch(t *testing.T) {
	tests := []struct {
		pattern, name string
		want          bool
	}{
		{"*", "a.service", true},
		{"a.*", "a.service", true},
		{"a.*", "b.service", false},
		{"?.service", "a.service", true},
		{"?.service", "ab.service", false},
		{"[ab].service", "b.service", true},
		{"[!ab].service", "b.service", false},
		{"[^ab].service", "c.service", true},
		{"[a-c]*", "b.socket", true},
		{"[[:digit:]]*", "1.service", true},
		{"dev-\\x2d.device", "dev-\\x2d.device", true},
		{"[x", "[x", true},
		{"*.socket", "a.service", false},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "aXbY", false},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, fnmatch(tc.pattern, tc.name), "%q %q", tc.pattern, tc.name)
	}
}

func TestReadLines(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"a\nb\n", []string{"a", "b"}},
		{"a\r\nb", []string{"a", "b"}},
		{"a\n\rb", []string{"a", "b"}},
		{"a\n\nb", []string{"a", "", "b"}},
		{"a\x00\nb", []string{"a", "", "b"}},
		{"a\rb\r", []string{"a", "b"}},
		{"", nil},
	}
	for _, tc := range tests {
		got, err := readLines([]byte(tc.in))
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "%q", tc.in)
	}
	_, err := readLines(bytes.Repeat([]byte("x"), longLineMax))
	assert.ErrorIs(t, err, errLineTooLong)
}

func TestNameIsValid(t *testing.T) {
	tests := []struct {
		name string
		kind nameKind
		want bool
	}{
		{"a.service", namePlain, true},
		{"a@.service", nameTemplate, true},
		{"a@b.service", nameInstance, true},
		{"a@b@c.service", nameInstance, true},
		{"@a.service", nameAny, false},
		{".service", nameAny, false},
		{"a.foo", nameAny, false},
		{"a b.service", nameAny, false},
		{"dev-disk-by\\x2duuid.device", namePlain, true},
	}
	for _, tc := range tests {
		assert.Equal(t, tc.want, nameIsValid(tc.name, tc.kind), tc.name)
	}
}

// countingSource counts the reads List makes of each name.
type countingSource struct {
	rootfs.Source
	readDirs map[string]int
	reads    map[string]int
}

func (c *countingSource) ReadDir(name string) ([]fs.DirEntry, error) {
	c.readDirs[name]++
	return c.Source.ReadDir(name)
}

func (c *countingSource) Open(name string) (fs.File, error) {
	c.reads[name]++
	return c.Source.Open(name)
}

// TestListReadsEachDirectoryOnce checks the single indexed pass: however
// many units there are, every directory is listed and every file read at
// most once (systemctl rescans every .wants directory per unit).
func TestListReadsEachDirectoryOnce(t *testing.T) {
	tree, err := fixtures.Tree("dlami")
	require.NoError(t, err)
	src := &countingSource{Source: tree, readDirs: map[string]int{}, reads: map[string]int{}}
	units, err := List(rootfs.New(src))
	require.NoError(t, err)
	require.Greater(t, len(units), 100)
	for name, n := range src.readDirs {
		assert.Equal(t, 1, n, "directory %s listed %d times", name, n)
	}
	for name, n := range src.reads {
		assert.Equal(t, 1, n, "file %s read %d times", name, n)
	}
	assert.Contains(t, src.readDirs, "etc/systemd/system/multi-user.target.wants")
}
