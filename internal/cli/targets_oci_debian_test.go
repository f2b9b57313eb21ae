package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
	"github.com/amilint/amilint/internal/audit"
	"github.com/amilint/amilint/internal/audit/finding"
	"github.com/amilint/amilint/internal/image/oci/ocitest"
	"github.com/amilint/amilint/internal/image/target"
)

// TestDebianRootAsContainerImage checks a real root (the Debian 12 root,
// ~250 units, ~1 GiB) as a container image in three layers: from an OCI
// layout (zstd layers) and from a registry (eStargz layers, read by range
// through their tables of contents), units, scan and facts equal the
// directory's. The layouts are built once and kept under .cache/oci, keyed
// by the root's listing (AMILINT_OCI_CACHE moves them). It logs the bytes fetched against the image's
// size.
func TestDebianRootAsContainerImage(t *testing.T) {
	root := testenv.Bookworm.Path(t)
	cache := os.Getenv("AMILINT_OCI_CACHE")
	if cache == "" {
		cache = filepath.Join(testenv.RepoRoot(t), ".cache", "oci")
	}
	split := ocitest.ByTopDir("usr", "etc")
	zstdLayout := ocitest.CachedTreeLayout(t, root, cache, ocitest.Zstd, 3, split, hostPlatform())
	sameAsTree(t, root, "oci:"+zstdLayout)

	stargz := ocitest.CachedTreeLayout(t, root, cache, ocitest.Estargz, 3, split, hostPlatform())
	r := ocitest.NewRegistry(t, "", "")
	r.Push(t, "debian:12", ocitest.LayoutImage(t, stargz))
	ref := "registry:" + r.Host + "/debian:12"
	sameAsTree(t, root, ref)

	aud, err := audit.New(audit.Config{})
	require.NoError(t, err)
	for _, tc := range []struct{ name, target string }{{"zstd layout", "oci:" + zstdLayout}, {"eStargz registry", ref}} {
		im, err := target.Open(context.Background(), tc.target, target.Options{})
		require.NoError(t, err)
		opened := im.BytesRead()
		// What a scan reads: the model, the facts, the policies' inputs.
		_, err = aud.Audit(context.Background(), im.FS, finding.Target{Name: tc.target, Kind: im.Kind})
		require.NoError(t, err)
		t.Logf("%s: %s; %d bytes fetched to open, %d after a scan, of %d bytes in the image", tc.name, im.Detail, opened, im.BytesRead(), im.Stored)
		if tc.name == "eStargz registry" {
			assert.Less(t, im.BytesRead(), im.Stored/10, "a table-of-contents image is read by range")
		}
		im.Close()
	}
}
