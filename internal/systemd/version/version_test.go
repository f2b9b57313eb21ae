package version

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// tree writes files (name → content; content "->X" makes a link to X) under
// a temporary directory and returns its view.
func tree(t *testing.T, files map[string]string) *rootfs.FS {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		if target, ok := cutLink(content); ok {
			require.NoError(t, os.Symlink(target, p))
			continue
		}
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	src, err := rootfs.OpenDir(dir)
	require.NoError(t, err)
	t.Cleanup(func() { src.Close() })
	return rootfs.New(src)
}

func cutLink(s string) (string, bool) {
	if len(s) > 2 && s[:2] == "->" {
		return s[2:], true
	}
	return "", false
}

const dpkgStatus = `Package: libsystemd0
Status: install ok installed
Version: 245.4-4ubuntu3.22

Package: systemd
Status: install ok installed
Priority: important
Version: 245.4-4ubuntu3.22
Description: system and service manager
 with a continuation line

`

func TestDetect(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  Info
	}{
		{"debian 12 multiarch library", map[string]string{
			"usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-252.so": "",
			"usr/lib/x86_64-linux-gnu/systemd/libsystemd-core-252.so":   "",
			"var/lib/dpkg/status": "Package: systemd\nStatus: install ok installed\nVersion: 252.39-1~deb12u2\n",
		}, Info{Major: 252, Full: "252.39-1~deb12u2", Source: "/usr/lib/x86_64-linux-gnu/systemd/libsystemd-shared-252.so"}},
		{"ubuntu 20.04 split usr", map[string]string{
			"lib/systemd/libsystemd-shared-245.so": "",
			"var/lib/dpkg/status":                  dpkgStatus,
		}, Info{Major: 245, Full: "245.4-4ubuntu3.22", Source: "/lib/systemd/libsystemd-shared-245.so"}},
		{"fedora names the release", map[string]string{
			"usr/lib64/systemd/libsystemd-shared-254.5-2.fc39.so": "",
		}, Info{Major: 254, Full: "254.5-2.fc39", Source: "/usr/lib64/systemd/libsystemd-shared-254.5-2.fc39.so"}},
		{"newest of two libraries", map[string]string{
			"usr/lib/systemd/libsystemd-shared-249.so": "",
			"usr/lib/systemd/libsystemd-shared-255.so": "",
		}, Info{Major: 255, Source: "/usr/lib/systemd/libsystemd-shared-255.so"}},
		{"merged usr link read once", map[string]string{
			"lib": "->usr/lib",
			"usr/lib/systemd/libsystemd-shared-257.so": "",
		}, Info{Major: 257, Source: "/usr/lib/systemd/libsystemd-shared-257.so"}},
		{"dpkg only, with an epoch", map[string]string{
			"var/lib/dpkg/status": "Package: systemd\nStatus: install ok installed\nVersion: 1:249.11-0ubuntu3\n",
		}, Info{Major: 249, Full: "1:249.11-0ubuntu3", Source: "/var/lib/dpkg/status"}},
		{"dpkg: removed package left config files", map[string]string{
			"var/lib/dpkg/status": "Package: systemd\nStatus: deinstall ok config-files\nVersion: 247.3-7\n",
		}, Info{Major: Default, Source: SourceDefault}},
		{"dpkg: libsystemd-shared package", map[string]string{
			"var/lib/dpkg/status": "Package: libsystemd-shared\nStatus: install ok installed\nVersion: 257.13-1~deb13u1\n",
		}, Info{Major: 257, Full: "257.13-1~deb13u1", Source: "/var/lib/dpkg/status"}},
		{"no systemd at all", map[string]string{"etc/os-release": "ID=alpine\n"}, Info{Major: Default, Source: SourceDefault}},
		{"names that are not versions", map[string]string{
			"usr/lib/systemd/libsystemd-shared-.so":      "",
			"usr/lib/systemd/libsystemd-shared-abc.so":   "",
			"usr/lib/systemd/libsystemd-shared-99999.so": "",
			"usr/lib/systemd/libsystemd-shared-252.so.1": "",
			"var/lib/dpkg/status":                        "Package: systemd\nStatus: install ok installed\nVersion: garbage\n",
		}, Info{Major: Default, Source: SourceDefault}},
		{"library directory is a link out of the image", map[string]string{
			"usr/lib/systemd": "->/../../../../usr/lib/x86_64-linux-gnu/systemd",
		}, Info{Major: Default, Source: SourceDefault}},
		{"status is a directory", map[string]string{
			"var/lib/dpkg/status/x": "",
		}, Info{Major: Default, Source: SourceDefault}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Detect(tree(t, tc.files))
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestOverride(t *testing.T) {
	got, err := Override("257")
	require.NoError(t, err)
	assert.Equal(t, Info{Major: 257, Source: SourceOverride}, got)
	assert.True(t, got.AtLeast(254))
	assert.False(t, got.AtLeast(258))
	for _, bad := range []string{"", "x", "230", "1000", "252.1", "-252"} {
		_, err := Override(bad)
		assert.Error(t, err, bad)
	}
}

func TestString(t *testing.T) {
	assert.Equal(t, "systemd 252 (252.39-1~deb12u2) from /var/lib/dpkg/status",
		Info{Major: 252, Full: "252.39-1~deb12u2", Source: "/var/lib/dpkg/status"}.String())
	assert.Equal(t, "systemd 257 from override", Info{Major: 257, Source: SourceOverride}.String())
}

// TestDetectDebianRoots reads the versions of the two cached Debian roots,
// which are the versions their binaries report.
func TestDetectDebianRoots(t *testing.T) {
	for _, root := range testenv.DebianRoots {
		t.Run(root.Cache, func(t *testing.T) {
			dir := root.Path(t)
			src, err := rootfs.OpenDir(dir)
			require.NoError(t, err)
			defer src.Close()
			got, err := Detect(rootfs.New(src))
			require.NoError(t, err)
			assert.Equal(t, root.Systemd, got.Major)
			assert.Contains(t, got.Source, "libsystemd-shared-")
			assert.Regexp(t, `^\d+\.\d+-`, got.Full, "the dpkg version of the same build")
		})
	}
}

func FuzzDpkgStatus(f *testing.F) {
	f.Add([]byte(dpkgStatus))
	f.Add([]byte("Package: systemd\nStatus: install ok installed\nVersion: 1:\n"))
	f.Add([]byte("Package:\nVersion:\n\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// The tree is in memory: Detect reads it through the same
		// rootfs view as an image directory, without a disk write per
		// execution.
		src := fstest.MapFS{statusFile: {Data: data, Mode: 0o644}}
		got, err := Detect(rootfs.New(src))
		require.NoError(t, err)
		assert.True(t, got.Major >= 1 && got.Major <= Newest, "version %d", got.Major)
	})
}

func FuzzLibName(f *testing.F) {
	for _, s := range []string{"libsystemd-shared-252.so", "libsystemd-shared-254.5-2.fc39.so", "libsystemd-shared-.so", "libsystemd-shared-0.so"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		major, _, ok := parseLibName(name)
		if ok {
			assert.True(t, major >= 1 && major <= Newest)
		}
	})
}
