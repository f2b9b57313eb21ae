package oci

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/amilint/amilint/internal/image/fs/tarfs"
)

// refNameAnnotation names an image in a layout's index.json.
const refNameAnnotation = "org.opencontainers.image.ref.name"

// layoutStore reads the blobs of an OCI image layout directory through an
// os.Root: a link in it cannot lead outside the directory.
type layoutStore struct {
	root *os.Root
	c    *counter
}

func (s *layoutStore) blob(_ context.Context, d v1.Descriptor) (io.ReadCloser, error) {
	if err := checkDigest(d.Digest); err != nil {
		return nil, err
	}
	f, err := s.root.Open(path.Join("blobs", d.Digest.Algorithm, d.Digest.Hex))
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	return readCloser{s.c.reader(f), f}, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// checkDigest refuses a digest that could not name a blob file.
func checkDigest(h v1.Hash) error {
	if _, err := v1.NewHash(h.String()); err != nil || h.Algorithm != "sha256" {
		return fmt.Errorf("%w: digest %q", ErrCorrupt, h.String())
	}
	return nil
}

// OpenLayout opens the image tag names (or the only image) in the OCI image
// layout directory dir and applies its layers.
func OpenLayout(ctx context.Context, dir, tag string, opt Options) (*Image, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open layout: %w", err)
	}
	defer root.Close()
	c := &counter{progress: opt.Progress}
	if _, err := root.Stat("oci-layout"); err != nil {
		return nil, fmt.Errorf("%s is not an OCI image layout (no oci-layout file): %w", dir, err)
	}
	b, err := readRootFile(root, "index.json", c)
	if err != nil {
		return nil, err
	}
	st := &layoutStore{root: root, c: c}
	return openIndexFile(ctx, st, b, tag, c, opt)
}

// readRootFile reads a small file of a layout (index.json), bounded.
func readRootFile(root *os.Root, name string, c *counter) ([]byte, error) {
	f, err := root.Open(name)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(c.reader(f), MaxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if len(b) > MaxManifest {
		return nil, fmt.Errorf("%s: %w: over the %d-byte limit", name, ErrTooLarge, MaxManifest)
	}
	return b, nil
}

// openIndexFile resolves a layout's index.json (in a directory or an
// archive): the manifest tagged tag, or with no tag the only one, or the
// one for the platform when index.json lists one image per platform.
func openIndexFile(ctx context.Context, st store, b []byte, tag string, c *counter, opt Options) (*Image, error) {
	idx, err := v1.ParseIndexManifest(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("index.json: %w: %w", ErrCorrupt, err)
	}
	var r *resolved
	switch {
	case tag != "":
		var tags []string
		var found *v1.Descriptor
		for _, d := range idx.Manifests {
			n := d.Annotations[refNameAnnotation]
			if n == "" {
				continue
			}
			tags = append(tags, n)
			if found == nil && (n == tag || strings.HasSuffix(n, ":"+tag)) {
				found = &d
			}
		}
		if found == nil {
			return nil, fmt.Errorf("no image tagged %q in index.json (it has %s)", tag, tagList(tags))
		}
		r, err = resolveDesc(ctx, st, *found, opt.Platform)
	case len(idx.Manifests) == 1:
		r, err = resolveDesc(ctx, st, idx.Manifests[0], opt.Platform)
	default:
		// index.json itself lists one image per platform.
		r, err = resolve(ctx, st, b, types.OCIImageIndex, "index.json", opt.Platform)
		if err != nil && len(idx.Manifests) > 1 {
			var tags []string
			for _, d := range idx.Manifests {
				if n := d.Annotations[refNameAnnotation]; n != "" {
					tags = append(tags, n)
				}
			}
			if len(tags) > 0 {
				err = fmt.Errorf("%w; index.json holds several images: name one as oci:DIR:TAG (tags: %s)", err, tagList(tags))
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return build(ctx, r, c, opt)
}

func tagList(tags []string) string {
	if len(tags) == 0 {
		return "no tags"
	}
	slices.Sort(tags)
	return strings.Join(slices.Compact(tags), ", ")
}

// resolveDesc reads the manifest or index d names and resolves it.
func resolveDesc(ctx context.Context, st store, d v1.Descriptor, platform string) (*resolved, error) {
	b, err := readBlob(ctx, st, d, MaxManifest, "manifest")
	if err != nil {
		return nil, err
	}
	r, err := resolve(ctx, st, b, d.MediaType, d.Digest.String(), platform)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// member is a regular file of an uncompressed tar: where its content is.
type member struct {
	off, size int64
}

// archiveStore reads the blobs of an OCI layout or docker-archive held in
// an uncompressed tarball, in place.
type archiveStore struct {
	r       io.ReaderAt
	members map[string]member
	c       *counter
}

func (s *archiveStore) open(name string) (io.ReadCloser, error) {
	m, ok := s.members[name]
	if !ok {
		return nil, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
	}
	return io.NopCloser(s.c.reader(io.NewSectionReader(s.r, m.off, m.size))), nil
}

func (s *archiveStore) blob(_ context.Context, d v1.Descriptor) (io.ReadCloser, error) {
	if err := checkDigest(d.Digest); err != nil {
		return nil, err
	}
	return s.open(path.Join("blobs", d.Digest.Algorithm, d.Digest.Hex))
}

func (s *archiveStore) read(name string, limit int64) ([]byte, error) {
	rc, err := s.open(name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if s.members[name].size > limit {
		return nil, fmt.Errorf("%s: %w: over the %d-byte limit", name, ErrTooLarge, limit)
	}
	return io.ReadAll(rc)
}

// IsArchive reports whether the members of an uncompressed tarball are
// those of an image archive: docker save output (manifest.json) or an OCI
// layout (oci-layout and index.json).
func IsArchive(names map[string]bool) bool {
	return names["manifest.json"] || (names["oci-layout"] && names["index.json"])
}

// OpenArchive opens an image archive r of size bytes: an OCI layout in a
// tarball (oci-archive, and docker save output of Docker 25 and later,
// which holds one), or the classic docker-archive (manifest.json). tag
// chooses among several images.
func OpenArchive(ctx context.Context, r io.ReaderAt, size int64, tag string, opt Options) (*Image, error) {
	members, err := tarMembers(r, size)
	if err != nil {
		return nil, err
	}
	c := &counter{progress: opt.Progress}
	st := &archiveStore{r: r, members: members, c: c}
	if _, ok := members["index.json"]; ok {
		if _, ok := members["oci-layout"]; ok {
			b, err := st.read("index.json", MaxManifest)
			if err != nil {
				return nil, err
			}
			return openIndexFile(ctx, st, b, tag, c, opt)
		}
	}
	if _, ok := members["manifest.json"]; !ok {
		return nil, fmt.Errorf("not an image archive: no manifest.json, nor an OCI layout's index.json and oci-layout")
	}
	rs, err := dockerArchive(st, tag, opt.Platform)
	if err != nil {
		return nil, err
	}
	return build(ctx, rs, c, opt)
}

// dockerManifest is one image of a docker-archive's manifest.json.
type dockerManifest struct {
	Config   string
	RepoTags []string
	Layers   []string
}

// dockerArchive resolves the classic docker-archive format: a configuration
// named by its digest (HEX.json or blobs/sha256/HEX, checked), layers as
// tar members checked against the configuration's diff IDs (and their
// digest where the name is one).
func dockerArchive(st *archiveStore, tag, platform string) (*resolved, error) {
	b, err := st.read("manifest.json", MaxManifest)
	if err != nil {
		return nil, err
	}
	var ms []dockerManifest
	if err := json.Unmarshal(b, &ms); err != nil {
		return nil, fmt.Errorf("manifest.json: %w: %w", ErrCorrupt, err)
	}
	var m *dockerManifest
	var tags []string
	for k := range ms {
		tags = append(tags, ms[k].RepoTags...)
		if tag != "" && m == nil && slices.ContainsFunc(ms[k].RepoTags, func(t string) bool { return t == tag || strings.HasSuffix(t, ":"+tag) }) {
			m = &ms[k]
		}
	}
	switch {
	case tag != "" && m == nil:
		return nil, fmt.Errorf("no image tagged %q in manifest.json (it has %s)", tag, tagList(tags))
	case m == nil && len(ms) == 1:
		m = &ms[0]
	case m == nil:
		return nil, fmt.Errorf("manifest.json holds %d images: name one as docker-archive:FILE:TAG (tags: %s)", len(ms), tagList(tags))
	}
	if len(m.Layers) > MaxLayers {
		return nil, fmt.Errorf("manifest.json: %w: %d layers, over %d", ErrTooLarge, len(m.Layers), MaxLayers)
	}
	cfgDesc := v1.Descriptor{Size: st.members[m.Config].size}
	cfgDesc.Digest, _ = digestOfName(m.Config)
	rc, err := st.open(m.Config)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	cb, err := readBlob(context.Background(), staticStore{rc}, cfgDesc, MaxConfig, "configuration "+m.Config)
	if err != nil {
		return nil, err
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(cb))
	if err != nil {
		return nil, fmt.Errorf("configuration %s: %w: %w", m.Config, ErrCorrupt, err)
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("manifest.json: %w: %d layers but %d diff IDs in the configuration", ErrCorrupt, len(m.Layers), len(cfg.RootFS.DiffIDs))
	}
	want, explicit, err := wantPlatform(platform)
	if err != nil {
		return nil, err
	}
	r := &resolved{config: cfg, stored: int64(len(b) + len(cb)), explicit: explicit, platform: want}
	for i, p := range m.Layers {
		mem, ok := st.members[p]
		if !ok {
			return nil, fmt.Errorf("manifest.json: %w: layer %s is not in the archive", ErrCorrupt, p)
		}
		d := v1.Descriptor{Size: mem.size}
		d.Digest, _ = digestOfName(p)
		r.stored += mem.size
		r.layers = append(r.layers, layerRef{desc: d, diffID: cfg.RootFS.DiffIDs[i],
			open: func(context.Context) (io.ReadCloser, error) { return st.open(p) }})
	}
	return r, nil
}

// digestOfName is the digest a member's name spells (blobs/sha256/HEX,
// HEX.json, HEX/layer.tar is not one: the classic format names layers by
// an id that is not their digest).
func digestOfName(name string) (v1.Hash, bool) {
	var hexPart string
	switch {
	case strings.HasPrefix(name, "blobs/sha256/"):
		hexPart = strings.TrimPrefix(name, "blobs/sha256/")
	case strings.HasSuffix(name, ".json") && !strings.Contains(name, "/"):
		hexPart = strings.TrimSuffix(name, ".json")
	default:
		return v1.Hash{}, false
	}
	h, err := v1.NewHash("sha256:" + hexPart)
	if err != nil {
		return v1.Hash{}, false
	}
	return h, true
}

// staticStore hands out one reader, for readBlob over an opened member.
type staticStore struct{ rc io.ReadCloser }

func (s staticStore) blob(context.Context, v1.Descriptor) (io.ReadCloser, error) { return s.rc, nil }

// tarMembers maps the regular files of an uncompressed tarball to where
// their contents lie.
func tarMembers(r io.ReaderAt, size int64) (map[string]member, error) {
	if comp, ok := tarfs.Detect(r); !ok || comp != tarfs.Plain {
		return nil, fmt.Errorf("not an uncompressed tarball: an image archive is read in place (decompress it first)")
	}
	list, err := tarfs.Members(r, size, 0)
	if err != nil {
		return nil, err
	}
	out := make(map[string]member, len(list))
	for _, m := range list {
		if (m.Type == tar.TypeReg || m.Type == '\x00' /* pre-POSIX regular file */) && m.Offset >= 0 {
			out[m.Name] = member{off: m.Offset, size: m.Size}
		}
	}
	return out, nil
}
