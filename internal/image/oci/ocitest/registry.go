package ocitest

import (
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/stretchr/testify/require"
)

// Registry is go-containerregistry's in-process registry served on
// loopback (a random port of 127.0.0.1), optionally behind HTTP basic
// authentication; it stops with the test. It logs every blob request with
// the bytes it served.
type Registry struct {
	// Host is HOST:PORT, for references ("HOST:PORT/repo:tag").
	Host string
	// User and Password are the credentials it asks for ("" for none).
	User, Password string

	mu   sync.Mutex
	log  []Request
	srv  *httptest.Server
	hook func(w http.ResponseWriter, r *http.Request) bool
}

// Request is one request the registry served.
type Request struct {
	Method, Path, Range string
	Status              int
	Bytes               int64
}

// NewRegistry starts a registry; with a user it requires basic
// authentication with that user and password.
func NewRegistry(t testing.TB, user, password string) *Registry {
	t.Helper()
	r := &Registry{User: user, Password: password}
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.User != "" {
			u, p, ok := req.BasicAuth()
			if !ok || u != r.User || p != r.Password {
				w.Header().Set("WWW-Authenticate", `Basic realm="ocitest"`)
				http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
				return
			}
		}
		cw := &countingWriter{ResponseWriter: w, status: http.StatusOK}
		r.mu.Lock()
		hook := r.hook
		r.mu.Unlock()
		if hook == nil || !hook(cw, req) {
			h.ServeHTTP(cw, req)
		}
		r.mu.Lock()
		r.log = append(r.log, Request{Method: req.Method, Path: req.URL.Path, Range: req.Header.Get("Range"), Status: cw.status, Bytes: cw.n})
		r.mu.Unlock()
	}))
	t.Cleanup(r.srv.Close)
	r.Host = r.srv.Listener.Addr().String()
	return r
}

// Hook lets a test answer some requests itself (hostile registries): it
// returns true when it answered.
func (r *Registry) Hook(h func(w http.ResponseWriter, req *http.Request) bool) {
	r.mu.Lock()
	r.hook = h
	r.mu.Unlock()
}

// Requests returns the requests served so far and forgets them.
func (r *Registry) Requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.log
	r.log = nil
	return out
}

// Push pushes an image or index to repo:tag on the registry.
func (r *Registry) Push(t testing.TB, ref string, item any) {
	t.Helper()
	nr, err := name.ParseReference(r.Host + "/" + ref)
	require.NoError(t, err)
	opt := remote.WithAuth(authn.Anonymous)
	if r.User != "" {
		opt = remote.WithAuth(&authn.Basic{Username: r.User, Password: r.Password})
	}
	switch x := item.(type) {
	case v1.Image:
		require.NoError(t, remote.Write(nr, x, opt))
	case v1.ImageIndex:
		require.NoError(t, remote.WriteIndex(nr, x, opt))
	default:
		t.Fatalf("ocitest: %T is neither an image nor an index", item)
	}
	r.Requests()
}

type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (c *countingWriter) WriteHeader(s int) { c.status = s; c.ResponseWriter.WriteHeader(s) }

// Unwrap lets a hook flush through http.NewResponseController.
func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

// LayoutImage is the only image of the OCI layout dir (its first manifest).
func LayoutImage(t testing.TB, dir string) v1.Image {
	t.Helper()
	p, err := layout.FromPath(dir)
	require.NoError(t, err)
	idx, err := p.ImageIndex()
	require.NoError(t, err)
	m, err := idx.IndexManifest()
	require.NoError(t, err)
	require.NotEmpty(t, m.Manifests)
	img, err := idx.Image(m.Manifests[0].Digest)
	require.NoError(t, err)
	return img
}
