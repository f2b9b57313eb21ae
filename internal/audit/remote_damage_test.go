//go:build !amilint_guest

package audit_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/image/disktest"
	"github.com/amilint/amilint/internal/image/fs/ext4"
	"github.com/amilint/amilint/internal/image/target"
)

// TestRemoteReadsNothingMore: a remote view of an image is audited as a
// local view of it is, damage included: what the remote model reads
// ahead, it reads only where the local one reads too. Here etc/rc3.d is
// damaged in an image without systemd-sysv-generator, which the local
// model never lists.
func TestRemoteReadsNothingMore(t *testing.T) {
	dir := disktest.Tree(t)
	for _, d := range []string{"etc/init.d", "etc/rc3.d"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/init.d/foo"), []byte("#!/bin/sh\n"), 0o755))
	require.NoError(t, os.Symlink("../init.d/foo", filepath.Join(dir, "etc/rc3.d/S01foo")))
	img := disktest.Ext4(t, dir, "8M")
	disktest.DamageBlock(t, img, "/etc/rc3.d")
	im, err := target.Open(context.Background(), img, target.Options{})
	require.NoError(t, err)
	_, err = im.FS.ReadDir("etc/rc3.d")
	require.ErrorIs(t, err, ext4.ErrCorrupt, "etc/rc3.d is damaged, for any reader that lists it")
	require.NoError(t, im.Close())

	a, err := audit.New(audit.Config{})
	require.NoError(t, err)
	for _, allow := range []bool{false, true} {
		audit := func(remote bool) (string, []string) {
			im, err := target.Open(context.Background(), img, target.Options{AllowCorrupt: allow})
			require.NoError(t, err)
			defer im.Close()
			fsys := im.FS
			if remote {
				fsys = fsys.Remote()
			}
			_, _, err = a.Document(fsys, img)
			msg := ""
			if err != nil {
				msg = err.Error()
			}
			return msg, im.Corruption()
		}
		localErr, localLines := audit(false)
		remoteErr, remoteLines := audit(true)
		assert.Equal(t, localErr, remoteErr, "allow corrupt %v", allow)
		assert.Equal(t, localLines, remoteLines, "allow corrupt %v", allow)
	}
}
