package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/amilint/amilint/internal/image/netguard"
)

// OpenRemote opens the image ref names in a registry (HOST/REPO:TAG or
// HOST/REPO@sha256:…) and applies its layers. Credentials come from
// opt.Keychain; a loopback registry is spoken to over plain HTTP, any other
// over HTTPS.
func OpenRemote(ctx context.Context, ref string, opt Options) (*Image, error) {
	r, err := name.ParseReference(ref, name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("reference %q: %w", ref, err)
	}
	kc := opt.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	c := &counter{progress: opt.Progress}
	// A registry that stops answering fails the request after a minute
	// of silence, rather than holding the scan.
	tr := &countingTransport{base: &netguard.Transport{Base: opt.Transport}, c: c}
	puller, err := remote.NewPuller(remote.WithContext(ctx), remote.WithAuthFromKeychain(kc), remote.WithTransport(tr))
	if err != nil {
		return nil, fmt.Errorf("registry %s: %w", r.Context().RegistryStr(), err)
	}
	st := &remoteStore{repo: r.Context(), puller: puller, kc: kc, tr: tr}
	// Ask the size first: a huge manifest is refused before it is read.
	head, err := puller.Head(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	if head.Size > MaxManifest {
		return nil, fmt.Errorf("%s: manifest %s: %w: %d bytes, over the %d-byte limit", ref, head.Digest, ErrTooLarge, head.Size, MaxManifest)
	}
	b, err := readBlob(ctx, st, *head, MaxManifest, "manifest")
	if err != nil {
		return nil, err
	}
	res, err := resolve(ctx, st, b, head.MediaType, head.Digest.String(), opt.Platform)
	if err != nil {
		return nil, err
	}
	return build(ctx, res, c, opt)
}

// remoteStore reads blobs from one repository of a registry.
type remoteStore struct {
	repo   name.Repository
	puller *remote.Puller
	kc     authn.Keychain
	tr     http.RoundTripper

	once   sync.Once
	ranged http.RoundTripper // authenticated for range reads
	err    error
}

func (s *remoteStore) blob(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
	if isIndex(d.MediaType) || isManifest(d.MediaType) {
		m, err := s.puller.Get(ctx, s.repo.Digest(d.Digest.String()))
		if err != nil {
			return nil, err
		}
		return io.NopCloser(strings.NewReader(string(m.Manifest))), nil
	}
	l, err := s.puller.Layer(ctx, s.repo.Digest(d.Digest.String()))
	if err != nil {
		return nil, err
	}
	return l.Compressed()
}

// blobAt reads a blob by HTTP range requests (the registry API allows
// them on blobs; go-containerregistry has no call for it, so the request
// is made here over its authenticated transport).
func (s *remoteStore) blobAt(ctx context.Context, d v1.Descriptor) (io.ReaderAt, error) {
	s.once.Do(func() {
		var auth authn.Authenticator
		auth, s.err = authn.Resolve(ctx, s.kc, s.repo)
		if s.err == nil {
			s.ranged, s.err = transport.NewWithContext(ctx, s.repo.Registry, auth, s.tr, []string{s.repo.Scope(transport.PullScope)})
		}
	})
	if s.err != nil {
		return nil, fmt.Errorf("registry %s: %w", s.repo.RegistryStr(), s.err)
	}
	url := fmt.Sprintf("%s://%s/v2/%s/blobs/%s", s.repo.Scheme(), s.repo.RegistryStr(), s.repo.RepositoryStr(), d.Digest)
	return &rangeReader{ctx: ctx, client: &http.Client{Transport: s.ranged}, url: url, size: d.Size}, nil
}

// rangeReader reads a blob by range requests, one per ReadAt.
type rangeReader struct {
	ctx    context.Context
	client *http.Client
	url    string
	size   int64
}

func (r *rangeReader) ReadAt(p []byte, off int64) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if off < 0 || off+int64(len(p)) > r.size {
		return 0, fmt.Errorf("%w: range %d+%d past the blob's %d bytes", ErrCorrupt, off, len(p), r.size)
	}
	req, err := http.NewRequestWithContext(r.ctx, http.MethodGet, r.url, nil)
	if err != nil {
		return 0, err
	}
	end := off + int64(len(p)) - 1
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, end))
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		return 0, fmt.Errorf("range request: %s: %w", resp.Status, errNoRanges)
	}
	if got := resp.Header.Get("Content-Range"); !strings.HasPrefix(got, fmt.Sprintf("bytes %d-%d/", off, end)) {
		return 0, fmt.Errorf("range request: the registry answered %q for bytes %d-%d", got, off, end)
	}
	n, err := io.ReadFull(resp.Body, p)
	if err != nil {
		return n, fmt.Errorf("range request: %w", err)
	}
	return n, nil
}

// errNoRanges reports a registry that answered a range request with
// something else than the range: the layer is then streamed whole.
var errNoRanges = errors.New("the registry does not serve byte ranges")

// maxRedirects bounds the redirects one request follows, as net/http's
// default policy does.
const maxRedirects = 10

// countingTransport counts the response bytes read through it, and bounds
// the redirects followed.
type countingTransport struct {
	base http.RoundTripper
	c    *counter
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// go-containerregistry's clients follow redirects under a policy of
	// their own that, unlike net/http's default, sets no bound: a
	// registry redirecting to itself was followed without end. A
	// redirected request carries the response that redirected it.
	hops := 0
	for r := req; r.Response != nil && r.Response.Request != nil; r = r.Response.Request {
		if hops++; hops > maxRedirects {
			return nil, fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	var body io.Reader = resp.Body
	if path.Base(path.Dir(req.URL.Path)) == "manifests" { // /v2/REPO/manifests/REF
		// go-containerregistry reads a manifest whole, up to 100 MiB,
		// before anything here can check its size against its HEAD's.
		body = &capReader{r: body, left: MaxManifest}
	}
	resp.Body = readCloser{t.c.reader(body), resp.Body}
	return resp, nil
}

// capReader fails a manifest's body once it is past MaxManifest bytes.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p[:min(int64(len(p)), c.left+1)])
	if c.left -= int64(n); c.left < 0 {
		return n, fmt.Errorf("manifest: %w: over the %d-byte limit", ErrTooLarge, MaxManifest)
	}
	return n, err
}
