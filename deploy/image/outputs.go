package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// refName is the OCI annotation that tags an index in a layout.
const refName = "org.opencontainers.image.ref.name"

// WriteOutputs writes the image index as an OCI layout under out/oci
// tagged with version, the pinned reference IMAGE:VERSION@DIGEST to
// out/reference, and, when daemonset is set, that manifest with its image
// pinned to out/daemonset.yaml. It returns the pinned reference.
func WriteOutputs(idx v1.ImageIndex, repo, version, daemonset, out string) (string, error) {
	tag, err := name.NewTag(repo+":"+version, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("image reference: %w", err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return "", err
	}
	pinned := Pinned(tag, digest)
	dir := filepath.Join(out, "oci")
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return "", fmt.Errorf("write layout: %w", err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{refName: version})); err != nil {
		return "", fmt.Errorf("write layout: %w", err)
	}
	if err := os.WriteFile(filepath.Join(out, "reference"), []byte(pinned+"\n"), 0o644); err != nil {
		return "", err
	}
	if daemonset != "" {
		b, err := os.ReadFile(daemonset)
		if err != nil {
			return "", err
		}
		pinnedDS, err := Pin(b, tag.String(), pinned)
		if err != nil {
			return "", fmt.Errorf("%s: %w", daemonset, err)
		}
		if err := os.WriteFile(filepath.Join(out, "daemonset.yaml"), pinnedDS, 0o644); err != nil {
			return "", err
		}
	}
	return pinned, nil
}

// Pinned is tag@digest: Kubernetes pulls the digest, and the tag stays
// readable.
func Pinned(tag name.Tag, digest v1.Hash) string {
	return tag.String() + "@" + digest.String()
}

// Pin rewrites the one "image: REF" line of a manifest to "image: PINNED".
// A manifest that names another image, or REF more than once, is refused:
// the DaemonSet must run the image just built.
func Pin(manifest []byte, ref, pinned string) ([]byte, error) {
	line := []byte("image: " + ref + "\n")
	switch n := bytes.Count(manifest, line); n {
	case 1:
		return bytes.Replace(manifest, line, []byte("image: "+pinned+"\n"), 1), nil
	case 0:
		return nil, fmt.Errorf("names no image %s (the image being built)", ref)
	default:
		return nil, fmt.Errorf("names image %s %d times, want once", ref, n)
	}
}

// ReadLayout reads the index a layout tags with version.
func ReadLayout(dir, version string) (v1.ImageIndex, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("read layout: %w", err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("read layout: %w", err)
	}
	m, err := top.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read layout: %w", err)
	}
	for _, d := range m.Manifests {
		if d.Annotations[refName] == version && d.MediaType.IsIndex() {
			return top.ImageIndex(d.Digest)
		}
	}
	return nil, fmt.Errorf("layout %s tags no image index %q", dir, version)
}

// Push writes idx to ref (a tag) and returns the pushed reference with
// its digest.
func Push(ctx context.Context, idx v1.ImageIndex, ref string, opts ...remote.Option) (string, error) {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("push: %w", err)
	}
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	if err := remote.WriteIndex(tag, idx, opts...); err != nil {
		return "", fmt.Errorf("push %s: %w", tag, err)
	}
	digest, err := idx.Digest()
	if err != nil {
		return "", err
	}
	return Pinned(tag, digest), nil
}

func runPush(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("push")
	dir := fs.String("layout", "", "OCI layout written by build")
	to := fs.String("to", "", "where to push: REPOSITORY:VERSION (the tag the layout holds)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *to == "" {
		return errors.New("-layout and -to are required")
	}
	tag, err := name.NewTag(*to, name.StrictValidation)
	if err != nil {
		return err
	}
	idx, err := ReadLayout(*dir, tag.TagStr())
	if err != nil {
		return err
	}
	ref, err := Push(ctx, idx, tag.String())
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, ref)
	return nil
}
