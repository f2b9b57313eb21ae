package oci_test

import (
	"context"
	"crypto/rand"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/oci"
	"github.com/amilint/amilint/internal/image/oci/ocitest"
	"github.com/amilint/amilint/internal/image/rootfs"
)

var (
	reg       = ocitest.Reg
	dir       = ocitest.Dir
	whiteout  = ocitest.Whiteout
	opaque    = ocitest.Opaque
	symlink   = ocitest.Symlink
	hardlink  = ocitest.Hardlink
	keepAll   = oci.TreeOptions{Keep: func(string, int64, fs.FileMode) bool { return true }}
	allFormat = []ocitest.Format{ocitest.Plain, ocitest.Gzip, ocitest.Zstd, ocitest.Estargz, ocitest.ZstdChunked}
)

// stack is three layers with every layer-format feature: a whiteout, an
// opaque directory, a hard link across layers, a link followed in a
// parent, and a replaced file.
func stack(t testing.TB) [][]ocitest.Entry {
	return [][]ocitest.Entry{
		{dir("etc"), reg("etc/os-release", "ID=test\n"), dir("etc/systemd"), dir("etc/systemd/system"),
			reg("etc/systemd/system/a.service", "[Service]\nExecStart=/bin/a\n"),
			reg("etc/systemd/system/gone.service", "[Service]\n"),
			dir("usr"), dir("usr/lib"), symlink("lib", "usr/lib"), reg("usr/lib/data", "shared"),
			dir("opt"), dir("opt/app"), reg("opt/app/old.conf", "x=1")},
		{whiteout("etc/systemd/system", "gone.service"), opaque("opt/app"), reg("opt/app/new.conf", "x=2"),
			hardlink("usr/lib/data2", "usr/lib/data"), dir("lib/systemd"), reg("lib/systemd/b.service", "[Service]\n")},
		{reg("etc/os-release", "ID=test\nVERSION_ID=2\n"), whiteout("usr/lib", "data")},
	}
}

// stackWant is the tree stack gives.
var stackWant = map[string]string{
	"etc": "dir", "etc/os-release": "ID=test\nVERSION_ID=2\n", "etc/systemd": "dir", "etc/systemd/system": "dir",
	"etc/systemd/system/a.service": "[Service]\nExecStart=/bin/a\n",
	"usr":                          "dir", "usr/lib": "dir", "lib": "-> usr/lib", "usr/lib/data2": "shared",
	"usr/lib/systemd": "dir", "usr/lib/systemd/b.service": "[Service]\n",
	"opt": "dir", "opt/app": "dir", "opt/app/new.conf": "x=2",
}

func stackImage(t testing.TB, f ocitest.Format, platform string) v1.Image {
	var layers []ocitest.Layer
	for _, l := range stack(t) {
		layers = append(layers, ocitest.NewLayer(t, ocitest.Tar(t, l...), f))
	}
	return ocitest.Image(t, platform, layers...)
}

// listing is every entry of a tree: name → "dir", "-> target" or content;
// files of a table-of-contents layer's own index are left out.
func listing(t testing.TB, src rootfs.Source) map[string]string {
	out := map[string]string{}
	require.NoError(t, fs.WalkDir(rootfs.New(src), ".", func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		switch {
		case p == ".", p == "stargz.index.json", p == ".prefetch.landmark", p == ".no.prefetch.landmark":
		case d.IsDir():
			out[p] = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			l, err := src.ReadLink(p)
			require.NoError(t, err)
			out[p] = "-> " + l
		default:
			b, err := fs.ReadFile(src, p)
			require.NoError(t, err, p)
			out[p] = string(b)
		}
		return nil
	}))
	return out
}

func host() string { return "linux/" + runtime.GOARCH }

// TestEveryStoreAndFormat opens the same three-layer image from a layout,
// a docker-archive (both formats), an OCI archive and a registry (with and
// without authentication), in every layer format, and checks the tree.
func TestEveryStoreAndFormat(t *testing.T) {
	ctx := context.Background()
	open := map[string]func(t *testing.T, img v1.Image) *oci.Image{
		"layout": func(t *testing.T, img v1.Image) *oci.Image {
			d := t.TempDir()
			ocitest.WriteLayout(t, d, nil, img)
			im, err := oci.OpenLayout(ctx, d, "", oci.Options{Tree: keepAll})
			require.NoError(t, err)
			return im
		},
		"docker-archive": func(t *testing.T, img v1.Image) *oci.Image {
			p := filepath.Join(t.TempDir(), "img.tar")
			ocitest.WriteDockerArchive(t, p, "example.com/x:1", img)
			return openArchive(t, p, "")
		},
		"classic docker-archive": func(t *testing.T, img v1.Image) *oci.Image {
			p := filepath.Join(t.TempDir(), "img.tar")
			ocitest.WriteClassicDockerArchive(t, p, "example.com/x:1", img)
			return openArchive(t, p, "1")
		},
		"oci-archive": func(t *testing.T, img v1.Image) *oci.Image {
			d := t.TempDir()
			ocitest.WriteLayout(t, d, []string{"v1"}, img)
			p := filepath.Join(t.TempDir(), "img.tar")
			ocitest.TarDir(t, d, p)
			return openArchive(t, p, "v1")
		},
		"registry": func(t *testing.T, img v1.Image) *oci.Image {
			r := ocitest.NewRegistry(t, "", "")
			r.Push(t, "test/img:v1", img)
			im, err := oci.OpenRemote(ctx, r.Host+"/test/img:v1", oci.Options{Tree: keepAll, Keychain: authn.NewMultiKeychain()})
			require.NoError(t, err)
			return im
		},
		"registry with basic auth": func(t *testing.T, img v1.Image) *oci.Image {
			r := ocitest.NewRegistry(t, "user", "s3cret")
			r.Push(t, "test/img:v1", img)
			_, err := oci.OpenRemote(ctx, r.Host+"/test/img:v1", oci.Options{Tree: keepAll, Keychain: authn.NewMultiKeychain()})
			require.Error(t, err, "anonymous access must be refused")
			assert.Contains(t, err.Error(), "401 Unauthorized")
			im, err := oci.OpenRemote(ctx, r.Host+"/test/img:v1", oci.Options{Tree: keepAll, Keychain: basic{"user", "s3cret"}})
			require.NoError(t, err)
			return im
		},
	}
	for _, f := range allFormat {
		img := stackImage(t, f, host())
		for store, opener := range open {
			t.Run(string(f)+"/"+store, func(t *testing.T) {
				im := opener(t, img)
				assert.Equal(t, stackWant, listing(t, im.Tree))
				assert.Equal(t, 3, im.Layers)
				assert.Equal(t, host(), im.Platform)
				assert.Positive(t, im.Stored)
				assert.Positive(t, im.Fetched())
				ranged := 0
				if strings.HasPrefix(store, "registry") && (f == ocitest.Estargz || f == ocitest.ZstdChunked) {
					ranged = 3
				}
				assert.Equal(t, ranged, im.Ranged, "layers read through their table of contents")
			})
		}
	}
}

// basic is a keychain with one user for every registry.
type basic struct{ user, pass string }

func (b basic) Resolve(authn.Resource) (authn.Authenticator, error) {
	return &authn.Basic{Username: b.user, Password: b.pass}, nil
}

func openArchive(t *testing.T, p, tag string) *oci.Image {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	require.NoError(t, err)
	im, err := oci.OpenArchive(context.Background(), f, fi.Size(), tag, oci.Options{Tree: keepAll})
	require.NoError(t, err)
	return im
}

// TestDockerConfigCredentials checks the default keychain: credentials
// from a Docker config.json, and from a credential helper it names.
func TestDockerConfigCredentials(t *testing.T) {
	r := ocitest.NewRegistry(t, "robot", "t0ken")
	r.Push(t, "test/img:v1", stackImage(t, ocitest.Gzip, host()))
	for _, tc := range []struct {
		name   string
		config func(dir string) string
	}{
		{"auths", func(string) string {
			return `{"auths":{"` + r.Host + `":{"auth":"cm9ib3Q6dDBrZW4="}}}`
		}},
		{"credential helper", func(dir string) string {
			helper := filepath.Join(dir, "docker-credential-ocitest")
			script := "#!/bin/sh\nread host\n[ \"$1\" = get ] && [ \"$host\" = \"" + r.Host + "\" ] && printf '{\"Username\":\"robot\",\"Secret\":\"t0ken\"}'\n"
			require.NoError(t, os.WriteFile(helper, []byte(script), 0o755))
			t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
			return `{"credHelpers":{"` + r.Host + `":"ocitest"}}`
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(d, "config.json"), []byte(tc.config(d)), 0o600))
			t.Setenv("DOCKER_CONFIG", d)
			im, err := oci.OpenRemote(context.Background(), r.Host+"/test/img:v1", oci.Options{Tree: keepAll})
			require.NoError(t, err)
			assert.Equal(t, stackWant, listing(t, im.Tree))
		})
	}
}

// TestPlatforms checks the choice of an image in a multi-arch index: the
// host's by default, --platform's when given, a clear error for a platform
// the index does not have, and --platform checked against a single image.
func TestPlatforms(t *testing.T) {
	ctx := context.Background()
	amd := ocitest.Image(t, "linux/amd64", ocitest.NewLayer(t, ocitest.Tar(t, reg("etc/arch", "amd64")), ocitest.Gzip))
	arm := ocitest.Image(t, "linux/arm64/v8", ocitest.NewLayer(t, ocitest.Tar(t, reg("etc/arch", "arm64")), ocitest.Gzip))
	d := t.TempDir()
	ocitest.WriteLayout(t, d, []string{"multi", "single"}, ocitest.Index(t, amd, arm), arm)
	r := ocitest.NewRegistry(t, "", "")
	r.Push(t, "multi:1", ocitest.Index(t, amd, arm))
	anon := authn.NewMultiKeychain()
	for _, tc := range []struct {
		tag, platform, want, err string
	}{
		{"multi", "", runtime.GOARCH, ""},
		{"multi", "linux/arm64", "arm64", ""},
		{"multi", "linux/arm64/v8", "arm64", ""},
		{"multi", "linux/amd64", "amd64", ""},
		{"multi", "linux/s390x", "", "no image for linux/s390x (--platform) in the index; it has linux/amd64, linux/arm64/v8"},
		{"multi", "linux", "", "want os/arch"},
		{"single", "", "arm64", ""},
		{"single", "linux/amd64", "", "the image is linux/arm64/v8, not linux/amd64"},
	} {
		t.Run(tc.tag+"/"+tc.platform, func(t *testing.T) {
			for _, open := range []func() (*oci.Image, error){
				func() (*oci.Image, error) { return oci.OpenLayout(ctx, d, tc.tag, oci.Options{Platform: tc.platform}) },
				func() (*oci.Image, error) {
					if tc.tag != "multi" {
						return oci.OpenLayout(ctx, d, tc.tag, oci.Options{Platform: tc.platform})
					}
					return oci.OpenRemote(ctx, r.Host+"/multi:1", oci.Options{Platform: tc.platform, Keychain: anon})
				},
			} {
				im, err := open()
				if tc.err != "" {
					require.Error(t, err)
					assert.Contains(t, err.Error(), tc.err)
					continue
				}
				require.NoError(t, err)
				b, err := im.Tree.ReadFile("etc/arch")
				require.NoError(t, err)
				assert.Equal(t, tc.want, string(b))
			}
		})
	}
	_, err := oci.OpenLayout(ctx, d, "", oci.Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "name one as oci:DIR:TAG (tags: multi, single)")
	_, err = oci.OpenLayout(ctx, d, "nope", oci.Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `no image tagged "nope"`)
}

// TestRangedReadsFetchOnlyWhatIsRead is the eStargz acceptance check: a
// layer with a table of contents is not streamed; its footer and table
// are fetched, then only the ranges of the files read, never the large
// file nobody opens.
func TestRangedReadsFetchOnlyWhatIsRead(t *testing.T) {
	for _, f := range []ocitest.Format{ocitest.Estargz, ocitest.ZstdChunked} {
		t.Run(string(f), func(t *testing.T) {
			big := make([]byte, 8<<20)
			_, err := rand.Read(big)
			require.NoError(t, err)
			layer := ocitest.NewLayer(t, ocitest.Tar(t,
				dir("etc"), reg("etc/os-release", "ID=lazy\n"),
				ocitest.Entry{Name: "usr/bin/big", Type: '0', Mode: 0o755, Body: big},
				reg("etc/hostname", "lazyhost\n")), f)
			img := ocitest.Image(t, host(), layer)
			r := ocitest.NewRegistry(t, "", "")
			r.Push(t, "lazy:1", img)
			im, err := oci.OpenRemote(context.Background(), r.Host+"/lazy:1", oci.Options{Keychain: authn.NewMultiKeychain()})
			require.NoError(t, err)
			assert.Equal(t, 1, im.Ranged)
			opened := r.Requests()
			b, err := im.Tree.ReadFile("etc/os-release")
			require.NoError(t, err)
			assert.Equal(t, "ID=lazy\n", string(b))
			_, err = im.Tree.ReadFile("etc/os-release") // cached: no second fetch
			require.NoError(t, err)
			fi, err := im.Tree.Lstat("usr/bin/big")
			require.NoError(t, err)
			assert.Equal(t, int64(len(big)), fi.Size())
			read := r.Requests()

			size, err := layer.Size()
			require.NoError(t, err)
			digest, err := layer.Digest()
			require.NoError(t, err)
			var served int64
			for _, q := range append(opened, read...) {
				if strings.HasSuffix(q.Path, "/blobs/"+digest.String()) {
					assert.NotEmpty(t, q.Range, "blob %s fetched whole", q.Path)
				}
				served += q.Bytes
			}
			require.Len(t, read, 1, "one range request for the one file read")
			assert.Less(t, read[0].Bytes, int64(4096))
			assert.Less(t, served, size/20, "fetched %d of a %d-byte layer", served, size)
			assert.Less(t, im.Fetched(), size/20)
			t.Logf("%s: fetched %d bytes of a %d-byte image (%d-byte layer)", f, im.Fetched(), im.Stored, size)
		})
	}
}

// TestRangedFallsBackWithoutRanges checks that a registry that ignores
// Range headers gets the layer streamed whole, still verified.
func TestRangedFallsBackWithoutRanges(t *testing.T) {
	r := ocitest.NewRegistry(t, "", "")
	r.Push(t, "x:1", stackImage(t, ocitest.Estargz, host()))
	r.Hook(func(w http.ResponseWriter, req *http.Request) bool {
		req.Header.Del("Range")
		return false
	})
	im, err := oci.OpenRemote(context.Background(), r.Host+"/x:1", oci.Options{Tree: keepAll, Keychain: authn.NewMultiKeychain()})
	require.NoError(t, err)
	assert.Equal(t, 0, im.Ranged)
	assert.Equal(t, stackWant, listing(t, im.Tree))
}
