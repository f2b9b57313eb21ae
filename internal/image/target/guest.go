//go:build amilint_guest

package target

import (
	"context"
	"fmt"
	"io"
	"strings"
)

// The guest build (`-tags amilint_guest`) reads directories only: a Packer
// guest audits the root being built, so the disk image, tarball, container
// image and AWS readers and the embedded fixtures are left out, and with
// them most of the full binary's size. Each refuses with ErrGuestBuild.

// openFixture refuses `fixture:` targets (the default target included);
// ok is false for other specs.
func openFixture(spec string) (*Image, bool, error) {
	if !strings.HasPrefix(spec, FixturePrefix) {
		return nil, false, nil
	}
	return nil, true, fmt.Errorf("open target %s: the embedded fixtures are %w", spec, ErrGuestBuild)
}

// openAWS refuses `ami:` and `ebs:` targets; ok is false for other specs.
func openAWS(_ context.Context, spec string, _ Options) (im *Image, ok bool, err error) {
	if !strings.HasPrefix(spec, AMIPrefix) && !strings.HasPrefix(spec, EBSPrefix) {
		return nil, false, nil
	}
	return nil, true, fmt.Errorf("open target %s: AMIs and EBS snapshots are %w", spec, ErrGuestBuild)
}

// openContainer refuses container image targets (oci:, oci-archive:,
// docker-archive:, registry:); ok is false for other specs.
func openContainer(_ context.Context, spec string, _ Options) (im *Image, ok bool, err error) {
	if !IsContainerImage(spec) {
		return nil, false, nil
	}
	return nil, true, fmt.Errorf("open target %s: container images are %w", spec, ErrGuestBuild)
}

// openFile refuses a regular file or block device target.
func openFile(_ context.Context, spec string, _ Options) (*Image, error) {
	return nil, fmt.Errorf("open target %s: disk images, block devices and tarballs are %w", spec, ErrGuestBuild)
}

// openStdin refuses a tarball on standard input.
func openStdin(io.Reader) (*Image, error) {
	return nil, fmt.Errorf("open target %s: tarballs are %w", StdinTarget, ErrGuestBuild)
}
