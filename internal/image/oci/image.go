// Package oci owns container images as audit targets: OCI image layouts,
// docker-archive and OCI-archive tarballs, and registry references. It
// resolves a reference to one image manifest (for a platform, when it names
// a multi-arch index), then applies the image's layers in order, as a
// container runtime would (whiteouts, opaque directories, hard links across
// layers), into a Tree held in memory and served as a rootfs.Source.
//
// Every blob is verified against its descriptor (digest and size) and every
// layer against its diff ID, each compressed stream read to its end; a
// layer is streamed once and only the contents the audit reads are kept. A
// registry layer with a table of contents (eStargz, zstd:chunked) whose
// digest the manifest records is not streamed at all: its table is fetched
// and verified, and the files the audit opens are fetched by range.
//
// go-containerregistry is the registry client (authentication from the
// Docker config and its credential helpers, retries) and provides the
// image-spec types; estargz provides the table-of-contents formats. The
// package never unpacks anything to disk and never writes.
package oci

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Bounds on what an image may ask the reader to hold.
const (
	// MaxManifest bounds a manifest or index, as registries and
	// containerd bound them.
	MaxManifest = 4 << 20
	// MaxConfig bounds an image configuration.
	MaxConfig = 16 << 20
	// MaxLayers bounds the layers of one image.
	MaxLayers = 1000
	// maxNesting bounds indexes within indexes.
	maxNesting = 4
	// maxTrailer bounds what a layer may hold past its tar's
	// end-of-archive marker (padding to the record size, usually).
	maxTrailer = 1 << 20
)

// Options tune how an image is opened.
type Options struct {
	// Platform chooses the image of a multi-arch index, as os/arch or
	// os/arch/variant; "" means the host's. Given for a single image, it
	// must be the image's own.
	Platform string
	// Keychain resolves registry credentials; nil means the Docker config
	// and its credential helpers (authn.DefaultKeychain).
	Keychain authn.Keychain
	// Transport carries registry requests; nil means http.DefaultTransport.
	Transport http.RoundTripper
	// Progress, when set, is told how many bytes were fetched so far out
	// of how many the image holds (its manifest, configuration and
	// layers, as stored).
	Progress func(fetched, total int64)
	// Tree bounds the tree built.
	Tree TreeOptions
}

// Image is an opened container image: its root filesystem and where it
// came from.
type Image struct {
	// Tree is the root filesystem, every layer applied.
	Tree *Tree
	// Digest is the image manifest's digest ("" for a docker-archive of
	// the classic format, which has no manifest).
	Digest string
	// Platform is the image's os/arch[/variant], from its configuration.
	Platform string
	// Layers is the number of layers; Ranged how many of them were read
	// through their table of contents, by range.
	Layers, Ranged int
	// Stored is the size of the image as stored: manifest, configuration
	// and layers (compressed).
	Stored int64

	fetched *counter
}

// Fetched is how many bytes were read from where the image is stored (a
// registry, a layout directory, an archive) so far.
func (im *Image) Fetched() int64 { return im.fetched.n.Load() }

// Detail describes the image in one line for reports.
func (im *Image) Detail() string {
	d := fmt.Sprintf("%s, %d layers", im.Platform, im.Layers)
	if im.Digest != "" {
		d = im.Digest + " " + d
	}
	if im.Ranged > 0 {
		d += fmt.Sprintf(" (%d read by range through their table of contents)", im.Ranged)
	}
	return d
}

// counter counts fetched bytes and reports progress.
type counter struct {
	n        atomic.Int64
	total    atomic.Int64
	progress func(fetched, total int64)
	last     atomic.Int64
}

func (c *counter) add(n int) {
	if n <= 0 {
		return
	}
	v := c.n.Add(int64(n))
	if c.progress != nil && v-c.last.Load() >= 1<<20 {
		c.last.Store(v)
		c.progress(v, c.total.Load())
	}
}

// reader counts what is read through it.
func (c *counter) reader(r io.Reader) io.Reader { return &countingReader{r, c} }

type countingReader struct {
	r io.Reader
	c *counter
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.c.add(n)
	return n, err
}

// store is where an image's blobs are: a layout directory, an archive, a
// registry. blob opens the blob a descriptor names, unverified (callers
// verify).
type store interface {
	blob(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error)
}

// rangeStore is a store that can also read a blob by range (a registry).
type rangeStore interface {
	blobAt(ctx context.Context, d v1.Descriptor) (io.ReaderAt, error)
}

// layerRef is one layer to apply: its descriptor (the digest may be zero
// where the format records none: a classic docker-archive), its diff ID,
// and how to open its bytes as stored.
type layerRef struct {
	desc   v1.Descriptor
	diffID v1.Hash
	open   func(ctx context.Context) (io.ReadCloser, error)
	at     func(ctx context.Context) (io.ReaderAt, error) // nil: no range reads
}

// resolved is an image manifest resolved to its configuration and layers.
type resolved struct {
	digest   string
	config   *v1.ConfigFile
	layers   []layerRef
	stored   int64
	explicit bool // the platform was asked for
	platform v1.Platform
}

// wantPlatform parses opt.Platform, or gives the host's.
func wantPlatform(s string) (v1.Platform, bool, error) {
	if s == "" {
		return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}, false, nil
	}
	p, err := v1.ParsePlatform(s)
	if err != nil || p.OS == "" || p.Architecture == "" {
		return v1.Platform{}, true, fmt.Errorf("platform %q: want os/arch or os/arch/variant (linux/arm64)", s)
	}
	return *p, true, nil
}

// readBlob reads the blob d names whole, at most limit bytes, and checks
// its size and digest.
func readBlob(ctx context.Context, st store, d v1.Descriptor, limit int64, what string) ([]byte, error) {
	if d.Size > limit {
		return nil, fmt.Errorf("%s %s: %w: %d bytes, over the %d-byte limit", what, d.Digest, ErrTooLarge, d.Size, limit)
	}
	if d.Size < 0 {
		return nil, fmt.Errorf("%s %s: %w: size %d", what, d.Digest, ErrCorrupt, d.Size)
	}
	rc, err := st.blob(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, d.Digest, err)
	}
	defer rc.Close()
	v, err := newVerifier(rc, d)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	b, err := io.ReadAll(v)
	if err == nil {
		err = v.check()
	}
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, d.Digest, err)
	}
	return b, nil
}

// verifier checks a blob as it is read: never more bytes than its
// descriptor's size, and (check) exactly that many, with its digest.
type verifier struct {
	r    io.Reader
	h    hash.Hash
	want v1.Hash
	size int64
	n    int64
}

func newVerifier(r io.Reader, d v1.Descriptor) (*verifier, error) {
	v := &verifier{r: r, want: d.Digest, size: d.Size}
	if d.Digest != (v1.Hash{}) {
		h, err := hasher(d.Digest)
		if err != nil {
			return nil, err
		}
		v.h = h
	}
	return v, nil
}

func hasher(h v1.Hash) (hash.Hash, error) {
	if h.Algorithm != "sha256" {
		return nil, fmt.Errorf("%w: digest algorithm %q is not supported (sha256 only)", ErrCorrupt, h.Algorithm)
	}
	return sha256.New(), nil
}

func (v *verifier) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.n += int64(n)
	if v.h != nil {
		v.h.Write(p[:n])
	}
	if v.size >= 0 && v.n > v.size {
		return n, fmt.Errorf("%w: blob longer than its descriptor's %d bytes", ErrCorrupt, v.size)
	}
	if err == io.ErrUnexpectedEOF {
		err = fmt.Errorf("%w: blob truncated: %w", ErrCorrupt, err)
	}
	return n, err
}

// check is called once the blob was read to its end.
func (v *verifier) check() error {
	if v.size >= 0 && v.n != v.size {
		return fmt.Errorf("%w: blob truncated: %d bytes of %d", ErrCorrupt, v.n, v.size)
	}
	if v.h != nil {
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want.Hex {
			return fmt.Errorf("%w: digest mismatch: the blob is %s:%s", ErrCorrupt, v.want.Algorithm, got)
		}
	}
	return nil
}

// isIndex reports whether a media type is a multi-arch index.
func isIndex(mt types.MediaType) bool {
	return mt == types.OCIImageIndex || mt == types.DockerManifestList
}

// isManifest reports whether a media type is an image manifest.
func isManifest(mt types.MediaType) bool {
	return mt == types.OCIManifestSchema1 || mt == types.DockerManifestSchema2
}

// mediaTypeOf is a manifest's own mediaType field, to tell an index from a
// manifest when no descriptor says which (the root of a layout).
func mediaTypeOf(b []byte) types.MediaType {
	var probe struct {
		MediaType types.MediaType `json:"mediaType"`
		Manifests []any           `json:"manifests"`
		Layers    []any           `json:"layers"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return ""
	}
	switch {
	case probe.MediaType != "":
		return probe.MediaType
	case probe.Manifests != nil:
		return types.OCIImageIndex
	case probe.Layers != nil:
		return types.OCIManifestSchema1
	}
	return ""
}

// resolve walks from a manifest or index (b, of media type mt and digest
// dgst) to one image for the platform, and reads its configuration.
func resolve(ctx context.Context, st store, b []byte, mt types.MediaType, dgst string, platform string) (*resolved, error) {
	want, explicit, err := wantPlatform(platform)
	if err != nil {
		return nil, err
	}
	stored := int64(len(b))
	for depth := 0; ; depth++ {
		if mt == "" {
			mt = mediaTypeOf(b)
		}
		switch {
		case isIndex(mt):
			if depth >= maxNesting {
				return nil, fmt.Errorf("%w: indexes nested more than %d deep", ErrCorrupt, maxNesting)
			}
			idx, err := v1.ParseIndexManifest(bytes.NewReader(b))
			if err != nil {
				return nil, fmt.Errorf("index %s: %w: %w", dgst, ErrCorrupt, err)
			}
			d, err := choose(idx.Manifests, want, explicit)
			if err != nil {
				return nil, fmt.Errorf("index %s: %w", dgst, err)
			}
			if b, err = readBlob(ctx, st, d, MaxManifest, "manifest"); err != nil {
				return nil, err
			}
			stored += int64(len(b))
			mt, dgst = d.MediaType, d.Digest.String()
		case isManifest(mt):
			r, err := image(ctx, st, b, dgst, want, explicit)
			if err != nil {
				return nil, err
			}
			r.stored += stored
			return r, nil
		case mt == types.DockerManifestSchema1 || mt == types.DockerManifestSchema1Signed:
			return nil, fmt.Errorf("manifest %s: schema 1 manifests are not supported: push the image again with a current client", dgst)
		default:
			return nil, fmt.Errorf("manifest %s: %w: media type %q is neither an image manifest nor an index", dgst, ErrCorrupt, mt)
		}
	}
}

// choose picks the manifest of an index for the platform: the first whose
// platform satisfies want. Attestations and other unknown/unknown entries
// never match.
func choose(ds []v1.Descriptor, want v1.Platform, explicit bool) (v1.Descriptor, error) {
	var have []string
	for _, d := range ds {
		if d.Platform == nil {
			continue
		}
		have = append(have, d.Platform.String())
		if (isManifest(d.MediaType) || isIndex(d.MediaType)) && d.Platform.Satisfies(want) {
			return d, nil
		}
	}
	if len(have) == 0 && len(ds) == 1 {
		return ds[0], nil // an index of one image without a platform
	}
	how := "the host's platform"
	if explicit {
		how = "--platform"
	}
	slices.Sort(have)
	return v1.Descriptor{}, fmt.Errorf("no image for %s (%s) in the index; it has %s: choose one with --platform",
		want.String(), how, strings.Join(slices.Compact(have), ", "))
}

// image reads an image manifest's configuration and lists its layers.
func image(ctx context.Context, st store, b []byte, dgst string, want v1.Platform, explicit bool) (*resolved, error) {
	m, err := v1.ParseManifest(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w: %w", dgst, ErrCorrupt, err)
	}
	if len(m.Layers) > MaxLayers {
		return nil, fmt.Errorf("manifest %s: %w: %d layers, over %d", dgst, ErrTooLarge, len(m.Layers), MaxLayers)
	}
	switch m.Config.MediaType {
	case types.OCIConfigJSON, types.DockerConfigJSON:
	default:
		return nil, fmt.Errorf("manifest %s: not a container image (its configuration is %q)", dgst, m.Config.MediaType)
	}
	cb, err := readBlob(ctx, st, m.Config, MaxConfig, "configuration")
	if err != nil {
		return nil, err
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(cb))
	if err != nil {
		return nil, fmt.Errorf("configuration %s: %w: %w", m.Config.Digest, ErrCorrupt, err)
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("manifest %s: %w: %d layers but %d diff IDs in the configuration", dgst, ErrCorrupt, len(m.Layers), len(cfg.RootFS.DiffIDs))
	}
	r := &resolved{digest: dgst, config: cfg, stored: int64(len(cb)), explicit: explicit, platform: want}
	rs, ranged := st.(rangeStore)
	for i, d := range m.Layers {
		d := d
		r.stored += d.Size
		l := layerRef{desc: d, diffID: cfg.RootFS.DiffIDs[i],
			open: func(ctx context.Context) (io.ReadCloser, error) { return st.blob(ctx, d) }}
		if ranged {
			l.at = func(ctx context.Context) (io.ReaderAt, error) { return rs.blobAt(ctx, d) }
		}
		r.layers = append(r.layers, l)
	}
	return r, nil
}

// platformOf is the configuration's os/arch[/variant].
func platformOf(cfg *v1.ConfigFile) v1.Platform {
	return v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
}

// build applies the resolved image's layers into a tree.
func build(ctx context.Context, r *resolved, c *counter, opt Options) (*Image, error) {
	got := platformOf(r.config)
	if r.explicit && !got.Satisfies(r.platform) {
		return nil, fmt.Errorf("the image is %s, not %s as --platform asks", got.String(), r.platform.String())
	}
	c.total.Store(r.stored)
	t := NewTree(opt.Tree)
	im := &Image{Tree: t, Digest: r.digest, Platform: got.String(), Layers: len(r.layers), Stored: r.stored, fetched: c}
	for i, l := range r.layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ranged, err := applyRanged(ctx, t, i, l)
		if err != nil {
			return nil, fmt.Errorf("layer %d (%s): %w", i+1, l.desc.Digest, err)
		}
		if ranged {
			im.Ranged++
			continue
		}
		if err := applyStream(ctx, t, i, l); err != nil {
			return nil, fmt.Errorf("layer %d (%s): %w", i+1, layerName(l), err)
		}
	}
	if c.progress != nil {
		c.progress(c.n.Load(), r.stored)
	}
	return im, nil
}

func layerName(l layerRef) string {
	if l.desc.Digest != (v1.Hash{}) {
		return l.desc.Digest.String()
	}
	return "diff ID " + l.diffID.String()
}
