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
	out, err := api.DescribeImages(ctx, &ec2.DescribeImagesInput{ImageIds: []string{id}})
	if err != nil {
		return "", fmt.Errorf("describe image %s: %w", id, err)
	}
	if len(out.Images) != 1 {
		return "", fmt.Errorf("describe image %s: %d images returned", id, len(out.Images))
	}
	im := out.Images[0]
	root := aws.ToString(im.RootDeviceName)
	for _, m := range im.BlockDeviceMappings {
		if aws.ToString(m.DeviceName) == root && m.Ebs != nil && aws.ToString(m.Ebs.SnapshotId) != "" {
			return aws.ToString(m.Ebs.SnapshotId), nil
		}
	}
	return "", fmt.Errorf("describe image %s: %w (root device %q)", id, ErrNoRootSnapshot, root)
}
