//go:build !amilint_guest

package target

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/amilint/amilint/internal/image/fs/tarfs"
	"github.com/amilint/amilint/internal/image/oci"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// ociOptions are the options of the oci package for a target.
func ociOptions(opt Options) oci.Options {
	return oci.Options{Platform: opt.Platform, Progress: opt.Progress}
}

// openContainer opens the container image targets: an OCI layout, an
// image archive named by its prefix, a registry reference. ok is false for
// other specs.
func openContainer(ctx context.Context, spec string, opt Options) (im *Image, ok bool, err error) {
	if !IsContainerImage(spec) {
		return nil, false, nil
	}
	if err := opt.diskOnly(spec, "a container image"); err != nil {
		return nil, true, err
	}
	var img *oci.Image
	var kind, what string
	var closer io.Closer
	switch {
	case strings.HasPrefix(spec, RegistryPrefix):
		ref := strings.TrimPrefix(spec, RegistryPrefix)
		kind, what = "registry", "registry image "+ref
		img, err = oci.OpenRemote(ctx, ref, ociOptions(opt))
	case strings.HasPrefix(spec, OCIPrefix):
		dir, tag := splitTag(strings.TrimPrefix(spec, OCIPrefix), true)
		kind, what = "oci", "OCI image layout"
		img, err = oci.OpenLayout(ctx, dir, tag, ociOptions(opt))
	default:
		prefix := OCIArchivePrefix
		if strings.HasPrefix(spec, DockerArchivePrefix) {
			prefix = DockerArchivePrefix
		}
		path, tag := splitTag(strings.TrimPrefix(spec, prefix), false)
		var f *os.File
		if f, err = os.Open(path); err != nil {
			return nil, true, fmt.Errorf("open target %s: %w", spec, err)
		}
		closer = f
		kind, what = strings.TrimSuffix(prefix, ":"), "image archive"
		img, err = openArchive(ctx, f, tag, opt)
	}
	if err != nil {
		if closer != nil {
			closer.Close()
		}
		return nil, true, fmt.Errorf("open target %s: %w", spec, err)
	}
	return containerImage(spec, kind, what, img, closer), true, nil
}

// splitTag splits PATH[:TAG]: a path that exists as given keeps its
// colons; otherwise the text after the last colon is the tag.
func splitTag(s string, dir bool) (string, string) {
	if fi, err := os.Stat(s); err == nil && fi.IsDir() == dir {
		return s, ""
	}
	if i := strings.LastIndex(s, ":"); i > 0 && !strings.Contains(s[i:], "/") {
		return s[:i], s[i+1:]
	}
	return s, ""
}

// openArchive opens an image archive file.
func openArchive(ctx context.Context, f *os.File, tag string, opt Options) (*oci.Image, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	return oci.OpenArchive(ctx, f, fi.Size(), tag, ociOptions(opt))
}

// containerImage wraps an opened container image as a target Image.
func containerImage(spec, kind, what string, img *oci.Image, closer io.Closer) *Image {
	return &Image{Name: spec, Kind: kind, FS: rootfs.New(img.Tree), Stored: img.Stored,
		Detail:  what + ", " + img.Detail() + "; configuration contents kept, other files as metadata",
		closer:  closer,
		counter: fetchedOCI{img}}
}

// fetchedOCI reports an image's fetched bytes as the bytes read.
type fetchedOCI struct{ im *oci.Image }

func (f fetchedOCI) Bytes() int64 { return f.im.Fetched() }

// imageArchive names the kind of the uncompressed tarball r of size bytes
// when it is an image archive rather than a root filesystem: docker save
// output (manifest.json at its top) or an OCI layout (oci-layout and
// index.json); "" otherwise.
func imageArchive(r io.ReaderAt, size int64) string {
	if comp, ok := tarfs.Detect(r); !ok || comp != tarfs.Plain {
		return ""
	}
	ms, err := tarfs.Members(r, size, 0)
	if err != nil {
		return ""
	}
	names := map[string]bool{}
	for _, m := range ms {
		names[m.Name] = true
	}
	switch {
	case !oci.IsArchive(names):
		return ""
	case names["manifest.json"]:
		return "docker-archive"
	}
	return "oci-archive"
}

// notAnImageArchive refuses a compressed tarball that holds an image
// archive: it would otherwise be audited as a root filesystem with no
// systemd at all.
func notAnImageArchive(src *tarfs.FS) error {
	if _, err := src.Lstat("manifest.json"); err == nil {
		if _, err := src.Lstat("etc"); err != nil {
			return errors.New("a compressed image archive (docker save output): decompress it first, it is read in place")
		}
	}
	if _, err := src.Lstat("oci-layout"); err == nil {
		return errors.New("a compressed OCI image archive: decompress it first, it is read in place")
	}
	return nil
}
