package ostree_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/ostree"
	"github.com/amilint/amilint/internal/image/rootfs"
)

func tree(t *testing.T, files map[string]string, links map[string]string) rootfs.Source {
	d := t.TempDir()
	for n, body := range files {
		p := filepath.Join(d, n)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	}
	for n, target := range links {
		p := filepath.Join(d, n)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.Symlink(target, p))
	}
	src, err := rootfs.OpenDir(d)
	require.NoError(t, err)
	t.Cleanup(func() { src.Close() })
	return src
}

func TestUsrEtcServedAsEtc(t *testing.T) {
	src := tree(t, map[string]string{
		"usr/etc/os-release":                                   "ID=fedora\n",
		"usr/etc/systemd/system/a.service":                     "[Service]\n",
		"usr/lib/systemd/system/b.service":                     "[Service]\n",
		"usr/etc/systemd/system/multi-user.target.wants/.keep": "",
	}, map[string]string{
		"usr/etc/systemd/system/multi-user.target.wants/b.service": "/etc/systemd/system/a.service",
	})
	v, ok := ostree.View(src)
	require.True(t, ok)
	view := rootfs.New(v)
	assert.Equal(t, ostree.LayoutUsrEtc, ostree.Layout(view))
	b, err := view.ReadFile("etc/os-release")
	require.NoError(t, err)
	assert.Equal(t, "ID=fedora\n", string(b))
	fi, err := view.Stat("etc")
	require.NoError(t, err)
	assert.True(t, fi.IsDir())
	assert.Equal(t, "etc", fi.Name())
	list, err := view.ReadDir(".")
	require.NoError(t, err)
	var names []string
	for _, e := range list {
		names = append(names, e.Name())
	}
	assert.Equal(t, []string{"etc", "usr"}, names)
	// An absolute link under /etc resolves through the view too.
	b, err = view.ReadFile("etc/systemd/system/multi-user.target.wants/b.service")
	require.NoError(t, err)
	assert.Equal(t, "[Service]\n", string(b))
	_, err = view.ReadFile("etc/nothing")
	var pe *fs.PathError
	require.ErrorAs(t, err, &pe)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	require.NoError(t, fstest.TestFS(view, "etc/os-release", "etc/systemd/system/a.service", "usr/etc/os-release"))
}

func TestRootsWithEtcAreLeftAlone(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		links map[string]string
		want  string
	}{
		{"etc and usr/etc", map[string]string{"etc/os-release": "a", "usr/etc/os-release": "b"}, nil, ostree.LayoutEtc},
		{"etc a link", map[string]string{"usr/etc/os-release": "b"}, map[string]string{"etc": "usr/etc"}, ostree.LayoutEtc},
		{"neither", map[string]string{"usr/lib/os-release": "c"}, nil, ostree.LayoutNone},
		{"usr/etc a file", map[string]string{"usr/etc": "x"}, nil, ostree.LayoutNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := tree(t, tc.files, tc.links)
			v, ok := ostree.View(src)
			assert.False(t, ok)
			assert.Equal(t, src, v)
			assert.Equal(t, tc.want, ostree.Layout(rootfs.New(v)))
		})
	}
}
