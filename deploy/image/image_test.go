package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/amilint/amilint/fixtures/testenv"
)

const testVersion = "v9.8.7"

// tinyBinaries builds a small static Go program for both platforms, with
// the release's version set as the release sets it, so the image's checks
// pass without building amilint twice.
func tinyBinaries(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	writeTiny(t, dir, "github.com/amilint/amilint")
	out := map[string]string{}
	for _, arch := range []string{"amd64", "arm64"} {
		bin := filepath.Join(dir, "tiny-"+arch)
		build(t, dir, bin, arch, "-s -w -X "+VersionSymbol+"="+testVersion)
		out["linux/"+arch] = bin
	}
	return out
}

// writeTiny writes a module named module whose cmd/amilint prints a line.
func writeTiny(t *testing.T, dir, module string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "cmd/amilint"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cmd/amilint/main.go"), []byte("package main\n\nfunc main() { println(\"tiny\") }\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module "+module+"\n\ngo 1.26\n"), 0o644))
}

// build runs go build in dir for linux/arch with ldflags.
func build(t *testing.T, dir, out, arch, ldflags string, env ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, "./cmd/amilint")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=" + arch}, env...)...)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", b)
}

func options(t *testing.T, bins map[string]string) Options {
	return Options{Version: testVersion, Binaries: bins, CACerts: systemCAs(t), Created: time.Unix(1700000000, 0).UTC()}
}

// systemCAs is Debian's CA bundle (package ca-certificates).
func systemCAs(t *testing.T) string {
	t.Helper()
	const bundle = "/etc/ssl/certs/ca-certificates.crt"
	if _, err := os.Stat(bundle); err != nil {
		testenv.Missing(t, "no CA bundle at %s (Debian package ca-certificates; .ci/run installs it)", bundle)
	}
	return bundle
}

// files lists a flattened image's entries: name → header, and contents.
func files(t *testing.T, img v1.Image) (map[string]*tar.Header, map[string][]byte) {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	hdrs, data := map[string]*tar.Header{}, map[string][]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hdrs, data
		}
		require.NoError(t, err)
		n := strings.TrimSuffix(h.Name, "/")
		hdrs[n] = h
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		data[n] = b
	}
}

func TestBuild(t *testing.T) {
	bins := tinyBinaries(t)
	o := options(t, bins)
	idx, err := Build(o)
	require.NoError(t, err)

	m, err := idx.IndexManifest()
	require.NoError(t, err)
	assert.Equal(t, "application/vnd.oci.image.index.v1+json", string(m.MediaType))
	require.Len(t, m.Manifests, 2)
	ca, err := os.ReadFile(o.CACerts)
	require.NoError(t, err)
	var baseLayers []v1.Hash
	for i, arch := range []string{"amd64", "arm64"} {
		d := m.Manifests[i]
		require.NotNil(t, d.Platform)
		assert.Equal(t, v1.Platform{OS: "linux", Architecture: arch}, *d.Platform)
		img, err := idx.Image(d.Digest)
		require.NoError(t, err)
		mt, err := img.MediaType()
		require.NoError(t, err)
		assert.Equal(t, "application/vnd.oci.image.manifest.v1+json", string(mt))

		cf, err := img.ConfigFile()
		require.NoError(t, err)
		assert.Equal(t, arch, cf.Architecture)
		assert.Equal(t, "linux", cf.OS)
		assert.Equal(t, "65534:65534", cf.Config.User, "runs as nobody, as the DaemonSet's runAsUser")
		assert.Equal(t, []string{"/usr/local/bin/amilint"}, cf.Config.Entrypoint)
		assert.Equal(t, testVersion, cf.Config.Labels["org.opencontainers.image.version"])
		assert.Equal(t, o.Created, cf.Created.Time.UTC())

		hdrs, data := files(t, img)
		var names []string
		for n, h := range hdrs {
			names = append(names, n)
			assert.Zero(t, h.Uid, "%s is root's", n)
			assert.Zero(t, h.Gid, "%s is root's", n)
			assert.Zero(t, h.Mode&0o7022, "%s: no setuid, setgid, sticky, group or world write bit", n)
		}
		assert.ElementsMatch(t, []string{"etc", "etc/passwd", "etc/group", "etc/ssl", "etc/ssl/certs", "etc/ssl/certs/ca-certificates.crt",
			"usr", "usr/local", "usr/local/bin", "usr/local/bin/amilint"}, names, "the binary, the CA bundle and the user: nothing else")
		bin, err := os.ReadFile(bins["linux/"+arch])
		require.NoError(t, err)
		assert.Equal(t, bin, data["usr/local/bin/amilint"])
		assert.Equal(t, int64(0o755), hdrs["usr/local/bin/amilint"].Mode)
		assert.Equal(t, ca, data["etc/ssl/certs/ca-certificates.crt"])
		assert.Contains(t, string(data["etc/passwd"]), "nobody:x:65534:65534:")
		assert.Contains(t, string(data["etc/group"]), "nogroup:x:65534:")

		layers, err := img.Layers()
		require.NoError(t, err)
		require.Len(t, layers, 2)
		h, err := layers[0].Digest()
		require.NoError(t, err)
		baseLayers = append(baseLayers, h)
	}
	assert.Equal(t, baseLayers[0], baseLayers[1], "the platforms share the user and CA layer")

	// The same inputs give the same digest; another creation time another.
	d1, err := idx.Digest()
	require.NoError(t, err)
	again, err := Build(o)
	require.NoError(t, err)
	d2, err := again.Digest()
	require.NoError(t, err)
	assert.Equal(t, d1, d2, "a rebuild is reproducible")
	o.Created = o.Created.Add(time.Second)
	other, err := Build(o)
	require.NoError(t, err)
	d3, err := other.Digest()
	require.NoError(t, err)
	assert.NotEqual(t, d1, d3)
}

// selfSignedCA is a PEM CA certificate named cn.
func selfSignedCA(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, NotBefore: time.Unix(0, 0), NotAfter: time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestBuildRefuses checks that the image is never built around a binary it
// could not run or that the release did not build, nor without the roots
// the AWS APIs need.
func TestBuildRefuses(t *testing.T) {
	bins := tinyBinaries(t)
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, data, 0o644))
		return p
	}
	otherDir := t.TempDir()
	writeTiny(t, otherDir, "example.com/other")
	other := filepath.Join(dir, "other")
	build(t, otherDir, other, "amd64", "-s -w")
	cgo := filepath.Join(dir, "cgo")
	build(t, filepath.Dir(bins["linux/amd64"]), cgo, "amd64", "-s -w -X "+VersionSymbol+"="+testVersion, "CGO_ENABLED=1")
	onlyOurs := write("ours.pem", selfSignedCA(t, "Not An AWS Root"))
	notPEM := write("not.pem", []byte("hello\n"))

	for _, tc := range []struct {
		name string
		edit func(o *Options)
		want string
	}{
		{"not amilint", func(o *Options) { o.Binaries = map[string]string{"linux/amd64": other} }, "built from example.com/other/cmd/amilint, not github.com/amilint/amilint/cmd/amilint"},
		{"no version", func(o *Options) { o.Version = "" }, "no version"},
		{"wrong machine", func(o *Options) { o.Binaries = map[string]string{"linux/arm64": bins["linux/amd64"]} }, "machine EM_X86_64, want EM_AARCH64"},
		{"not ELF", func(o *Options) { o.Binaries = map[string]string{"linux/amd64": notPEM} }, "not an ELF executable"},
		{"dynamic", func(o *Options) { o.Binaries = map[string]string{"linux/amd64": "/bin/true"} }, "dynamically linked"},
		{"cgo", func(o *Options) { o.Binaries = map[string]string{"linux/amd64": cgo} }, "cgo"},
		{"other OS", func(o *Options) { o.Binaries = map[string]string{"windows/amd64": bins["linux/amd64"]} }, "only linux/amd64 and linux/arm64"},
		{"no binaries", func(o *Options) { o.Binaries = nil }, "no binaries"},
		{"no AWS roots", func(o *Options) { o.CACerts = onlyOurs }, `lacks "Amazon Root CA 1"`},
		{"not a bundle", func(o *Options) { o.CACerts = notPEM }, "no PEM certificates"},
		{"missing bundle", func(o *Options) { o.CACerts = filepath.Join(dir, "absent.pem") }, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := options(t, bins)
			tc.edit(&o)
			_, err := Build(o)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestPin(t *testing.T) {
	ds := []byte("spec:\n  containers:\n    - name: amilint\n      image: ghcr.io/amilint/amilint:v1\n")
	out, err := Pin(ds, "ghcr.io/amilint/amilint:v1", "ghcr.io/amilint/amilint:v1@sha256:abc")
	require.NoError(t, err)
	assert.Contains(t, string(out), "      image: ghcr.io/amilint/amilint:v1@sha256:abc\n")
	_, err = Pin(ds, "ghcr.io/amilint/amilint:v2", "x")
	assert.ErrorContains(t, err, "names no image ghcr.io/amilint/amilint:v2")
	_, err = Pin(append(ds, ds...), "ghcr.io/amilint/amilint:v1", "x")
	assert.ErrorContains(t, err, "2 times")
}

// TestRegistryRoundTrip writes the outputs, pushes the layout to an
// in-process registry on loopback and pulls it back by the recorded
// reference: the digest the DaemonSet is pinned to is the one served.
func TestRegistryRoundTrip(t *testing.T) {
	idx, err := Build(options(t, tinyBinaries(t)))
	require.NoError(t, err)
	out := t.TempDir()
	ds := filepath.Join(out, "in.yaml")
	require.NoError(t, os.WriteFile(ds, []byte("image: ghcr.io/amilint/amilint:"+testVersion+"\n"), 0o644))
	ref, err := WriteOutputs(idx, "ghcr.io/amilint/amilint", testVersion, ds, out)
	require.NoError(t, err)
	digest, err := idx.Digest()
	require.NoError(t, err)
	assert.Equal(t, "ghcr.io/amilint/amilint:"+testVersion+"@"+digest.String(), ref)
	recorded, err := os.ReadFile(filepath.Join(out, "reference"))
	require.NoError(t, err)
	assert.Equal(t, ref+"\n", string(recorded))
	pinned, err := os.ReadFile(filepath.Join(out, "daemonset.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "image: "+ref+"\n", string(pinned))

	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	require.True(t, strings.HasPrefix(host, "127.0.0.1:"), "the registry listens on loopback: %s", host)

	fromLayout, err := ReadLayout(filepath.Join(out, "oci"), testVersion)
	require.NoError(t, err)
	pushed, err := Push(context.Background(), fromLayout, host+"/amilint/amilint:"+testVersion)
	require.NoError(t, err)
	assert.Equal(t, host+"/amilint/amilint:"+testVersion+"@"+digest.String(), pushed)

	for _, r := range []string{host + "/amilint/amilint:" + testVersion, host + "/amilint/amilint@" + digest.String()} {
		pr, err := name.ParseReference(r)
		require.NoError(t, err)
		got, err := remote.Index(pr)
		require.NoError(t, err, r)
		gd, err := got.Digest()
		require.NoError(t, err)
		assert.Equal(t, digest, gd, "pulled %s", r)
		img, err := got.Image(mustManifest(t, got, "arm64").Digest)
		require.NoError(t, err)
		_, data := files(t, img)
		assert.Contains(t, string(data["etc/passwd"]), "nobody")
	}
}

func mustManifest(t *testing.T, idx v1.ImageIndex, arch string) v1.Descriptor {
	t.Helper()
	m, err := idx.IndexManifest()
	require.NoError(t, err)
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.Architecture == arch {
			return d
		}
	}
	t.Fatalf("no %s manifest", arch)
	return v1.Descriptor{}
}

// TestLayoutReadByOtherTools reads the layout with skopeo, an
// implementation of the OCI image spec independent of go-containerregistry:
// it resolves the tag, and each platform's image with its config.
func TestLayoutReadByOtherTools(t *testing.T) {
	skopeo := testenv.Tool(t, "skopeo", "skopeo")
	idx, err := Build(options(t, tinyBinaries(t)))
	require.NoError(t, err)
	out := t.TempDir()
	_, err = WriteOutputs(idx, "ghcr.io/amilint/amilint", testVersion, "", out)
	require.NoError(t, err)
	digest, err := idx.Digest()
	require.NoError(t, err)
	src := "oci:" + filepath.Join(out, "oci") + ":" + testVersion

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raw, err := exec.CommandContext(ctx, skopeo, "inspect", "--raw", src).Output()
	require.NoError(t, err)
	h, _, err := v1.SHA256(bytes.NewReader(raw))
	require.NoError(t, err)
	assert.Equal(t, digest, h, "skopeo reads the tagged index")
	for _, arch := range []string{"amd64", "arm64"} {
		b, err := exec.CommandContext(ctx, skopeo, "--override-os", "linux", "--override-arch", arch, "inspect", src).Output()
		require.NoError(t, err, arch)
		var info struct {
			Digest       string
			Architecture string
			Os           string
			Labels       map[string]string
		}
		require.NoError(t, json.Unmarshal(b, &info))
		assert.Equal(t, arch, info.Architecture)
		assert.Equal(t, "linux", info.Os)
		assert.Equal(t, digest.String(), info.Digest, "the digest of the reference inspected, the index")
		assert.Equal(t, testVersion, info.Labels["org.opencontainers.image.version"])
	}
}
