// Package target turns a TARGET argument into an image view: it recognises
// the target's kind (a directory, a tarball given as a file or on standard
// input as "-", a disk image, an AMI or EBS snapshot, a container image in
// an OCI layout, an archive or a registry, an embedded fixture) and opens
// it read-only behind rootfs; an ostree/bootc root's /usr/etc is read as
// its /etc. It never mounts,
// never needs root and never writes.
package target

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/amilint/amilint/fixtures"
	"github.com/amilint/amilint/internal/image/integrity"
	"github.com/amilint/amilint/internal/image/ostree"
	"github.com/amilint/amilint/internal/image/rootfs"
)

// FixturePrefix marks a target that names an embedded fixture tree, as in
// "fixture:dlami".
const FixturePrefix = "fixture:"

// DefaultTarget is what the CLI audits when the user gives no target: the
// DLAMI-like fixture whose enabled ecs.service is the incident the README
// tells.
const DefaultTarget = FixturePrefix + fixtures.Default

// StdinTarget is the TARGET that reads a root filesystem tarball from
// standard input ("docker export c | amilint scan -").
const StdinTarget = "-"

// AWS target prefixes.
const (
	AMIPrefix = "ami:"
	EBSPrefix = "ebs:"
)

// Container image target prefixes.
const (
	// OCIPrefix names an OCI image layout directory: oci:DIR[:TAG].
	OCIPrefix = "oci:"
	// OCIArchivePrefix names an OCI layout in a tarball:
	// oci-archive:FILE[:TAG].
	OCIArchivePrefix = "oci-archive:"
	// DockerArchivePrefix names `docker save` output:
	// docker-archive:FILE[:TAG] (the file alone is recognised too).
	DockerArchivePrefix = "docker-archive:"
	// RegistryPrefix names an image in a registry:
	// registry:HOST/REPO:TAG or registry:HOST/REPO@sha256:….
	RegistryPrefix = "registry:"
)

// ErrImageOption reports --platform given for a target that is not a
// container image, where it would mean nothing.
var ErrImageOption = errors.New("option for container images only")

// containerPrefixes are the prefixes openContainer handles.
var containerPrefixes = []string{OCIPrefix, OCIArchivePrefix, DockerArchivePrefix, RegistryPrefix}

// IsContainerImage reports whether spec names a container image by its
// prefix: a read-only target, which fix can refuse before reading it.
func IsContainerImage(spec string) bool {
	for _, p := range containerPrefixes {
		if strings.HasPrefix(spec, p) {
			return true
		}
	}
	return false
}

// ErrUnsupported reports a target kind amilint cannot read (yet).
var ErrUnsupported = errors.New("unsupported target")

// ErrGuestBuild reports a target kind the guest build of amilint leaves
// out (built with the amilint_guest tag: the binary the Packer plugin
// uploads into a guest, which audits the root being built, a directory).
var ErrGuestBuild = errors.New("not read by the guest build of amilint (the binary the Packer plugin uploads, which audits directories); use the full amilint")

// ErrDiskOption reports a disk image option (a partition, a backing file)
// given for a target that is not a disk image, where it would mean nothing.
var ErrDiskOption = errors.New("option for disk images only")

// Image is an opened target.
type Image struct {
	// Name is the target as the user spelled it; reports use it.
	Name string
	// Kind is "dir", "tar", "disk", "ami", "ebs", "oci", "oci-archive",
	// "docker-archive", "registry" or "fixture" ("tar" for a tarball on
	// standard input too).
	Kind string
	// FS is the chroot view of the image root.
	FS *rootfs.FS
	// Dir is the host directory of the root when the target is a directory
	// (the only kind fix can write to); "" otherwise.
	Dir string
	// Detail says where the root was found in a tarball or disk image
	// ("qcow2 image, gpt table, partition 2, ext4"); "" otherwise.
	Detail string
	// Warnings say, one line each, why the tree read may not be the state
	// the image boots with (a dirty XFS log: the tree is as last written
	// back); the CLI prints them on stderr.
	Warnings []string
	// Stored is the size of the image where it is stored, when the image
	// is fetched rather than read in place (a container image's manifest,
	// configuration and layers); 0 otherwise. BytesRead says how much of
	// it was fetched.
	Stored int64

	closer  io.Closer
	counter interface{ Bytes() int64 }
	check   *integrity.Checker
}

// Corruption lists, one line each, the structures of the image that failed
// their checksums and were read anyway, as Options.AllowCorrupt asks; it is
// empty otherwise (a mismatch is then an error). Reads still to come may
// add to it.
func (im *Image) Corruption() []string { return im.check.Lines() }

// BytesRead is how many bytes of the image file were read so far (0 for
// targets that are not image files).
func (im *Image) BytesRead() int64 {
	if im.counter == nil {
		return 0
	}
	return im.counter.Bytes()
}

// Close releases what Open acquired.
func (im *Image) Close() error {
	if im.closer == nil {
		return nil
	}
	return im.closer.Close()
}

// Options tune how targets are opened.
type Options struct {
	// Partition selects a partition of a disk image by number (1-based); 0
	// finds the root partition automatically.
	Partition int
	// Backing is the path of a qcow2 image's backing file or of a VHD or
	// VHDX differencing disk's parent; without it such an image is refused
	// with an error naming the file it wants.
	Backing string
	// Stdin is what the target "-" reads: a root filesystem tarball, read
	// once. The CLI sets it to the process's standard input; without it
	// "-" is refused.
	Stdin io.Reader
	// Progress, when set, is told how many bytes of a remote snapshot were
	// fetched out of how many it holds.
	Progress func(fetched, total int64)
	// Platform chooses the image of a multi-arch container image index
	// (os/arch[/variant]); "" means the host's. It is refused for targets
	// that are not container images.
	Platform string
	// AllowCorrupt reads on past a structure that fails its checksum,
	// reading it as stored, and records it (Image.Corruption) instead of
	// failing: a forensic look at a damaged image. What then cannot be
	// read at all is recorded too and skipped where systemd would skip it
	// (a directory); where nothing can be read without it (a superblock)
	// the target still fails.
	AllowCorrupt bool

	// otherVolumes are the volumes an AMI boots with beside its root
	// snapshot's disk, whose filesystems are unknown (rootfs.Disk.Other).
	otherVolumes []string
}

// checker returns the integrity.Checker of the target name: strict, or
// recording when AllowCorrupt.
func (opt Options) checker(name string) *integrity.Checker {
	if opt.AllowCorrupt {
		return integrity.Lenient(&integrity.Log{}).Within(name)
	}
	return integrity.Strict(name)
}

// Open opens spec.
func Open(ctx context.Context, spec string, opt Options) (*Image, error) {
	im, err := open(ctx, spec, opt)
	if err != nil {
		return nil, err
	}
	if opt.Platform != "" && !im.container() {
		im.Close()
		return nil, fmt.Errorf("open target %s: --platform %s: %w (this target is a %s)", spec, opt.Platform, ErrImageOption, im.Kind)
	}
	if v, ok := ostree.View(im.FS.Source()); ok {
		im.FS = im.FS.With(v)
		im.Detail = strings.TrimPrefix(im.Detail+"; /usr/etc read as /etc (ostree/bootc layout)", "; ")
	}
	return im, nil
}

// container reports whether the image is a container image.
func (im *Image) container() bool {
	switch im.Kind {
	case "oci", "oci-archive", "docker-archive", "registry":
		return true
	}
	return false
}

func open(ctx context.Context, spec string, opt Options) (*Image, error) {
	if spec == "" {
		return nil, fmt.Errorf("open target: %w", errors.New("empty target"))
	}
	if spec == StdinTarget {
		if err := opt.diskOnly(spec, "a tarball on standard input"); err != nil {
			return nil, err
		}
		return openStdin(opt.Stdin)
	}
	if strings.HasPrefix(spec, FixturePrefix) {
		if err := opt.diskOnly(spec, "an embedded fixture"); err != nil {
			return nil, err
		}
	}
	if im, ok, err := openFixture(spec); ok {
		return im, err
	}
	if im, ok, err := openAWS(ctx, spec, opt); ok {
		return im, err
	}
	if im, ok, err := openContainer(ctx, spec, opt); ok {
		return im, err
	}
	fi, err := os.Stat(spec)
	if err != nil {
		return nil, fmt.Errorf("open target: %w", err)
	}
	if fi.IsDir() {
		if err := opt.diskOnly(spec, "a directory"); err != nil {
			return nil, err
		}
		d, err := rootfs.OpenDir(spec)
		if err != nil {
			return nil, err
		}
		return &Image{Name: spec, Kind: "dir", FS: rootfs.New(d), Dir: spec, closer: d}, nil
	}
	if fi.Mode().IsRegular() || isBlockDevice(fi.Mode()) {
		return openFile(ctx, spec, opt)
	}
	return nil, fmt.Errorf("open target %s: %w", spec, ErrUnsupported)
}

// diskOnly refuses the disk image options for spec, a target of kind
// (worded for the message) that is not a disk image: silently ignoring a
// partition or a backing file would audit something else than asked.
func (opt Options) diskOnly(spec, kind string) error {
	var given []string
	if opt.Partition != 0 {
		given = append(given, fmt.Sprintf("--partition %d", opt.Partition))
	}
	if opt.Backing != "" {
		given = append(given, "--backing "+opt.Backing)
	}
	if len(given) == 0 {
		return nil
	}
	return fmt.Errorf("open target %s: %s: %w (this target is %s)", spec, strings.Join(given, ", "), ErrDiskOption, kind)
}

// isBlockDevice reports whether a mode is a block device's (an attached
// volume read as a raw disk).
func isBlockDevice(m fs.FileMode) bool {
	return m&fs.ModeDevice != 0 && m&fs.ModeCharDevice == 0
}
