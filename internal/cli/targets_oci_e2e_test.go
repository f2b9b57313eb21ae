package cli_test

import (
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/image/oci/ocitest"
)

// layeredImage builds an image of the tree dir in three layers with the
// layer-format features (a split of the tree over two layers, then a
// whiteout of a unit and its enablement link added below, an opaque
// directory, a hard link to a file of a lower layer), and adds to dir what
// survives, so dir is the tree the image holds.
func layeredImage(t *testing.T, dir string, f ocitest.Format, platform string) v1.Image {
	t.Helper()
	wants := "etc/systemd/system/multi-user.target.wants"
	top := ocitest.DirEntries(t, dir, func(rel string) bool { return rel == "usr" || strings.HasPrefix(rel, "usr/") })
	rest := ocitest.DirEntries(t, dir, func(rel string) bool { return rel != "usr" && !strings.HasPrefix(rel, "usr/") })
	rest = append(rest,
		ocitest.Reg("etc/systemd/system/junk.service", "[Service]\nExecStart=/bin/junk\n[Install]\nWantedBy=multi-user.target\n"),
		ocitest.Dir(wants+"/"),
		ocitest.Symlink(wants+"/junk.service", "/etc/systemd/system/junk.service"),
		ocitest.Dir("opt/junk/"), ocitest.Reg("opt/junk/old.conf", "old=1\n"),
		ocitest.Reg("etc/amilint-oci-marker", "marker\n"))
	third := []ocitest.Entry{
		ocitest.Whiteout(wants, "junk.service"), ocitest.Whiteout("etc/systemd/system", "junk.service"),
		ocitest.Opaque("opt/junk"), ocitest.Reg("opt/junk/new.conf", "new=1\n"),
		ocitest.Hardlink("etc/amilint-oci-marker.hard", "etc/amilint-oci-marker"),
	}
	img := ocitest.Image(t, platform,
		ocitest.NewLayer(t, ocitest.Tar(t, top...), f),
		ocitest.NewLayer(t, ocitest.Tar(t, rest...), f),
		ocitest.NewLayer(t, ocitest.Tar(t, third...), f))
	for name, body := range map[string]string{"opt/junk/new.conf": "new=1\n", "etc/amilint-oci-marker": "marker\n", "etc/amilint-oci-marker.hard": "marker\n"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(dir, wants), 0o755))
	return img
}

// sameAsTree checks that units, scan and facts of target (given the extra
// flags) equal those of the tree dir.
func sameAsTree(t *testing.T, dir, target string, extra ...string) {
	t.Helper()
	want, wantErr, wantCode := run("units", dir, "-o", "tsv")
	got, stderr, code := run(append([]string{"units", target, "-o", "tsv"}, extra...)...)
	require.Equal(t, wantCode, code, "units %s: %s (tree: %s)", target, stderr, wantErr)
	assert.Equal(t, want, got, "units %s", target)
	wantScan, _, wantScanCode := run("scan", dir, "-o", "json", "--fail-on", "critical")
	gotScan, stderr, scanCode := run(append([]string{"scan", target, "-o", "json", "--fail-on", "critical"}, extra...)...)
	require.Equal(t, wantScanCode, scanCode, "scan %s: %s", target, stderr)
	if wantScanCode != 2 {
		assert.Equal(t, withoutTarget(t, wantScan), withoutTarget(t, gotScan), "scan %s", target)
	}
	wantFacts, _, _ := run("facts", dir)
	gotFacts, _, _ := run(append([]string{"facts", target}, extra...)...)
	assert.Equal(t, wantFacts, gotFacts, "facts %s", target)
}

func hostPlatform() string { return "linux/" + runtime.GOARCH }

// TestContainerImagesMatchTheirTree is the acceptance check of container
// image targets: for every fixture, an image of its tree in several layers
// (whiteouts, an opaque directory, a hard link across layers) gives the
// same units, scan and facts as the tree, from an OCI layout, a docker
// save archive, an OCI archive and a registry with and without
// authentication (credentials from the Docker config), in each layer
// format.
func TestContainerImagesMatchTheirTree(t *testing.T) {
	anonymous := ocitest.NewRegistry(t, "", "")
	authed := ocitest.NewRegistry(t, "ci", "hunter2")
	cfg := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte("ci:hunter2"))
	require.NoError(t, os.WriteFile(filepath.Join(cfg, "config.json"),
		[]byte(`{"auths":{"`+authed.Host+`":{"auth":"`+auth+`"}}}`), 0o600))
	t.Setenv("DOCKER_CONFIG", cfg)
	for _, name := range fixtures.Names() {
		for _, f := range []ocitest.Format{ocitest.Gzip, ocitest.Zstd, ocitest.Estargz, ocitest.ZstdChunked, ocitest.Plain} {
			if name != fixtures.Default && f != ocitest.Gzip {
				continue // every format on one fixture, every fixture in one format
			}
			t.Run(name+"/"+string(f), func(t *testing.T) {
				dir := filepath.Join(t.TempDir(), "root")
				require.NoError(t, fixtures.Materialize(name, dir))
				img := layeredImage(t, dir, f, hostPlatform())
				layout := filepath.Join(t.TempDir(), "layout")
				ocitest.WriteLayout(t, layout, []string{"v1"}, img)
				sameAsTree(t, dir, "oci:"+layout)
				sameAsTree(t, dir, "oci:"+layout+":v1")
				if name != fixtures.Default {
					return
				}
				archive := filepath.Join(t.TempDir(), "saved.tar")
				ocitest.WriteDockerArchive(t, archive, "example.com/golden:v1", img)
				sameAsTree(t, dir, archive)
				sameAsTree(t, dir, "docker-archive:"+archive+":v1")
				ociArchive := filepath.Join(t.TempDir(), "image.tar")
				ocitest.TarDir(t, layout, ociArchive)
				sameAsTree(t, dir, "oci-archive:"+ociArchive)
				anonymous.Push(t, "golden/"+strings.ReplaceAll(string(f), ":", "-")+":v1", img)
				sameAsTree(t, dir, "registry:"+anonymous.Host+"/golden/"+strings.ReplaceAll(string(f), ":", "-")+":v1")
				authed.Push(t, "golden/private:v1", img)
				sameAsTree(t, dir, "registry:"+authed.Host+"/golden/private:v1")
			})
		}
	}
}

// TestMultiArchIndex checks --platform on a multi-arch index: each image
// of it, as chosen, equals its own tree; the host's is the default.
func TestMultiArchIndex(t *testing.T) {
	trees := map[string]string{}
	var imgs []v1.Image
	for _, p := range []string{"linux/amd64", "linux/arm64"} {
		dir := filepath.Join(t.TempDir(), "root")
		require.NoError(t, fixtures.Materialize(fixtures.Default, dir))
		if p == "linux/arm64" {
			// The arm64 image enables ssh as well: the two must differ.
			require.NoError(t, os.Remove(filepath.Join(dir, "etc/systemd/system/multi-user.target.wants/ecs.service")))
		}
		trees[p] = dir
		imgs = append(imgs, layeredImage(t, dir, ocitest.Gzip, p))
	}
	r := ocitest.NewRegistry(t, "", "")
	r.Push(t, "multi:1", ocitest.Index(t, imgs...))
	layout := filepath.Join(t.TempDir(), "layout")
	ocitest.WriteLayout(t, layout, nil, ocitest.Index(t, imgs...))
	a, _, _ := run("units", trees["linux/amd64"], "-o", "tsv")
	b, _, _ := run("units", trees["linux/arm64"], "-o", "tsv")
	require.NotEqual(t, a, b)
	// diff takes container images too: the two images of the index, tagged.
	tagged := filepath.Join(t.TempDir(), "tagged")
	ocitest.WriteLayout(t, tagged, []string{"amd", "arm"}, imgs[0], imgs[1])
	want, _, wantCode := run("diff", trees["linux/amd64"], trees["linux/arm64"], "-o", "json")
	got, stderr, code := run("diff", "oci:"+tagged+":amd", "oci:"+tagged+":arm", "-o", "json")
	require.Equal(t, wantCode, code, stderr)
	assert.Contains(t, got, "ecs.service")
	assert.Equal(t, withoutTargets(t, want), withoutTargets(t, got))
	for _, target := range []string{"oci:" + layout, "registry:" + r.Host + "/multi:1"} {
		for p, dir := range trees {
			sameAsTree(t, dir, target, "--platform", p)
		}
		if tree, ok := trees[hostPlatform()]; ok {
			want, _, _ := run("units", tree, "-o", "tsv")
			got, stderr, code := run("units", target, "-o", "tsv")
			require.Equal(t, 0, code, stderr)
			assert.Equal(t, want, got, "the host's platform by default")
		}
		_, stderr, code := run("units", target, "--platform", "linux/riscv64")
		assert.Equal(t, 2, code)
		assert.Contains(t, stderr, "no image for linux/riscv64")
	}
}

// TestBootcUsrEtc checks the ostree/bootc layout: an image whose default
// /etc is /usr/etc and that has no /etc audits as the same tree with /etc,
// and its facts say which layout was read.
func TestBootcUsrEtc(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	require.NoError(t, fixtures.Materialize(fixtures.Default, dir))
	bootc := filepath.Join(t.TempDir(), "bootc")
	require.NoError(t, fixtures.Materialize(fixtures.Default, bootc))
	require.NoError(t, os.MkdirAll(filepath.Join(bootc, "usr"), 0o755))
	require.NoError(t, os.Rename(filepath.Join(bootc, "etc"), filepath.Join(bootc, "usr/etc")))
	img := ocitest.Image(t, hostPlatform(), ocitest.NewLayer(t, ocitest.Tar(t, ocitest.DirEntries(t, bootc, nil)...), ocitest.Gzip))
	r := ocitest.NewRegistry(t, "", "")
	r.Push(t, "bootc:latest", img)
	for _, target := range []string{bootc, "registry:" + r.Host + "/bootc:latest"} {
		want, _, _ := run("units", dir, "-o", "tsv")
		got, stderr, code := run("units", target, "-o", "tsv")
		require.Equal(t, 0, code, stderr)
		assert.Equal(t, want, got)
		wantScan, _, wantCode := run("scan", dir, "-o", "json", "--fail-on", "critical")
		gotScan, _, gotCode := run("scan", target, "-o", "json", "--fail-on", "critical")
		assert.Equal(t, wantCode, gotCode)
		assert.Equal(t, withoutTarget(t, wantScan), withoutTarget(t, gotScan))
		facts, _, _ := run("facts", target)
		assert.Contains(t, facts, `"etc_layout": "usr/etc"`)
	}
	facts, _, _ := run("facts", dir)
	assert.Contains(t, facts, `"etc_layout": "etc"`)
}

// TestContainerImageErrors checks the CLI contract for container images:
// a corrupt or hostile image, a refused login, a compressed archive, an
// option that means nothing, and fix are each exit 2 with a clear line.
func TestContainerImageErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "root")
	require.NoError(t, fixtures.Materialize(fixtures.Default, dir))
	img := layeredImage(t, dir, ocitest.Gzip, hostPlatform())
	layout := filepath.Join(t.TempDir(), "layout")
	ocitest.WriteLayout(t, layout, nil, img)
	bad := filepath.Join(t.TempDir(), "bad")
	ocitest.WriteLayout(t, bad, nil, img)
	ls, err := img.Layers()
	require.NoError(t, err)
	h, err := ls[1].Digest()
	require.NoError(t, err)
	blob := filepath.Join(bad, "blobs", h.Algorithm, h.Hex)
	b, err := os.ReadFile(blob)
	require.NoError(t, err)
	b[len(b)/2] ^= 1
	require.NoError(t, os.WriteFile(blob, b, 0o644))
	hostile := filepath.Join(t.TempDir(), "hostile")
	ocitest.WriteLayout(t, hostile, nil, ocitest.Image(t, hostPlatform(),
		ocitest.NewLayer(t, ocitest.Tar(t, ocitest.Reg("../../../../tmp/amilint-escape", "x")), ocitest.Gzip)))
	saved := filepath.Join(t.TempDir(), "saved.tar")
	ocitest.WriteDockerArchive(t, saved, "example.com/x:1", img)
	gz := saved + ".gz"
	require.NoError(t, os.WriteFile(gz, nil, 0o644))
	disktestGzip(t, saved, gz)
	private := ocitest.NewRegistry(t, "u", "p")
	private.Push(t, "x:1", img)
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"a layer with a bad digest", []string{"units", "oci:" + bad}, "corrupt image"},
		{"path traversal in a layer", []string{"scan", "oci:" + hostile}, "layer entry escapes the image root"},
		{"no such tag", []string{"units", "oci:" + layout + ":nope"}, `no image tagged "nope"`},
		{"no such layout", []string{"units", "oci:" + filepath.Join(t.TempDir(), "none")}, "open layout"},
		{"refused login", []string{"scan", "registry:" + private.Host + "/x:1"}, "401 Unauthorized"},
		{"a compressed docker archive", []string{"units", gz}, "decompress it first"},
		{"--platform on a directory", []string{"units", dir, "--platform", "linux/arm64"}, "option for container images only"},
		{"--partition on an image", []string{"units", "oci:" + layout, "--partition", "2"}, "option for disk images only"},
		{"fix", []string{"fix", "registry:" + private.Host + "/x:1"}, "a container image is read-only"},
		{"fix of an archive", []string{"fix", saved}, "read-only"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := run(tc.args...)
			assert.Equal(t, 2, code, "%s", out)
			assert.Contains(t, stderr, tc.msg)
			assert.Equal(t, 1, strings.Count(strings.TrimSpace(stderr), "\n")+1, "one line: %s", stderr)
		})
	}
	_, err = os.Stat("/tmp/amilint-escape")
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func disktestGzip(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	require.NoError(t, err)
	f, err := os.Create(dst)
	require.NoError(t, err)
	defer f.Close()
	zw := gzip.NewWriter(f)
	_, err = zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
}

// withoutTargets drops what names the two targets from `diff -o json`.
func withoutTargets(t *testing.T, out string) map[string]any {
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &doc), out)
	for _, k := range []string{"old", "new", "old_target", "new_target", "target"} {
		delete(doc, k)
	}
	return doc
}
