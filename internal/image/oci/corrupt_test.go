package oci_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/internal/image/netguard"
	"github.com/amilint/amilint/internal/image/oci"
	"github.com/amilint/amilint/internal/image/oci/ocitest"
)

// layoutOf writes img as a layout and returns its directory.
func layoutOf(t *testing.T, img v1.Image) string {
	d := t.TempDir()
	ocitest.WriteLayout(t, d, nil, img)
	return d
}

func blobPath(d string, h v1.Hash) string { return filepath.Join(d, "blobs", h.Algorithm, h.Hex) }

func gz(t *testing.T, b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return out.Bytes()
}

// imageWithDiffID builds an image of one layer of raw bytes b whose
// configuration records diffID.
func imageWithDiffID(t *testing.T, b []byte, diffID v1.Hash) v1.Image {
	img := ocitest.Image(t, host(), ocitest.Layer{Layer: static.NewLayer(b, types.OCILayer)})
	cfg, err := img.ConfigFile()
	require.NoError(t, err)
	cfg = cfg.DeepCopy()
	cfg.RootFS.DiffIDs = []v1.Hash{diffID}
	img, err = mutate.ConfigFile(img, cfg)
	require.NoError(t, err)
	return img
}

func sha(b []byte) v1.Hash {
	h, _, _ := v1.SHA256(bytes.NewReader(b))
	return h
}

// TestCorruptAndHostileImages checks that every kind of damage or attack
// is a clear error wrapping ErrCorrupt, ErrHostile or ErrTooLarge, never a
// tree.
func TestCorruptAndHostileImages(t *testing.T) {
	ctx := context.Background()
	good := stackImage(t, ocitest.Gzip, host())
	goodTar := ocitest.Tar(t, reg("etc/os-release", "ID=x\n"))
	for _, tc := range []struct {
		name string
		dir  func(t *testing.T) string
		want error
		msg  string
	}{
		{"a layer blob with one byte changed", func(t *testing.T) string {
			d := layoutOf(t, good)
			ls, _ := good.Layers()
			h, _ := ls[1].Digest()
			b, err := os.ReadFile(blobPath(d, h))
			require.NoError(t, err)
			b[len(b)/2] ^= 0xff
			require.NoError(t, os.WriteFile(blobPath(d, h), b, 0o644))
			return d
		}, oci.ErrCorrupt, ""},
		{"a truncated layer blob", func(t *testing.T) string {
			d := layoutOf(t, good)
			ls, _ := good.Layers()
			h, _ := ls[0].Digest()
			b, err := os.ReadFile(blobPath(d, h))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(blobPath(d, h), b[:len(b)/2], 0o644))
			return d
		}, oci.ErrCorrupt, ""},
		{"a configuration with one byte changed", func(t *testing.T) string {
			d := layoutOf(t, good)
			h, _ := good.ConfigName()
			b, err := os.ReadFile(blobPath(d, h))
			require.NoError(t, err)
			b = bytes.Replace(b, []byte("amd64"), []byte("amd65"), 1)
			b = bytes.Replace(b, []byte("arm64"), []byte("arm65"), 1)
			require.NoError(t, os.WriteFile(blobPath(d, h), b, 0o644))
			return d
		}, oci.ErrCorrupt, "digest mismatch"},
		{"a missing layer blob", func(t *testing.T) string {
			d := layoutOf(t, good)
			ls, _ := good.Layers()
			h, _ := ls[2].Digest()
			require.NoError(t, os.Remove(blobPath(d, h)))
			return d
		}, os.ErrNotExist, ""},
		{"a diff ID that is not the layer's", func(t *testing.T) string {
			return layoutOf(t, imageWithDiffID(t, gz(t, goodTar), sha([]byte("other"))))
		}, oci.ErrCorrupt, "diff ID mismatch"},
		{"garbage after the gzip stream", func(t *testing.T) string {
			return layoutOf(t, imageWithDiffID(t, append(gz(t, goodTar), "garbage"...), sha(goodTar)))
		}, oci.ErrCorrupt, ""},
		{"a truncated gzip stream", func(t *testing.T) string {
			b := gz(t, goodTar)
			return layoutOf(t, imageWithDiffID(t, b[:len(b)-9], sha(goodTar)))
		}, oci.ErrCorrupt, ""},
		{"data after the tar's end", func(t *testing.T) string {
			b := append(bytes.Clone(goodTar), bytes.Repeat([]byte{1}, 2<<20)...)
			return layoutOf(t, imageWithDiffID(t, gz(t, b), sha(b)))
		}, oci.ErrCorrupt, "after the end of the tar archive"},
		{"an empty layer blob", func(t *testing.T) string {
			return layoutOf(t, imageWithDiffID(t, nil, sha(nil)))
		}, oci.ErrCorrupt, "empty"},
		{"path traversal in a layer", func(t *testing.T) string {
			b := ocitest.Tar(t, reg("../../../tmp/owned", "x"))
			return layoutOf(t, imageWithDiffID(t, gz(t, b), sha(b)))
		}, oci.ErrHostile, "../../../tmp/owned"},
		{"a whiteout that escapes", func(t *testing.T) string {
			b := ocitest.Tar(t, reg("etc/.wh..", ""))
			return layoutOf(t, imageWithDiffID(t, gz(t, b), sha(b)))
		}, oci.ErrHostile, "whiteout"},
		{"a hard link out of the root", func(t *testing.T) string {
			b := ocitest.Tar(t, ocitest.Hardlink("etc/shadow", "../../etc/shadow"))
			return layoutOf(t, imageWithDiffID(t, gz(t, b), sha(b)))
		}, oci.ErrHostile, ""},
		{"a huge manifest", func(t *testing.T) string {
			d := layoutOf(t, good)
			idx := `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:` +
				strings.Repeat("a", 64) + `","size":1073741824}]}`
			require.NoError(t, os.WriteFile(filepath.Join(d, "index.json"), []byte(idx), 0o644))
			return d
		}, oci.ErrTooLarge, "over the 4194304-byte limit"},
		{"a huge index.json", func(t *testing.T) string {
			d := layoutOf(t, good)
			require.NoError(t, os.WriteFile(filepath.Join(d, "index.json"), bytes.Repeat([]byte(" "), 5<<20), 0o644))
			return d
		}, oci.ErrTooLarge, ""},
		{"too many layers", func(t *testing.T) string {
			d := layoutOf(t, good)
			cfg, _ := good.RawConfigFile()
			var layers []string
			for range oci.MaxLayers + 1 {
				layers = append(layers, `{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:`+strings.Repeat("b", 64)+`","size":1}`)
			}
			m := fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%d},"layers":[%s]}`,
				sha(cfg), len(cfg), strings.Join(layers, ","))
			writeManifest(t, d, []byte(m))
			return d
		}, oci.ErrTooLarge, "1001 layers"},
		{"a manifest that is not JSON", func(t *testing.T) string {
			d := layoutOf(t, good)
			writeManifest(t, d, []byte("{not json"))
			return d
		}, oci.ErrCorrupt, ""},
		{"a digest that is not one", func(t *testing.T) string {
			d := layoutOf(t, good)
			idx := `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:../../../etc/passwd","size":10}]}`
			require.NoError(t, os.WriteFile(filepath.Join(d, "index.json"), []byte(idx), 0o644))
			return d
		}, oci.ErrCorrupt, "non-hex character"},
		{"an index nested in itself", func(t *testing.T) string {
			d := layoutOf(t, good)
			// An index whose only child is an index of the same bytes
			// cannot be made (its digest would be its own); nest deeply.
			child := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}`)
			for range 6 {
				writeBlob(t, d, child)
				child = []byte(fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"%s","size":%d,"platform":{"os":"linux","architecture":"%s"}}]}`,
					sha(child), len(child), strings.TrimPrefix(host(), "linux/")))
			}
			writeBlob(t, d, child)
			idx := fmt.Sprintf(`{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.index.v1+json","digest":"%s","size":%d}]}`, sha(child), len(child))
			require.NoError(t, os.WriteFile(filepath.Join(d, "index.json"), []byte(idx), 0o644))
			return d
		}, oci.ErrCorrupt, "nested"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := oci.OpenLayout(ctx, tc.dir(t), "", oci.Options{})
			require.Error(t, err)
			if tc.want != nil {
				assert.ErrorIs(t, err, tc.want)
			}
			assert.Contains(t, err.Error(), tc.msg)
			assert.NotContains(t, err.Error(), "\n")
		})
	}
}

func writeBlob(t *testing.T, d string, b []byte) v1.Hash {
	h := sha(b)
	require.NoError(t, os.WriteFile(blobPath(d, h), b, 0o644))
	return h
}

// writeManifest makes b the layout's only manifest.
func writeManifest(t *testing.T, d string, b []byte) {
	h := writeBlob(t, d, b)
	idx, err := json.Marshal(v1.IndexManifest{SchemaVersion: 2, Manifests: []v1.Descriptor{{MediaType: types.OCIManifestSchema1, Digest: h, Size: int64(len(b))}}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(d, "index.json"), idx, 0o644))
}

// TestHostileRegistry checks what a registry can lie about: a manifest
// larger than it says or than the bound, a blob shorter or longer than
// its descriptor, a table of contents whose digest is not the manifest's.
func TestHostileRegistry(t *testing.T) {
	ctx := context.Background()
	anon := authn.NewMultiKeychain()
	for _, tc := range []struct {
		name string
		img  v1.Image
		hook func(w http.ResponseWriter, r *http.Request) bool
		want error
		msg  string
	}{
		{"a huge manifest", stackImage(t, ocitest.Gzip, host()), func(w http.ResponseWriter, r *http.Request) bool {
			if !strings.Contains(r.URL.Path, "/manifests/") {
				return false
			}
			w.Header().Set("Content-Type", string(types.OCIManifestSchema1))
			w.Header().Set("Docker-Content-Digest", "sha256:"+strings.Repeat("c", 64))
			w.Header().Set("Content-Length", fmt.Sprint(64<<20))
			if r.Method == http.MethodGet {
				w.Write(bytes.Repeat([]byte(" "), 64<<20))
			}
			return true
		}, oci.ErrTooLarge, "over the 4194304-byte limit"},
		{"a truncated blob", stackImage(t, ocitest.Gzip, host()), func(w http.ResponseWriter, r *http.Request) bool {
			if !strings.Contains(r.URL.Path, "/blobs/") || r.Method != http.MethodGet {
				return false
			}
			w.Header().Set("Content-Length", "10")
			w.Write([]byte("0123456789"))
			return true
		}, nil, ""},
		{"a table of contents not the manifest's", tocLie(t), nil, oci.ErrCorrupt, "digest mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ocitest.NewRegistry(t, "", "")
			r.Push(t, "x:1", tc.img)
			r.Hook(tc.hook)
			_, err := oci.OpenRemote(ctx, r.Host+"/x:1", oci.Options{Keychain: anon})
			require.Error(t, err)
			if tc.want != nil {
				assert.ErrorIs(t, err, tc.want)
			}
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

// bodyCounter counts the response bytes read through it.
type bodyCounter struct{ n atomic.Int64 }

func (c *bodyCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		resp.Body = countedBody{resp.Body, c}
	}
	return resp, err
}

type countedBody struct {
	io.ReadCloser
	c *bodyCounter
}

func (b countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.c.n.Add(int64(n))
	return n, err
}

// TestManifestLargerThanItsHead: a registry whose HEAD gives a manifest a
// small size and whose GET then sends 64 MiB has the manifest refused
// once past the limit, not read whole (go-containerregistry reads up to
// 100 MiB before it gives up).
func TestManifestLargerThanItsHead(t *testing.T) {
	r := ocitest.NewRegistry(t, "", "")
	r.Push(t, "x:1", stackImage(t, ocitest.Gzip, host()))
	r.Hook(func(w http.ResponseWriter, req *http.Request) bool {
		if !strings.Contains(req.URL.Path, "/manifests/") || req.Method != http.MethodGet {
			return false
		}
		w.Header().Set("Content-Type", string(types.OCIManifestSchema1))
		w.Write(bytes.Repeat([]byte(" "), 64<<20))
		return true
	})
	var c bodyCounter
	_, err := oci.OpenRemote(context.Background(), r.Host+"/x:1", oci.Options{Keychain: authn.NewMultiKeychain(), Transport: &c})
	require.ErrorIs(t, err, oci.ErrTooLarge)
	assert.Contains(t, err.Error(), "over the 4194304-byte limit")
	assert.Less(t, c.n.Load(), int64(oci.MaxManifest+1<<20), "bytes of the manifest read")

	// Only manifests are bounded so, not the blobs of a repository
	// named manifests.
	big := ocitest.NewLayer(t, ocitest.Tar(t, reg("etc/os-release", "ID=x\n"), ocitest.Entry{Name: "big", Type: '0', Mode: 0o644, Body: make([]byte, 2*oci.MaxManifest)}), ocitest.Plain)
	r = ocitest.NewRegistry(t, "", "")
	r.Push(t, "a/manifests/b:1", ocitest.Image(t, host(), big))
	_, err = oci.OpenRemote(context.Background(), r.Host+"/a/manifests/b:1", oci.Options{Keychain: authn.NewMultiKeychain()})
	require.NoError(t, err)
}

// TestRegistryRedirectLoop: a registry that redirects a manifest or a
// blob to itself is given up after a few redirects, at once; it was
// followed without end (go-containerregistry's redirect policy sets no
// bound), a request per round trip and memory growing with the chain.
func TestRegistryRedirectLoop(t *testing.T) {
	for _, what := range []string{"/manifests/", "/blobs/"} {
		t.Run(strings.Trim(what, "/"), func(t *testing.T) {
			r := ocitest.NewRegistry(t, "", "")
			r.Push(t, "x:1", stackImage(t, ocitest.Gzip, host()))
			r.Hook(func(w http.ResponseWriter, req *http.Request) bool {
				if !strings.Contains(req.URL.Path, what) {
					return false
				}
				http.Redirect(w, req, req.URL.Path, http.StatusFound)
				return true
			})
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := oci.OpenRemote(ctx, r.Host+"/x:1", oci.Options{Keychain: authn.NewMultiKeychain()})
			require.Error(t, err)
			assert.Contains(t, err.Error(), "stopped after 10 redirects")
			assert.NoError(t, ctx.Err(), "the loop ran until the test's deadline")
			assert.LessOrEqual(t, len(r.Requests()), 20)
		})
	}
	t.Run("redirected once", func(t *testing.T) {
		r := ocitest.NewRegistry(t, "", "")
		r.Push(t, "x:1", stackImage(t, ocitest.Gzip, host()))
		r.Hook(func(w http.ResponseWriter, req *http.Request) bool {
			if !strings.Contains(req.URL.Path, "/blobs/") || req.URL.RawQuery != "" {
				return false
			}
			http.Redirect(w, req, req.URL.Path+"?storage=1", http.StatusTemporaryRedirect)
			return true
		})
		_, err := oci.OpenRemote(context.Background(), r.Host+"/x:1", oci.Options{Keychain: authn.NewMultiKeychain()})
		require.NoError(t, err)
	})
}

// tocLie is an eStargz image whose layer annotation records another
// table's digest.
func tocLie(t *testing.T) v1.Image {
	l := ocitest.NewLayer(t, ocitest.Tar(t, reg("etc/os-release", "ID=x\n")), ocitest.Estargz)
	l.Annotations["containerd.io/snapshot/stargz/toc.digest"] = sha([]byte("another table")).String()
	return ocitest.Image(t, host(), l)
}

// TestRegistryThatStopsAnswering: a registry that accepts the request and
// then says nothing, before its answer or in the middle of a layer, fails
// the scan once it has been silent for netguard.Stall (lowered here), and
// does not hold it until the caller gives up.
func TestRegistryThatStopsAnswering(t *testing.T) {
	defer func(s time.Duration) { netguard.Stall = s }(netguard.Stall)
	netguard.Stall = 300 * time.Millisecond
	for what, hook := range map[string]func(w http.ResponseWriter, req *http.Request) bool{
		"no answer": func(w http.ResponseWriter, req *http.Request) bool {
			if !strings.Contains(req.URL.Path, "/manifests/") {
				return false
			}
			<-req.Context().Done()
			return true
		},
		"a blob that stops": func(w http.ResponseWriter, req *http.Request) bool {
			if !strings.Contains(req.URL.Path, "/blobs/") || req.Method != http.MethodGet {
				return false
			}
			w.Header().Set("Content-Length", "1000000")
			w.Write([]byte{0x1f, 0x8b})
			http.NewResponseController(w).Flush()
			<-req.Context().Done()
			return true
		},
	} {
		t.Run(what, func(t *testing.T) {
			r := ocitest.NewRegistry(t, "", "")
			r.Push(t, "x:1", stackImage(t, ocitest.Gzip, host()))
			r.Hook(hook)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := oci.OpenRemote(ctx, r.Host+"/x:1", oci.Options{Keychain: authn.NewMultiKeychain()})
			require.ErrorIs(t, err, netguard.ErrStalled)
			assert.NoError(t, ctx.Err(), "held until the test's deadline")
		})
	}
}
