package target

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/disktest"
)

// TestDiskOptionsRefused checks that --partition and --backing are refused,
// naming the option and the target's kind, for every target that is not a
// disk image, where ignoring them would audit something else than asked;
// without them each target opens.
func TestDiskOptionsRefused(t *testing.T) {
	dir := disktest.Tree(t)
	tarball := filepath.Join(t.TempDir(), "root.tar.gz")
	disktest.Run(t, "tar", "-czf", tarball, "-C", dir, ".")
	stdin := func() *os.File {
		f, err := os.Open(tarball)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		return f
	}
	for _, tt := range []struct {
		name, spec, kind string
	}{
		{"directory", dir, "a directory"},
		{"tarball", tarball, "a tarball"},
		{"standard input", StdinTarget, "a tarball on standard input"},
		{"fixture", "fixture:hardened", "an embedded fixture"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, o := range []struct {
				opt  Options
				want string
			}{
				{Options{Partition: 2}, "--partition 2"},
				{Options{Backing: "base.qcow2"}, "--backing base.qcow2"},
				{Options{Partition: 1, Backing: "base.vhd"}, "--partition 1, --backing base.vhd"},
			} {
				o.opt.Stdin = stdin()
				_, err := Open(context.Background(), tt.spec, o.opt)
				require.ErrorIs(t, err, ErrDiskOption)
				assert.Equal(t, "open target "+tt.spec+": "+o.want+": option for disk images only (this target is "+tt.kind+")", err.Error())
				assert.NotContains(t, err.Error(), "\n")
			}
			im, err := Open(context.Background(), tt.spec, Options{Stdin: stdin()})
			require.NoError(t, err)
			require.NoError(t, im.Close())
		})
	}
}
