package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"debug/buildinfo"
	"debug/elf"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's fixed layout: where the binary and the CA bundle are, and
// the unprivileged user it runs as (nobody, as the DaemonSet's runAsUser).
const (
	Entrypoint = "/usr/local/bin/amilint"
	CACerts    = "/etc/ssl/certs/ca-certificates.crt"
	UID        = 65534
	GID        = 65534
	// VersionSymbol is what the release's -ldflags -X sets to the version.
	VersionSymbol = "github.com/amilint/amilint/internal/cli.Version"
	// MainPackage is the package the binary must be built from.
	MainPackage = "github.com/amilint/amilint/cmd/amilint"
	// Source is the repository the image is built from (an OCI annotation).
	Source = "https://github.com/amilint/amilint"
)

// awsRoots are the root CAs AWS's API endpoints chain to (Amazon Trust
// Services and the Starfield root it cross-signs from): a bundle without
// them could not reach the EBS direct APIs.
var awsRoots = []string{"Amazon Root CA 1", "Starfield Services Root Certificate Authority - G2"}

// Options say what goes into the image.
type Options struct {
	// Version is the release version (v0.1.0), the image's tag.
	Version string
	// Binaries are the static amilint binaries by platform ("linux/amd64").
	Binaries map[string]string
	// CACerts is a PEM bundle of root certificates.
	CACerts string
	// Created is the image's creation time and every file's mtime, fixed
	// so a rebuild of the same inputs has the same digest.
	Created time.Time
}

// Build assembles the multi-platform OCI image index: per platform, one
// layer with the user database and the CA bundle, and one with the binary.
func Build(o Options) (v1.ImageIndex, error) {
	if o.Version == "" {
		return nil, errors.New("build image: no version")
	}
	if len(o.Binaries) == 0 {
		return nil, errors.New("build image: no binaries")
	}
	pemData, err := os.ReadFile(o.CACerts)
	if err != nil {
		return nil, fmt.Errorf("read CA bundle: %w", err)
	}
	if err := checkCABundle(pemData); err != nil {
		return nil, fmt.Errorf("CA bundle %s: %w", o.CACerts, err)
	}
	base, err := layer(o.Created, []file{
		{name: "etc/", mode: 0o755},
		{name: "etc/passwd", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnobody:x:%d:%d:nobody:/nonexistent:/sbin/nologin\n", UID, GID))},
		{name: "etc/group", mode: 0o644, data: []byte(fmt.Sprintf("root:x:0:\nnogroup:x:%d:\n", GID))},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: strings.TrimPrefix(CACerts, "/"), mode: 0o644, data: pemData},
	})
	if err != nil {
		return nil, err
	}
	platforms := make([]string, 0, len(o.Binaries))
	for p := range o.Binaries {
		platforms = append(platforms, p)
	}
	slices.Sort(platforms)
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var source string
	for _, p := range platforms {
		plat, err := v1.ParsePlatform(p)
		if err != nil {
			return nil, fmt.Errorf("platform %q: %w", p, err)
		}
		bin, err := os.ReadFile(o.Binaries[p])
		if err != nil {
			return nil, fmt.Errorf("read binary: %w", err)
		}
		src, err := checkBinary(bin, *plat)
		if err != nil {
			return nil, fmt.Errorf("binary %s for %s: %w", o.Binaries[p], p, err)
		}
		if source != "" && src != source {
			return nil, fmt.Errorf("binary %s for %s: built from %s, the others from %s", o.Binaries[p], p, src, source)
		}
		source = src
		app, err := layer(o.Created, []file{
			{name: "usr/", mode: 0o755},
			{name: "usr/local/", mode: 0o755},
			{name: "usr/local/bin/", mode: 0o755},
			{name: strings.TrimPrefix(Entrypoint, "/"), mode: 0o755, data: bin},
		})
		if err != nil {
			return nil, err
		}
		img, err := image(o, *plat, base, app)
		if err != nil {
			return nil, fmt.Errorf("image for %s: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: plat}})
	}
	return idx, nil
}

// image is one platform's image: the layers and a config that runs the
// binary as nobody.
func image(o Options, plat v1.Platform, layers ...v1.Layer) (v1.Image, error) {
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(img, layers...)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{
		"org.opencontainers.image.title":       "amilint",
		"org.opencontainers.image.description": "audits machine images and running hosts for systemd services nobody needs",
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.version":     o.Version,
	}
	img, err = mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: plat.Architecture,
		OS:           plat.OS,
		Variant:      plat.Variant,
		Created:      v1.Time{Time: o.Created},
		RootFS:       mustRootFS(img),
		Config: v1.Config{
			User:       fmt.Sprintf("%d:%d", UID, GID),
			Entrypoint: []string{Entrypoint},
			Cmd:        []string{"--help"},
			Env:        []string{"PATH=/usr/local/bin"},
			WorkingDir: "/",
			Labels:     labels,
		},
	})
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, map[string]string{
		"org.opencontainers.image.source":  Source,
		"org.opencontainers.image.version": o.Version,
		"org.opencontainers.image.created": o.Created.UTC().Format(time.RFC3339),
	}).(v1.Image), nil
}

// mustRootFS is the rootfs section of img's current config: the diff ids
// of its layers, which mutate.ConfigFile keeps only if given.
func mustRootFS(img v1.Image) v1.RootFS {
	cf, err := img.ConfigFile()
	if err != nil {
		return v1.RootFS{Type: "layers"}
	}
	return cf.RootFS
}

// file is one entry of a layer: a directory when name ends in "/".
type file struct {
	name string
	mode int64
	data []byte
}

// layer is a gzip layer of files, root-owned, every mtime t, in the order
// given, so the same files give the same digest.
func layer(t time.Time, files []file) (v1.Layer, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, ModTime: t, Format: tar.FormatPAX, Uname: "root", Gname: "root"}
		if strings.HasSuffix(f.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("layer %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	data := b.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// checkBinary refuses a binary the image could not run or that is not
// amilint: not an ELF for the platform's machine, dynamically linked (the
// image has no libc), or built from another main package. It returns the
// source the binary was built from (module version and VCS revision), which
// must be the same for every platform. (Whether -ldflags set the release's
// version is not recorded under -trimpath; make e2e-image runs
// `amilint version` from the image.)
func checkBinary(bin []byte, plat v1.Platform) (string, error) {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return "", fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[plat.Architecture]
	if plat.OS != "linux" || want == elf.EM_NONE {
		return "", fmt.Errorf("platform %s/%s: only linux/amd64 and linux/arm64 are built", plat.OS, plat.Architecture)
	}
	if f.Machine != want {
		return "", fmt.Errorf("machine %s, want %s", f.Machine, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", errors.New("dynamically linked (has a program interpreter); build with CGO_ENABLED=0")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		return "", fmt.Errorf("dynamically linked against %v; build with CGO_ENABLED=0", libs)
	}
	bi, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		return "", fmt.Errorf("no Go build information: %w", err)
	}
	if bi.Path != MainPackage {
		return "", fmt.Errorf("built from %s, not %s", bi.Path, MainPackage)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if settings["GOOS"] != plat.OS || settings["GOARCH"] != plat.Architecture {
		return "", fmt.Errorf("built for %s/%s", settings["GOOS"], settings["GOARCH"])
	}
	if settings["CGO_ENABLED"] != "0" {
		return "", errors.New("built with cgo; build with CGO_ENABLED=0")
	}
	src := bi.Main.Version
	if rev := settings["vcs.revision"]; rev != "" {
		src += " " + rev
		if settings["vcs.modified"] == "true" {
			src += "+modified"
		}
	}
	return src, nil
}

// checkCABundle requires a PEM bundle of CA certificates that holds the
// roots AWS's endpoints chain to.
func checkCABundle(data []byte) error {
	names := map[string]bool{}
	n := 0
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return fmt.Errorf("certificate %d: %w", n+1, err)
		}
		if !c.IsCA {
			return fmt.Errorf("certificate %d (%s) is not a CA", n+1, c.Subject.CommonName)
		}
		names[c.Subject.CommonName] = true
		n++
	}
	if n == 0 {
		return errors.New("no PEM certificates")
	}
	for _, r := range awsRoots {
		if !names[r] {
			return fmt.Errorf("lacks %q, a root the AWS APIs chain to", r)
		}
	}
	return nil
}
