package ebs

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// ImagesAPI is the part of the EC2 client used to resolve an AMI;
// *ec2.Client implements it.
type ImagesAPI interface {
	DescribeImages(ctx context.Context, in *ec2.DescribeImagesInput, opts ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error)
}

// ErrNoRootSnapshot reports an AMI with no EBS snapshot behind its root device.
var ErrNoRootSnapshot = errors.New("image has no root EBS snapshot")

// RootSnapshot returns the snapshot behind the root device of AMI id.
func RootSnapshot(ctx context.Context, api ImagesAPI, id string) (string, error) {
	root, _, err := Snapshots(ctx, api, id)
	return root, err
}

// Snapshots returns, from one DescribeImages call, the snapshot behind the
// root device of AMI id and the image's other EBS volumes, one line each
// ("/dev/sdb snap-…", or "/dev/sdf (a new empty volume)"), in the
// mapping's order: an instance launched from the image has them too, and
// their filesystems are not the root snapshot's. Instance-store
// (ephemeral) mappings hold no filesystem of the image and are left out.
func Snapshots(ctx context.Context, api ImagesAPI, id string) (root string, others []string, err error) {
	out, err := api.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{id}})
	if err != nil {
		return "", nil, fmt.Errorf("describe image %s: %w", id, err)
	}
	if len(out.Images) != 1 {
		return "", nil, fmt.Errorf("describe image %s: %d images returned", id, len(out.Images))
	}
	im := out.Images[0]
	rootDev := aws.ToString(im.RootDeviceName)
	for _, m := range im.BlockDeviceMappings {
		dev, snap := aws.ToString(m.DeviceName), ""
		if m.Ebs == nil {
			continue // instance store, or a mapping suppressed (NoDevice)
		}
		snap = aws.ToString(m.Ebs.SnapshotId)
		switch {
		case dev == rootDev && snap != "" && root == "":
			root = snap
		case snap != "":
			others = append(others, dev+" "+snap)
		default:
			others = append(others, dev+" (a new empty volume)")
		}
	}
	if root == "" {
		return "", nil, fmt.Errorf("describe image %s: %w (root device %q)", id, ErrNoRootSnapshot, rootDev)
	}
	return root, others, nil
}
