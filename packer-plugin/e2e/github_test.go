//go:build e2e

package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pluginRepo is the repository `packer init` reads the releases of for the
// source address github.com/amilint/amilint: Packer prefixes the name with
// packer-plugin-. The release workflow publishes the plugin there.
const pluginRepo = "amilint/packer-plugin-amilint"

// TestReleasePackerInit runs a real `packer init` against the release
// `make release-snapshot` built, published as the release workflow
// publishes it: a fake GitHub (api.github.com and github.com, behind an
// HTTPS proxy on 127.0.0.1 with a certificate authority made here) serves
// the files the workflow uploads to amilint/packer-plugin-amilint, and
// nothing else. Packer picks the version from the repository's tags,
// fetches the checksums file and the zip for this host by the names it
// computes, checks the zip's checksum, and installs the binary only if it
// describes itself with the version and API version its name carries.
func TestReleasePackerInit(t *testing.T) {
	dist, version := os.Getenv("AMILINT_RELEASE_DIR"), os.Getenv("AMILINT_RELEASE_VERSION")
	if dist == "" || version == "" {
		require.Fail(t, "AMILINT_RELEASE_DIR and AMILINT_RELEASE_VERSION are not set: run make e2e-release")
	}
	packer := os.Getenv("PACKER_BIN")
	require.NotEmpty(t, packer, "PACKER_BIN (make e2e-release builds it)")
	tag := "v" + version

	// What .github/workflows/release.yml uploads to the plugin's repository.
	workflow := string(mustRead(t, filepath.Join("..", "..", ".github", "workflows", "release.yml")))
	require.Contains(t, workflow, "--repo "+pluginRepo)
	require.Contains(t, workflow, `"packer-plugin-amilint_${TAG}_SHA256SUMS" "packer-plugin-amilint_${TAG}"_x5.0_*.zip`)
	published := regexp.MustCompile(`^packer-plugin-amilint_` + regexp.QuoteMeta(tag) + `(_SHA256SUMS|_x5\.0_[a-z]+_[a-z0-9]+\.zip)$`)

	gh := startFakeGitHub(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Host == "api.github.com" && r.URL.Path == "/repos/"+pluginRepo+"/git/matching-refs/tags":
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode([]map[string]any{{"ref": "refs/tags/" + tag}, {"ref": "refs/tags/v0.0.1-not-a-release"}})
		case r.Host == "github.com" && path.Dir(r.URL.Path) == "/"+pluginRepo+"/releases/download/"+tag &&
			published.MatchString(path.Base(r.URL.Path)):
			http.ServeFile(w, r, filepath.Join(dist, path.Base(r.URL.Path)))
		default:
			http.NotFound(w, r)
		}
	})

	work := t.TempDir()
	plugins := filepath.Join(work, "plugins")
	dir := filepath.Join(work, "build")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "build.pkr.hcl"), []byte(fmt.Sprintf(`packer {
  required_plugins {
    amilint = {
      source  = "github.com/amilint/amilint"
      version = "= %s"
    }
  }
}
`, version)), 0o644))
	envv := append(gh.env, "PACKER_PLUGIN_PATH="+plugins, "CHECKPOINT_DISABLE=1",
		"PACKER_CONFIG_DIR="+filepath.Join(work, "packer-config"), "PACKER_GITHUB_API_TOKEN=")
	out, err := runFor(t, 5*time.Minute, dir, envv, packer, "init", ".")
	t.Logf("packer init:\n%s", out)
	require.NoError(t, err, "requests: %s", strings.Join(gh.requests(), "\n"))

	name := fmt.Sprintf("packer-plugin-amilint_%s_x5.0_%s_%s", tag, runtime.GOOS, runtime.GOARCH)
	installed := filepath.Join(plugins, "github.com", "amilint", "amilint", name)
	assert.FileExists(t, installed)
	assert.FileExists(t, installed+"_SHA256SUM")
	assert.Equal(t, []string{
		"api.github.com /repos/" + pluginRepo + "/git/matching-refs/tags",
		"github.com /" + pluginRepo + "/releases/download/" + tag + "/packer-plugin-amilint_" + tag + "_SHA256SUMS",
		"github.com /" + pluginRepo + "/releases/download/" + tag + "/" + name + ".zip",
	}, gh.requests(), "what packer init fetched from GitHub")
	assert.Equal(t, []string{"releases.hashicorp.com:443"}, gh.refused(), "packer init asks HashiCorp's releases first, and is refused")

	// The installed plugin is the one Packer uses for the requirement.
	out, err = run(t, dir, envv, packer, "plugins", "installed")
	require.NoError(t, err, out)
	assert.Equal(t, installed+"\n", out)

	// A tampered zip is refused by its checksum: nothing is installed.
	tampered := filepath.Join(work, "tampered")
	require.NoError(t, os.MkdirAll(tampered, 0o755))
	sums := string(mustRead(t, filepath.Join(dist, "packer-plugin-amilint_"+tag+"_SHA256SUMS")))
	var mine, other string
	for _, l := range strings.Split(strings.TrimSpace(sums), "\n") {
		if strings.HasSuffix(l, " "+name+".zip") {
			mine = l
		} else {
			other = l
		}
	}
	require.NotEmpty(t, mine)
	require.NotEmpty(t, other)
	// Another zip's checksum on this zip's line.
	forged := strings.Replace(sums, mine, strings.Fields(other)[0]+"  "+name+".zip", 1)
	gh.setHandler(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "_SHA256SUMS") {
			io.WriteString(w, forged)
			return
		}
		gh.serve(w, r)
	})
	envv2 := append(envv[:len(envv):len(envv)], "PACKER_PLUGIN_PATH="+tampered)
	out, err = runFor(t, 5*time.Minute, dir, envv2, packer, "init", ".")
	assert.Error(t, err, out)
	entries, _ := filepath.Glob(filepath.Join(tampered, "github.com", "amilint", "amilint", "packer-plugin-amilint_*"))
	assert.Empty(t, entries, "a zip that fails its checksum is not installed")
}

// fakeGitHub is an HTTPS proxy on 127.0.0.1 that answers for api.github.com
// and github.com itself, with a certificate of a throwaway certificate
// authority; env makes a Go program (Packer) use both.
type fakeGitHub struct {
	env     []string
	serve   http.HandlerFunc
	handler http.HandlerFunc

	mu       sync.Mutex
	reqs     []string
	refusals []string
}

func (g *fakeGitHub) setHandler(h http.HandlerFunc) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.handler = h
}

func (g *fakeGitHub) requests() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.reqs...)
}

func (g *fakeGitHub) refused() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.refusals...)
}

func startFakeGitHub(t *testing.T, serve http.HandlerFunc) *fakeGitHub {
	t.Helper()
	g := &fakeGitHub{serve: serve, handler: serve}
	caPEM, leaf := certificates(t, "api.github.com", "github.com")
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, caPEM, 0o644))

	hosts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.reqs = append(g.reqs, r.Host+" "+r.URL.Path)
		h := g.handler
		g.mu.Unlock()
		h(w, r)
	}))
	hosts.TLS = &tls.Config{Certificates: []tls.Certificate{leaf}}
	hosts.StartTLS()
	t.Cleanup(hosts.Close)

	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect || (r.Host != "api.github.com:443" && r.Host != "github.com:443") {
			g.mu.Lock()
			g.refusals = append(g.refusals, r.Host)
			g.mu.Unlock()
			http.Error(w, "not GitHub", http.StatusForbidden)
			return
		}
		upstream, err := net.DialTimeout("tcp", hosts.Listener.Addr().String(), 10*time.Second)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			upstream.Close()
			return
		}
		io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n")
		deadline := time.Now().Add(5 * time.Minute)
		conn.SetDeadline(deadline)
		upstream.SetDeadline(deadline)
		go func() {
			defer upstream.Close()
			io.Copy(upstream, buf)
		}()
		go func() {
			defer conn.Close()
			io.Copy(conn, upstream)
		}()
	}))
	t.Cleanup(proxy.Close)
	g.env = []string{"HTTPS_PROXY=" + proxy.URL, "https_proxy=" + proxy.URL, "HTTP_PROXY=" + proxy.URL, "http_proxy=" + proxy.URL,
		"NO_PROXY=", "no_proxy=", "SSL_CERT_FILE=" + caFile, "SSL_CERT_DIR=" + filepath.Dir(caFile)}
	return g
}

// certificates makes a certificate authority (returned as PEM) and a
// certificate for names signed by it.
func certificates(t *testing.T, names ...string) ([]byte, tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "amilint e2e CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
