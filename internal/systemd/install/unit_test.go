package install

import (
	"bytes"
	"io/fs"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/image/rootfs"
)

func TestFirstBoot(t *testing.T) {
	tests := []struct {
		name string
		tree fstest.MapFS
		want bool
	}{
		{"missing", fstest.MapFS{"etc/hostname": {Data: []byte("x\n")}}, true},
		{"empty: not a first boot, machine-id(5)", fstest.MapFS{"etc/machine-id": {Data: nil}}, false},
		{"uninitialized", fstest.MapFS{"etc/machine-id": {Data: []byte("uninitialized\n")}}, true},
		{"set", fstest.MapFS{"etc/machine-id": {Data: []byte("0123456789abcdef0123456789abcdef\n")}}, false},
		{"link to /dev/null reads empty: not a first boot", fstest.MapFS{"etc/machine-id": {Data: []byte("/dev/null"), Mode: fs.ModeSymlink}}, false},
		{"dangling link", fstest.MapFS{"etc/machine-id": {Data: []byte("/var/lib/dbus/machine-id"), Mode: fs.ModeSymlink}}, true},
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
	units, err := List(rootfs.New(src), 0)
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

// TestLoaderDropIns pins the drop-in search of systemd's unit loader
// (dropin.c): name, template and dash-prefix directories per search
// directory, then aliases, then the type directory; files in name order,
// the first directory in that order winning for a file name.
func TestLoaderDropIns(t *testing.T) {
	const l, e = "lib/systemd/system/", "etc/systemd/system/"
	file := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	link := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s), Mode: fs.ModeSymlink} }
	tree := fstest.MapFS{
		l + "foo-bar-baz.service":             file("[Unit]\n"),
		l + "foo-bar-baz.service.d/20-a.conf": file("[Unit]\n"),
		e + "foo-bar-.service.d/10-b.conf":    file("[Unit]\n"),
		l + "foo-.service.d/30-c.conf":        file("[Unit]\n"),
		e + "service.d/20-a.conf":             file("[Unit]\n"),
		e + "service.d/50-e.conf":             file("[Unit]\n"),
		l + "al.service":                      link("foo-bar-baz.service"),
		l + "al.service.d/40-d.conf":          file("[Unit]\n"),
		l + "x-y@.service":                    file("[Unit]\n"),
		l + "x-y@.service.d/a.conf":           file("[Unit]\n"),
		l + "x-@.service.d/b.conf":            file("[Unit]\n"),
		l + "x-@i.service.d/c.conf":           file("[Unit]\n"),
		e + "x-y@i.service":                   link("/lib/systemd/system/x-y@.service"),
	}
	units, err := List(rootfs.New(tree), 0)
	require.NoError(t, err)
	got := map[string][]string{}
	for _, u := range units {
		got[u.Name] = u.DropIns
	}
	main := []string{
		"/etc/systemd/system/foo-bar-.service.d/10-b.conf",
		"/lib/systemd/system/foo-bar-baz.service.d/20-a.conf",
		"/lib/systemd/system/foo-.service.d/30-c.conf",
		"/lib/systemd/system/al.service.d/40-d.conf",
		"/etc/systemd/system/service.d/50-e.conf",
	}
	assert.Equal(t, main, got["foo-bar-baz.service"])
	assert.Equal(t, main, got["al.service"])
	assert.Equal(t, []string{
		"/etc/systemd/system/service.d/20-a.conf",
		"/etc/systemd/system/service.d/50-e.conf",
		"/lib/systemd/system/x-y@.service.d/a.conf",
		"/lib/systemd/system/x-@.service.d/b.conf",
		"/lib/systemd/system/x-@i.service.d/c.conf",
	}, got["x-y@i.service"])
}

// TestParseLongContinuationAllocatesLinearly reads a continuation of 50,000
// one-byte lines. Building a new string of the continuation every line
// allocated 2.5 GB for these 100 KB (a 1 MiB continuation, which systemd
// accepts, took minutes); growing it in place allocates about its length.
func TestParseLongContinuationAllocatesLinearly(t *testing.T) {
	const n = 50000
	data := []byte("[Install]\nWantedBy=a.target" + strings.Repeat("\\\n", n) + "b.target\\\n\\\\\\\n c.target\n")
	info := &installInfo{name: "x.service"}
	p := parser{info: info, spec: &specifiers{}}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := p.parse(data)
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	assert.Equal(t, []string{"a.target", "b.target", "\\\\", "c.target"}, info.wantedBy)
	alloc := after.TotalAlloc - before.TotalAlloc
	assert.Less(t, alloc, uint64(64*len(data)), "parsing %d bytes allocated %d", len(data), alloc)
}
