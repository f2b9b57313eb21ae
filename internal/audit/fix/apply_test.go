package fix

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestApplyUndoesWhatItDidWhenAChangeFails makes the last change of a plan
// fail (a regular file stands where a mask link should go) and checks that
// the link removed and the directory created before it are back as they
// were.
func TestApplyUndoesWhatItDidWhenAChangeFails(t *testing.T) {
	dir := t.TempDir()
	etc := filepath.Join(dir, "etc/systemd/system")
	wants := filepath.Join(etc, "multi-user.target.wants")
	require.NoError(t, os.MkdirAll(wants, 0o755))
	require.NoError(t, os.Symlink("/lib/systemd/system/ecs.service", filepath.Join(wants, "ecs.service")))
	require.NoError(t, os.WriteFile(filepath.Join(etc, "motd-news.timer"), []byte("[Timer]\n"), 0o644))

	p := &Plan{Changes: []Change{
		{Op: OpUnlink, Path: "/etc/systemd/system/multi-user.target.wants/ecs.service"},
		{Op: OpRmdir, Path: "/etc/systemd/system/multi-user.target.wants"},
		{Op: OpMkdir, Path: "/etc/systemd/system/new.d"},
		{Op: OpSymlink, Path: "/etc/systemd/system/motd-news.timer", Target: "/dev/null"},
	}}
	err := Apply(dir, p)
	require.Error(t, err)
	assert.ErrorIs(t, err, fs.ErrExist)

	target, err := os.Readlink(filepath.Join(wants, "ecs.service"))
	require.NoError(t, err, "the removed link is back")
	assert.Equal(t, "/lib/systemd/system/ecs.service", target)
	_, err = os.Stat(filepath.Join(etc, "new.d"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "the created directory is gone")
	b, err := os.ReadFile(filepath.Join(etc, "motd-news.timer"))
	require.NoError(t, err)
	assert.Equal(t, "[Timer]\n", string(b), "the file in the way is untouched")
	ents, err := os.ReadDir(etc)
	require.NoError(t, err)
	assert.Len(t, ents, 2, "no temporary files are left: %v", ents)
}
